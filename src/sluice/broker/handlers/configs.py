"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and a read-only broker view)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from sluice.broker.api import RequestContext, Respond, handles, response_class
from sluice.broker.broker import Broker
from sluice.broker.config import BrokerConfig
from sluice.broker.config_defs import (
    BROKER_CONFIG_TYPES,
    BROKER_DEFAULT_SYNONYMS,
    LIST,
    PASSWORD,
    STRING,
    TOPIC_CONFIGS,
    topic_config_problem,
)
from sluice.errors import ErrorCode, KafkaError
from sluice.storage.api import TopicMeta
from sluice.storage.cleaner import plan_cleaning
from sluice.storage.config import (
    CLEANER_DIRTY_RATIO,
    CLEANER_LAST_CLEANED_MS,
    CLEANER_STATUS_PREFIX,
    validate_topic_configs,
)
from sluice.storage.disk import DiskPartitionLog

DescribeConfigsResponse = response_class("DescribeConfigs")
AlterConfigsResponse = response_class("AlterConfigs")
IncrementalAlterConfigsResponse = response_class("IncrementalAlterConfigs")

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
# ConfigSource values
UNKNOWN_SOURCE = 0
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6
# ConfigOperation values
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# Kafka's log4j levels, as DescribeConfigs/IncrementalAlterConfigs of a BROKER_LOGGER name them.
LOG_LEVELS = {"TRACE": 5, "DEBUG": 10, "INFO": 20, "WARN": 30, "ERROR": 40, "FATAL": 50, "OFF": 60}


def broker_configs(broker: Broker) -> list[tuple[str, str | None, int]]:
    """(name, value, source) of the broker's settings as Kafka names them: STATIC_BROKER_CONFIG where
    sluice's setting differs from its default (the operator set it), DEFAULT_CONFIG otherwise."""
    c = broker.config
    default = BrokerConfig()
    host, port = c.advertised
    log_dir = broker.log_dir()[0]
    mine = {
        "advertised.listeners": (f"PLAINTEXT://{host}:{port}", c.advertised != default.advertised),
        "listeners": (f"PLAINTEXT://{c.listen_host}:{c.listen_port}", True),
        "log.dirs": (log_dir, True),
        "node.id": (str(c.node_id), c.node_id != default.node_id),
        "broker.id": (str(c.node_id), c.node_id != default.node_id),
        "process.roles": ("broker,controller", True),
        "controller.quorum.voters": (f"{c.node_id}@{host}:{port}", True),
        "auto.create.topics.enable": (
            str(c.auto_create_topics).lower(),
            c.auto_create_topics != default.auto_create_topics,
        ),
        "num.partitions": (str(c.default_partitions), c.default_partitions != default.default_partitions),
        "default.replication.factor": ("1", False),
        "message.max.bytes": (str(c.max_message_bytes), c.max_message_bytes != default.max_message_bytes),
        "socket.request.max.bytes": (
            str(c.max_request_bytes),
            c.max_request_bytes != default.max_request_bytes,
        ),
        "fetch.max.bytes": (str(c.fetch_max_bytes), c.fetch_max_bytes != default.fetch_max_bytes),
        "max.connections": (str(c.max_connections), c.max_connections != default.max_connections),
        "log.retention.check.interval.ms": (
            str(c.retention_check_interval_ms),
            c.retention_check_interval_ms != default.retention_check_interval_ms,
        ),
        "offsets.topic.num.partitions": (
            str(c.offsets_topic_partitions),
            c.offsets_topic_partitions != default.offsets_topic_partitions,
        ),
        "offsets.topic.replication.factor": ("1", True),
        "transaction.state.log.replication.factor": ("1", True),
        "offset.metadata.max.bytes": (str(c.offset_metadata_max_bytes), False),
        "group.initial.rebalance.delay.ms": (str(c.group_initial_rebalance_delay_ms), True),
        "group.min.session.timeout.ms": (str(c.group_min_session_timeout_ms), True),
        "group.max.session.timeout.ms": (str(c.group_max_session_timeout_ms), True),
        "group.max.size": (str(c.group_max_size), True),
        "group.consumer.session.timeout.ms": (str(c.consumer_group_session_timeout_ms), True),
        "group.consumer.heartbeat.interval.ms": (str(c.consumer_group_heartbeat_interval_ms), True),
        "quota.window.num": ("11", False),
        "quota.window.size.seconds": ("1", False),
    }
    # The topic-level defaults, under their broker names (log.retention.ms, log.segment.bytes...).
    for topic_name, d in TOPIC_CONFIGS.items():
        if d.broker_synonym is None or d.broker_synonym in mine:
            continue
        if topic_name in c.topic_defaults:
            mine[d.broker_synonym] = (c.topic_defaults[topic_name], True)
        elif topic_name in BROKER_DEFAULT_SYNONYMS:
            # Kafka leaves log.retention.ms unset and states the default in hours.
            mine[d.broker_synonym] = (None, False)
            hours_name, hours = BROKER_DEFAULT_SYNONYMS[topic_name]
            mine[hours_name] = (hours, False)
        else:
            mine[d.broker_synonym] = (d.default, False)
    return [
        (name, value, STATIC_BROKER_CONFIG if static else DEFAULT_CONFIG)
        for name, (value, static) in mine.items()
    ]


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


def _topic_synonyms(broker: Broker, name: str, override: str | None) -> list[tuple[str, str | None, int]]:
    d = TOPIC_CONFIGS.get(name)
    synonyms: list[tuple[str, str | None, int]] = []
    if override is not None:
        synonyms.append((name, override, DYNAMIC_TOPIC_CONFIG))
    if d is None or d.broker_synonym is None:
        if d is not None and d.default is not None:
            synonyms.append((name, d.default, DEFAULT_CONFIG))
        return synonyms
    static = broker.config.topic_defaults.get(name)
    if static is not None:
        synonyms.append((d.broker_synonym, static, STATIC_BROKER_CONFIG))
    elif name in BROKER_DEFAULT_SYNONYMS:
        synonyms.append(
            (*BROKER_DEFAULT_SYNONYMS[name][:1], BROKER_DEFAULT_SYNONYMS[name][1], DEFAULT_CONFIG)
        )
    else:
        synonyms.append((d.broker_synonym, d.default, DEFAULT_CONFIG))
    return synonyms


def _entry(
    R: Any,
    name: str,
    value: str | None,
    source: int,
    config_type: int,
    doc: str | None,
    synonyms: list[tuple[str, str | None, int]],
    read_only: bool,
    request: Any,
) -> Any:
    return R.DescribeConfigsResourceResult(
        name=name,
        value=value,
        read_only=read_only,
        is_default=source == DEFAULT_CONFIG,
        config_source=source,
        is_sensitive=config_type == PASSWORD,
        synonyms=[R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in synonyms]
        if request.include_synonyms
        else [],
        config_type=config_type,
        documentation=doc if request.include_documentation else None,
    )


def _topic_rows(
    broker: Broker, meta: TopicMeta, keys: Any
) -> Iterator[tuple[str, str | None, int, Any, list[Any]]]:
    """(name, value, source, definition or None, synonyms) of each of the topic's configs, in name order."""
    for name in sorted(set(TOPIC_CONFIGS) | set(meta.configs)):
        if keys is not None and name not in keys:
            continue
        override = meta.configs.get(name)
        synonyms = _topic_synonyms(broker, name, override)
        value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (override, DYNAMIC_TOPIC_CONFIG)
        if name in BROKER_DEFAULT_SYNONYMS and override is None and source == DEFAULT_CONFIG:
            value = TOPIC_CONFIGS[name].default
        yield name, value, source, TOPIC_CONFIGS.get(name), synonyms


def topic_config_view(broker: Broker, meta: TopicMeta) -> list[tuple[str, str | None, int, bool]]:
    """(name, value, source, sensitive) of every config of the topic, as DescribeConfigs reports them; what a
    CreateTopics v5+ answer carries (KIP-525)."""
    return [
        (name, value, source, d is not None and d.type == PASSWORD)
        for name, value, source, d, _ in _topic_rows(broker, meta, None)
    ]


def _describe_topic(broker: Broker, R: Any, result: Any, request: Any, keys: Any) -> None:
    meta = broker.storage.topic(result.resource_name)
    if meta is None:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        result.error_message = f"topic {result.resource_name!r} does not exist"
        return
    result.configs = [
        _entry(
            R,
            name,
            value,
            source,
            d.type if d else STRING,
            d.doc if d else None,
            synonyms,
            False,
            request,
        )
        for name, value, source, d, synonyms in _topic_rows(broker, meta, keys)
    ]


def _describe_broker(broker: Broker, R: Any, result: Any, request: Any, keys: Any) -> None:
    if result.resource_name not in ("", str(broker.config.node_id)):
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = (
            f"unexpected broker id {result.resource_name!r}: this is node {broker.config.node_id}"
        )
        return
    configs = []
    for name, value, source in sorted(broker_configs(broker)):
        if keys is not None and name not in keys:
            continue
        config_type, doc = BROKER_CONFIG_TYPES.get(name, (0, None))
        if not config_type:
            topic_def = next((d for d in TOPIC_CONFIGS.values() if d.broker_synonym == name), None)
            config_type, doc = (topic_def.type, topic_def.doc) if topic_def else (STRING, None)
        synonyms = [(name, value, source)] if value is not None else []
        # sluice reads its settings at start: none can be changed while it runs (Kafka's read_only).
        configs.append(_entry(R, name, value, source, config_type, doc, synonyms, True, request))
    result.configs = configs


def _describe_broker_logger(broker: Broker, R: Any, result: Any, request: Any, keys: Any) -> None:
    if result.resource_name not in ("", str(broker.config.node_id)):
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = (
            f"unexpected broker id {result.resource_name!r}: this is node {broker.config.node_id}"
        )
        return
    loggers = {"root": logging.getLogger()}
    loggers.update(
        {
            name: logging.getLogger(name)
            for name in sorted(logging.root.manager.loggerDict)
            if name.startswith("sluice")
        }
    )
    result.configs = [
        _entry(
            R,
            name,
            logging.getLevelName(logger.getEffectiveLevel()),
            DYNAMIC_BROKER_LOGGER_CONFIG,
            STRING,
            None,
            [],
            False,
            request,
        )
        for name, logger in loggers.items()
        if keys is None or name in keys
    ]


def _describe_one(broker: Broker, resource: Any, request: Any, now_ms: int) -> Any:
    R = DescribeConfigsResponse
    result = R.DescribeConfigsResult(
        resource_type=resource.resource_type, resource_name=resource.resource_name
    )
    describe = {TOPIC: _describe_topic, BROKER: _describe_broker, BROKER_LOGGER: _describe_broker_logger}.get(
        resource.resource_type
    )
    if describe is None:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"resource type {resource.resource_type} is not supported"
        return result
    # Kafka's ConfigHelper treats an empty key list as null: every config (kafka-python sends []).
    describe(broker, R, result, request, resource.configuration_keys or None)
    if resource.resource_type == TOPIC and not result.error_code:
        meta = broker.storage.topic(resource.resource_name)
        for name, value in _cleaner_status(broker, meta, now_ms).items():
            if resource.configuration_keys and name not in resource.configuration_keys:
                continue
            result.configs.append(
                _entry(R, name, value, UNKNOWN_SOURCE, STRING, None, [], True, request)
            )
    return result


@handles("DescribeConfigs")
def describe_configs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    return Respond(
        DescribeConfigsResponse(results=[_describe_one(broker, r, request, ctx.now_ms) for r in request.resources])
    )


def _apply(
    broker: Broker, resource: Any, changes: dict[str, str | None], validate_only: bool
) -> tuple[ErrorCode, str | None]:
    try:
        if resource.resource_type in (BROKER, BROKER_LOGGER):
            if resource.resource_name not in ("", str(broker.config.node_id)):
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, f"unexpected broker id {resource.resource_name!r}"
                )
            # Kafka updates only its dynamic broker configs; sluice reads every setting at start.
            names = sorted(changes) or ["(none)"]
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"cannot update these configs dynamically: {', '.join(names)}; set them in the broker config file",
            )
        if resource.resource_type != TOPIC:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"resource type {resource.resource_type} cannot be altered"
            )
        if broker.storage.topic(resource.resource_name) is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.resource_name!r} does not exist"
            )
        status = {name: value for name, value in changes.items() if name.startswith(CLEANER_STATUS_PREFIX)}
        # The cleaner's status entries are listed by DescribeConfigs as read-only: say so, not "unknown".
        problem = (
            validate_topic_configs(status) or topic_config_problem(changes) or validate_topic_configs(changes)
        )
        if problem:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        if not validate_only:
            broker.storage.alter_topic_configs(resource.resource_name, changes)
    except KafkaError as exc:
        return exc.code, exc.message
    return ErrorCode.NONE, None


def _resource_response(response_cls: Any, resource: Any, code: ErrorCode, message: str | None) -> Any:
    return response_cls.AlterConfigsResourceResponse(
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
    )


def _shape_problems(resources: list[Any], incremental: bool) -> dict[int, tuple[ErrorCode, str]]:
    """Kafka's ConfigAdminManager.preprocess: refusals by the request's shape alone, before any resource is
    read or changed (a resource named twice refuses both)."""
    problems: dict[int, tuple[ErrorCode, str]] = {}
    first: dict[tuple[int, str], int] = {}
    for i, resource in enumerate(resources):
        key = (resource.resource_type, resource.resource_name)
        if key in first:
            for j in (first[key], i):
                problems[j] = (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            continue
        first[key] = i
        names = [c.name for c in resource.configs]
        if len(set(names)) != len(names):
            problems[i] = (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            continue
        nulls = [
            c.name
            for c in resource.configs
            if c.value is None and not (incremental and c.config_operation == DELETE)
        ]
        if nulls:
            problems[i] = (ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}")
    return problems


@handles("AlterConfigs")
def alter_configs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = AlterConfigsResponse
    responses = []
    problems = _shape_problems(request.resources, incremental=False)
    for i, resource in enumerate(request.resources):
        if i in problems:
            responses.append(_resource_response(R, resource, *problems[i]))
            continue
        meta = broker.storage.topic(resource.resource_name) if resource.resource_type == TOPIC else None
        # AlterConfigs replaces the whole set: keys not named go back to their defaults.
        changes: dict[str, str | None] = dict.fromkeys(meta.configs if meta else ())
        changes.update({c.name: c.value for c in resource.configs})
        responses.append(
            _resource_response(R, resource, *_apply(broker, resource, changes, request.validate_only))
        )
    return Respond(R(responses=responses))


def _incremental_changes(current: dict[str, str], configs: list[Any]) -> dict[str, str | None]:
    changes: dict[str, str | None] = {}
    for c in configs:
        if c.config_operation == SET:
            changes[c.name] = c.value
        elif c.config_operation == DELETE:
            changes[c.name] = None
        elif c.config_operation in (APPEND, SUBTRACT):
            d = TOPIC_CONFIGS.get(c.name)
            if d is None or d.type != LIST:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG, f"{c.name} is not a list config; APPEND/SUBTRACT do not apply"
                )
            base = changes.get(c.name) or current.get(c.name) or d.default or ""
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
    problems = _shape_problems(request.resources, incremental=True)
    for i, resource in enumerate(request.resources):
        if i in problems:
            responses.append(_resource_response(R, resource, *problems[i]))
            continue
        if resource.resource_type == BROKER_LOGGER:
            responses.append(
                _resource_response(R, resource, *_alter_loggers(broker, resource, request.validate_only))
            )
            continue
        meta = broker.storage.topic(resource.resource_name) if resource.resource_type == TOPIC else None
        try:
            changes = _incremental_changes(dict(meta.configs) if meta else {}, resource.configs)
            code, message = _apply(broker, resource, changes, request.validate_only)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        responses.append(_resource_response(R, resource, code, message))
    return Respond(R(responses=responses))


def _alter_loggers(broker: Broker, resource: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
    """KIP-412: set or reset log levels of the running broker (they do not survive a restart, as in Kafka)."""
    if resource.resource_name not in ("", str(broker.config.node_id)):
        return ErrorCode.INVALID_REQUEST, f"unexpected broker id {resource.resource_name!r}"
    changes: list[tuple[logging.Logger, int]] = []
    for c in resource.configs:
        logger = logging.getLogger() if c.name == "root" else logging.getLogger(c.name)
        if c.config_operation == SET:
            level = LOG_LEVELS.get((c.value or "").upper())
            if level is None:
                return (
                    ErrorCode.INVALID_CONFIG,
                    f"cannot set {c.name} to {c.value!r}: expected one of {sorted(LOG_LEVELS)}",
                )
            changes.append((logger, level))
        elif c.config_operation == DELETE:
            if c.name == "root":
                return ErrorCode.INVALID_REQUEST, "the root logger cannot be removed"
            changes.append((logger, logging.NOTSET))
        else:
            return (
                ErrorCode.INVALID_REQUEST,
                f"{c.name}: a logger level cannot be appended to or subtracted from",
            )
    if not validate_only:
        for logger, level in changes:
            logger.setLevel(level)
    return ErrorCode.NONE, None
