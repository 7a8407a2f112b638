"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and a read-only broker view)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from sluice.broker.api import RequestContext, Respond, handles, response_class
from sluice.broker.broker import Broker, check_topic_name
from sluice.broker.config_defs import (
    BROKER_DEFAULT_SYNONYMS,
    LIST,
    PASSWORD,
    STRING,
    TOPIC_CONFIGS,
    list_operation,
    topic_config_problem,
)
from sluice.broker.dynamic_configs import DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG
from sluice.broker.handlers.broker_resource import alter_broker, describe_broker, entry, node_id_problem
from sluice.broker.handlers.group_resource import alter_group, describe_group
from sluice.errors import ErrorCode, KafkaError
from sluice.storage.api import TopicMeta
from sluice.storage.compaction.manager import compaction_status
from sluice.storage.config import (
    CLEANER_DIRTY_RATIO,
    CLEANER_LAST_CLEANED_MS,
    CLEANER_STATUS_PREFIX,
    validate_topic_configs,
)
from sluice.storage.metadata import topic_name_problem

DescribeConfigsResponse = response_class("DescribeConfigs")
AlterConfigsResponse = response_class("AlterConfigs")
IncrementalAlterConfigsResponse = response_class("IncrementalAlterConfigs")
ListConfigResourcesResponse = response_class("ListConfigResources")

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32
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
KAFKA_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
RESOURCE_TYPE_NAMES = {
    0: "UNKNOWN",
    2: "TOPIC",
    4: "BROKER",
    8: "BROKER_LOGGER",
    16: "CLIENT_METRICS",
    32: "GROUP",
}


CLEANER_STATUS = (CLEANER_DIRTY_RATIO, CLEANER_LAST_CLEANED_MS)


def _cleaner_status(broker: Broker, meta: Any, now_ms: int) -> dict[str, str]:
    """Read-only, sluice-specific entries of a compacted topic: per partition, the dirty ratio the cleaner
    goes by and when it last cleaned ("<partition>=<value>" joined by commas; -1 means never). Listed only
    to a DescribeConfigs that names them (sluice.client.configs).
    """
    config = meta.config
    if not config.compacts:
        return {}
    ratios, cleaned = [], []
    for index in range(meta.partitions):
        if (meta.name, index) not in broker.partitions:
            continue
        log = broker.storage.compactable_log(meta.name, index)
        if log is None:
            continue
        try:
            ratio, last_cleaned_ms = compaction_status(log, config, now_ms, broker.cleaner)
        except OSError:
            continue
        ratios.append(f"{index}={ratio:.4f}")
        cleaned.append(f"{index}={last_cleaned_ms}")
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
    # The broker tiers of the broker's name for it, as Kafka's ConfigHelper lists them: this node's dynamic
    # value, the cluster default (KIP-966's min.insync.replicas is always one), then the config file.
    store = broker.dynamic_configs
    for tier, source in ((store.node, DYNAMIC_BROKER_CONFIG), (store.default, DYNAMIC_DEFAULT_BROKER_CONFIG)):
        if d.broker_synonym in tier:
            synonyms.append((d.broker_synonym, tier[d.broker_synonym], source))
    static = store.static.topic_defaults.get(name)
    if static is not None:
        synonyms.append((d.broker_synonym, static, STATIC_BROKER_CONFIG))
    elif name in BROKER_DEFAULT_SYNONYMS:
        synonyms.append(
            (*BROKER_DEFAULT_SYNONYMS[name][:1], BROKER_DEFAULT_SYNONYMS[name][1], DEFAULT_CONFIG)
        )
    else:
        synonyms.append((d.broker_synonym, d.default, DEFAULT_CONFIG))
    return synonyms


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
    problem = topic_name_problem(result.resource_name)
    if problem:
        result.error_code, result.error_message = ErrorCode.INVALID_TOPIC_EXCEPTION, problem
        return
    meta = broker.storage.topic(result.resource_name)
    if meta is None:
        # Kafka's ConfigHelper answers an unknown topic with the code alone.
        result.error_code, result.error_message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        return
    result.configs = [
        entry(
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


def _describe_broker_logger(broker: Broker, R: Any, result: Any, request: Any, keys: Any) -> None:
    name = result.resource_name
    problem = None
    if name == "":
        problem = "Broker id must not be empty"
    elif name != str(broker.config.node_id):
        problem = node_id_problem(broker, name) or ""
        if problem.startswith("Unexpected"):
            problem = f"Unexpected broker id, expected {broker.config.node_id} but received {name}"
    if problem:
        result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, problem
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
        entry(
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
    describe = {
        TOPIC: _describe_topic,
        BROKER: describe_broker,
        BROKER_LOGGER: _describe_broker_logger,
        GROUP: describe_group,
    }.get(resource.resource_type)
    if describe is None:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = (
            f"Unsupported resource type: {RESOURCE_TYPE_NAMES.get(resource.resource_type, 'UNKNOWN')}"
        )
        return result
    # Kafka's ConfigHelper treats an empty key list as null: every config (kafka-python sends []).
    describe(broker, R, result, request, resource.configuration_keys or None)
    named = resource.configuration_keys or ()
    if resource.resource_type == TOPIC and not result.error_code and any(k in CLEANER_STATUS for k in named):
        # Only when named: a describe of every config lists what Kafka would, since clients compare the
        # whole list with what they set (confluent-kafka's test_incremental_alter_configs does).
        meta = broker.storage.topic(resource.resource_name)
        for name, value in _cleaner_status(broker, meta, now_ms).items():
            if name not in named:
                continue
            result.configs.append(entry(R, name, value, UNKNOWN_SOURCE, STRING, None, [], True, request))
    return result


@handles("DescribeConfigs")
def describe_configs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    return Respond(
        DescribeConfigsResponse(
            results=[_describe_one(broker, r, request, ctx.now_ms) for r in request.resources]
        )
    )


def _apply(
    broker: Broker, resource: Any, changes: dict[str, str | None], validate_only: bool
) -> tuple[ErrorCode, str | None]:
    """Change a topic's configs: the name, then existence, then the values. (librdkafka's test 0081 expects an
    unknown topic to answer UNKNOWN_TOPIC_OR_PARTITION even when its configs are also wrong.)"""
    try:
        if resource.resource_type != TOPIC:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource.resource_type}")
        if resource.resource_name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
        check_topic_name(resource.resource_name)
        if broker.storage.topic(resource.resource_name) is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{resource.resource_name}' does not exist."
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
    return _alter(broker, request, AlterConfigsResponse, incremental=False)


@handles("IncrementalAlterConfigs")
def incremental_alter_configs(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    return _alter(broker, request, IncrementalAlterConfigsResponse, incremental=True)


def _alter(broker: Broker, request: Any, response_cls: Any, *, incremental: bool) -> Respond:
    """AlterConfigs (each resource's whole set named) and IncrementalAlterConfigs (operations on keys): the
    request's shape checked first, then each resource by its type."""
    problems = _shape_problems(request.resources, incremental)
    responses = [
        _resource_response(
            response_cls,
            resource,
            *(problems.get(i) or _alter_one(broker, resource, incremental, request.validate_only)),
        )
        for i, resource in enumerate(request.resources)
    ]
    return Respond(response_cls(responses=responses))


def _alter_one(
    broker: Broker, resource: Any, incremental: bool, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    kind = resource.resource_type
    try:
        if kind == BROKER_LOGGER and incremental:
            return _alter_loggers(broker, resource, validate_only)
        if kind == BROKER:
            alter_broker(broker, resource, incremental, validate_only)
        elif kind == GROUP:
            alter_group(broker, resource.resource_name, _changes(broker, resource, incremental), validate_only)
        else:
            return _apply(broker, resource, _changes(broker, resource, incremental), validate_only)
    except KafkaError as exc:
        return exc.code, exc.message
    return ErrorCode.NONE, None


def _changes(broker: Broker, resource: Any, incremental: bool) -> dict[str, str | None]:
    """The configs a topic or group resource ends up with: IncrementalAlterConfigs changes the keys it names;
    AlterConfigs replaces the whole set, so keys it does not name go back to their defaults (Kafka's
    controller takes the legacy request for a group too)."""
    kind = resource.resource_type
    meta = broker.storage.topic(resource.resource_name) if kind == TOPIC else None
    if incremental:
        return _incremental_changes(dict(meta.configs) if meta else {}, resource.configs)
    if kind == GROUP:
        current: Any = broker.group_configs.configs(resource.resource_name)
    else:
        current = meta.configs if meta else ()
    return dict.fromkeys(current) | {c.name: c.value for c in resource.configs}


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
                operation = "APPEND" if c.config_operation == APPEND else "SUBTRACT"
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Can't {operation} to key {c.name} because its type is not LIST.",
                )
            base = changes.get(c.name) or current.get(c.name) or d.default or ""
            changes[c.name] = list_operation(base, c.value or "", c.config_operation == APPEND)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {c.config_operation}")
    return changes


def _alter_loggers(broker: Broker, resource: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
    """KIP-412: set or reset log levels of the running broker (they do not survive a restart, as in Kafka).
    Refusals in the words of Kafka's RuntimeLoggerManager."""
    node = broker.config.node_id
    try:
        requested = int(resource.resource_name)
    except ValueError:
        return ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {resource.resource_name}"
    if requested != node:
        # Kafka's text names its own id twice.
        return ErrorCode.INVALID_REQUEST, f"Unexpected node id. Expected {node}, but received {node}"
    changes: list[tuple[logging.Logger, int]] = []
    for c in resource.configs:
        logger = logging.getLogger() if c.name == "root" else logging.getLogger(c.name)
        if c.config_operation == SET:
            level = LOG_LEVELS.get((c.value or "").upper())
            if level is None:
                return (
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {c.name} to {c.value} as it is not a supported log level. "
                    f"Valid log levels are {', '.join(sorted(KAFKA_LOG_LEVELS))}",
                )
            changes.append((logger, level))
        elif c.config_operation == DELETE:
            if c.name == "root":
                return ErrorCode.INVALID_REQUEST, "Removing the log level of the root logger is not allowed"
            changes.append((logger, logging.NOTSET))
        elif c.config_operation in (APPEND, SUBTRACT):
            operation = "APPEND" if c.config_operation == APPEND else "SUBTRACT"
            return (
                ErrorCode.INVALID_REQUEST,
                f"{operation} operation is not allowed for the BROKER_LOGGER resource",
            )
        else:
            return (
                ErrorCode.INVALID_REQUEST,
                f"Unknown operation type {c.config_operation} is not allowed for the BROKER_LOGGER resource",
            )
    if not validate_only:
        for logger, level in changes:
            logger.setLevel(level)
    return ErrorCode.NONE, None


# ListConfigResources (KIP-1142): v0 (ListClientMetricsResources) lists client metrics resources only; v1 lists
# the kinds DescribeConfigs knows, all of them when the request names none.
CLIENT_METRICS = 16
LISTABLE_V0 = (CLIENT_METRICS,)
LISTABLE = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)


@handles("ListConfigResources")
def list_config_resources(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = ListConfigResourcesResponse
    supported = LISTABLE_V0 if ctx.api_version == 0 else LISTABLE
    wanted = list(request.resource_types or ()) or list(supported)
    if any(kind not in supported for kind in wanted):
        # Kafka's answer for a kind it cannot list.
        return Respond(R(error_code=ErrorCode.UNSUPPORTED_VERSION, config_resources=[]))
    # sluice keeps no client metrics subscriptions: that kind lists nothing. Groups list those holding configs.
    found = []
    if GROUP in wanted:
        found += [
            R.ConfigResource(resource_name=g, resource_type=GROUP)
            for g in sorted(broker.group_configs.groups)
        ]
    node = str(broker.config.node_id)
    for kind in (BROKER_LOGGER, BROKER):
        if kind in wanted:
            found.append(R.ConfigResource(resource_name=node, resource_type=kind))
    if TOPIC in wanted:
        found += [
            R.ConfigResource(resource_name=meta.name, resource_type=TOPIC)
            for meta in sorted(broker.storage.topics(), key=lambda m: m.name)
        ]
    return Respond(R(error_code=0, config_resources=found))
