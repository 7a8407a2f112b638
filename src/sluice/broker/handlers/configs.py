"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and a read-only broker view)."""

from __future__ import annotations

from typing import Any

from sluice.broker.api import RequestContext, Respond, handles, response_class
from sluice.broker.broker import Broker
from sluice.errors import ErrorCode, KafkaError
from sluice.storage.cleaner import plan_cleaning
from sluice.storage.config import (
    CLEANER_DIRTY_RATIO,
    CLEANER_LAST_CLEANED_MS,
    CLEANER_STATUS_PREFIX,
    DEFAULT_CONFIGS,
    validate_topic_configs,
)
from sluice.storage.disk import DiskPartitionLog

DescribeConfigsResponse = response_class("DescribeConfigs")
AlterConfigsResponse = response_class("AlterConfigs")
IncrementalAlterConfigsResponse = response_class("IncrementalAlterConfigs")

TOPIC = 2
BROKER = 4
# ConfigSource values
UNKNOWN_SOURCE = 0
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# ConfigOperation values
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = frozenset({"cleanup.policy"})


def _broker_configs(broker: Broker) -> dict[str, str]:
    c = broker.config
    return {
        "broker.id": str(c.node_id),
        "auto.create.topics.enable": str(c.auto_create_topics).lower(),
        "num.partitions": str(c.default_partitions),
        "message.max.bytes": str(c.max_message_bytes),
        "socket.request.max.bytes": str(c.max_request_bytes),
        "fetch.max.bytes": str(c.fetch_max_bytes),
        "group.initial.rebalance.delay.ms": str(c.group_initial_rebalance_delay_ms),
        "group.min.session.timeout.ms": str(c.group_min_session_timeout_ms),
        "group.max.session.timeout.ms": str(c.group_max_session_timeout_ms),
        "offsets.topic.num.partitions": str(c.offsets_topic_partitions),
    }


def _cleaner_status(broker: Broker, meta: Any, now_ms: int) -> dict[str, str]:
    """Read-only, sluice-specific entries of a compacted topic: per partition, the dirty ratio the cleaner
    goes by and when it last cleaned ("<partition>=<value>" joined by commas; -1 means never).
    """
    config = meta.config
    if not config.compacts:
        return {}
    ratios, cleaned = [], []
    for index in range(meta.partitions):
        state = broker.partitions.get((meta.name, index))
        log = state.log if state is not None else None
        if not isinstance(log, DiskPartitionLog):
            continue
        try:
            ratio = plan_cleaning(log, config, now_ms).dirty_ratio
        except OSError:
            continue
        ratios.append(f"{index}={ratio:.4f}")
        cleaned.append(f"{index}={log.cleaner_checkpoint.last_cleaned_ms}")
    return {CLEANER_DIRTY_RATIO: ",".join(ratios), CLEANER_LAST_CLEANED_MS: ",".join(cleaned)}


def _describe_one(broker: Broker, resource: Any, version: int, now_ms: int) -> Any:
    R = DescribeConfigsResponse
    result = R.DescribeConfigsResult(resource_type=resource.resource_type, resource_name=resource.resource_name)
    if resource.resource_type == TOPIC:
        meta = broker.storage.topic(resource.resource_name)
        if meta is None:
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"topic {resource.resource_name!r} does not exist"
            return result
        entries = [(k, v, DEFAULT_CONFIG, True) for k, v in DEFAULT_CONFIGS.items() if k not in meta.configs]
        entries += [(k, v, DYNAMIC_TOPIC_CONFIG, False) for k, v in meta.configs.items()]
        entries += [(k, v, UNKNOWN_SOURCE, False) for k, v in _cleaner_status(broker, meta, now_ms).items()]
        read_only = False
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.config.node_id)):
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"unknown broker {resource.resource_name!r}"
            return result
        entries = [(k, v, STATIC_BROKER_CONFIG, False) for k, v in _broker_configs(broker).items()]
        read_only = True
    else:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"resource type {resource.resource_type} is not supported"
        return result
    keys = resource.configuration_keys
    result.configs = [
        R.DescribeConfigsResourceResult(
            name=name,
            value=value,
            read_only=read_only or name.startswith(CLEANER_STATUS_PREFIX),
            is_default=is_default,
            config_source=source,
            config_type=7 if name in LIST_CONFIGS else 0,
        )
        for name, value, source, is_default in sorted(entries)
        if keys is None or name in keys
    ]
    return result


@handles("DescribeConfigs")
def describe_configs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    return Respond(DescribeConfigsResponse(results=[_describe_one(broker, r, ctx.api_version, ctx.now_ms) for r in request.resources]))


def _apply(broker: Broker, resource: Any, changes: dict[str, str | None], validate_only: bool) -> tuple[ErrorCode, str | None]:
    try:
        if resource.resource_type != TOPIC:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "only topic configs can be altered on sluice")
        if broker.storage.topic(resource.resource_name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.resource_name!r} does not exist")
        problem = validate_topic_configs(changes)
        if problem:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        if not validate_only:
            broker.storage.alter_topic_configs(resource.resource_name, changes)
    except KafkaError as exc:
        return exc.code, exc.message
    return ErrorCode.NONE, None


def _resource_response(response_cls: Any, resource: Any, code: ErrorCode, message: str | None) -> Any:
    return response_cls.AlterConfigsResourceResponse(
        error_code=code, error_message=message, resource_type=resource.resource_type, resource_name=resource.resource_name
    )


@handles("AlterConfigs")
def alter_configs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = AlterConfigsResponse
    responses = []
    for resource in request.resources:
        meta = broker.storage.topic(resource.resource_name) if resource.resource_type == TOPIC else None
        # AlterConfigs replaces the whole set: keys not named go back to their defaults.
        changes: dict[str, str | None] = dict.fromkeys(meta.configs if meta else ())
        changes.update({c.name: c.value for c in resource.configs})
        responses.append(_resource_response(R, resource, *_apply(broker, resource, changes, request.validate_only)))
    return Respond(R(responses=responses))


def _incremental_changes(current: dict[str, str], configs: list[Any]) -> dict[str, str | None]:
    changes: dict[str, str | None] = {}
    for c in configs:
        if c.config_operation == SET:
            changes[c.name] = c.value
        elif c.config_operation == DELETE:
            changes[c.name] = None
        elif c.config_operation in (APPEND, SUBTRACT):
            if c.name not in LIST_CONFIGS:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{c.name} is not a list config; APPEND/SUBTRACT do not apply")
            base = changes.get(c.name) or current.get(c.name) or DEFAULT_CONFIGS.get(c.name, "")
            items = [i for i in base.split(",") if i]
            values = [v for v in (c.value or "").split(",") if v]
            if c.config_operation == APPEND:
                items += [v for v in values if v not in items]
            else:
                items = [i for i in items if i not in values]
            changes[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown config operation {c.config_operation}")
    return changes


@handles("IncrementalAlterConfigs")
def incremental_alter_configs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = IncrementalAlterConfigsResponse
    responses = []
    for resource in request.resources:
        meta = broker.storage.topic(resource.resource_name) if resource.resource_type == TOPIC else None
        try:
            changes = _incremental_changes(dict(meta.configs) if meta else {}, resource.configs)
            code, message = _apply(broker, resource, changes, request.validate_only)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        responses.append(_resource_response(R, resource, code, message))
    return Respond(R(responses=responses))
