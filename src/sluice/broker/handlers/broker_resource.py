"""The BROKER config resource: DescribeConfigs of this node or of the cluster default (""), and the
(Incremental)AlterConfigs of its dynamic configs (KIP-226), in Kafka's ConfigHelper/ConfigAdminManager terms."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sluice.broker.broker import Broker
from sluice.broker.config import BrokerConfig, overrides_text
from sluice.broker.config_defs import (
    BROKER_CONFIG_TYPES,
    BROKER_DEFAULT_SYNONYMS,
    LIST,
    PASSWORD,
    TOPIC_CONFIGS,
    list_operation,
)
from sluice.broker.dynamic_config_defs import DYNAMIC_BROKER_CONFIGS, INT_MAX
from sluice.broker.dynamic_configs import (
    DEFAULT_CONFIG,
    apply,
    base_name,
    check_broker_configs,
    check_size,
    elr_problem,
    synonyms,
)
from sluice.errors import ErrorCode, KafkaError

UNKNOWN_TYPE = 0
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def entry(
    R: Any,
    name: str,
    value: str | None,
    source: int,
    config_type: int,
    doc: str | None,
    synonym_rows: list[tuple[str, str | None, int]],
    read_only: bool,
    request: Any,
) -> Any:
    """One DescribeConfigs entry; a password's value is never shown (nor its synonyms' values)."""
    secret = config_type == PASSWORD
    return R.DescribeConfigsResourceResult(
        name=name,
        value=None if secret else value,
        read_only=read_only,
        is_default=source == DEFAULT_CONFIG,
        config_source=source,
        is_sensitive=secret,
        synonyms=[
            R.DescribeConfigsSynonym(name=n, value=None if secret else v, source=s)
            for n, v, s in synonym_rows
        ]
        if request.include_synonyms
        else [],
        config_type=config_type,
        documentation=doc if request.include_documentation else None,
    )


def static_settings(broker: Broker, c: BrokerConfig) -> dict[str, tuple[str | None, bool]]:
    """name -> (value, set by the operator) of the broker's settings as Kafka names them, from the config the
    broker started with (dynamic values are laid over these)."""
    default = BrokerConfig()
    host, port = c.advertised
    mine: dict[str, tuple[str | None, bool]] = {
        "advertised.listeners": (f"PLAINTEXT://{host}:{port}", c.advertised != default.advertised),
        "listeners": (f"PLAINTEXT://{c.listen_host}:{c.listen_port}", True),
        "log.dirs": (broker.log_dir()[0], True),
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
        "max.connections": (
            str(c.max_connections if c.max_connections is not None else INT_MAX),
            c.max_connections is not None,
        ),
        "max.connections.per.ip": (
            str(c.max_connections_per_ip if c.max_connections_per_ip is not None else INT_MAX),
            c.max_connections_per_ip is not None,
        ),
        "max.connections.per.ip.overrides": (
            overrides_text(c.max_connections_per_ip_overrides),
            bool(c.max_connections_per_ip_overrides),
        ),
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
    return mine


def _config_type(name: str) -> tuple[int, str | None]:
    base = base_name(name)
    d = DYNAMIC_BROKER_CONFIGS.get(base)
    if d is not None:
        return d.type, d.doc
    if base in BROKER_CONFIG_TYPES:
        return BROKER_CONFIG_TYPES[base]
    topic_def = next((t for t in TOPIC_CONFIGS.values() if t.broker_synonym == base), None)
    return (topic_def.type, topic_def.doc) if topic_def else (UNKNOWN_TYPE, None)


def _tiers(broker: Broker) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(set in the config file, Kafka's defaults) as name -> value."""
    # The running config, but with the values dynamic configs replace taken from before they did (the
    # bound port and such are only known once running).
    start = broker.dynamic_configs.static
    before = replace(
        broker.config,
        max_connections=start.max_connections,
        max_connections_per_ip=start.max_connections_per_ip,
        max_connections_per_ip_overrides=start.max_connections_per_ip_overrides,
        max_message_bytes=start.max_message_bytes,
        topic_defaults=start.topic_defaults,
    )
    settings = static_settings(broker, before)
    static = {name: value for name, (value, operator) in settings.items() if operator}
    defaults = {name: value for name, (value, operator) in settings.items() if not operator}
    for name, d in DYNAMIC_BROKER_CONFIGS.items():
        defaults.setdefault(name, d.default)
    return static, defaults


def node_id_problem(broker: Broker, name: str) -> str | None:
    """DescribeConfigs' words for a BROKER resource that is not this node nor ""."""
    if name in ("", str(broker.config.node_id)):
        return None
    try:
        int(name)
    except ValueError:
        return f"Broker id must be an integer, but it is: {name}"
    return f"Unexpected broker id, expected {broker.config.node_id} or empty string, but received {name}"


def describe_broker(broker: Broker, R: Any, result: Any, request: Any, keys: Any) -> None:
    problem = node_id_problem(broker, result.resource_name)
    if problem:
        result.error_code, result.error_message = ErrorCode.INVALID_REQUEST, problem
        return
    store = broker.dynamic_configs
    per_broker = result.resource_name != ""
    static, defaults = _tiers(broker)
    # Kafka lists every config of the node; for "" only the cluster-wide dynamic values.
    names = (
        set(static) | set(defaults) | set(store.node) | set(store.default)
        if per_broker
        else set(store.default)
    )
    configs = []
    for name in sorted(names):
        if keys is not None and name not in keys:
            continue
        rows = synonyms(name, store, static, defaults, per_broker)
        value, source = (rows[0][1], rows[0][2]) if rows else (None, DEFAULT_CONFIG)
        config_type, doc = _config_type(name)
        read_only = name not in DYNAMIC_BROKER_CONFIGS
        configs.append(entry(R, name, value, source, config_type, doc, rows, read_only, request))
    result.configs = configs


def _node_name_problem(broker: Broker, name: str) -> str | None:
    """ConfigAdminManager.validateResourceNameIsCurrentNodeId's words."""
    if name == "":
        return None
    try:
        node = int(name)
    except ValueError:
        return f"Node id must be an integer, but it is: {name}"
    if node != broker.config.node_id:
        return f"Unexpected broker id, expected {broker.config.node_id}, but received {name}"
    return None


def _incremental(current: dict[str, str], configs: list[Any]) -> dict[str, str]:
    """ConfigAdminManager.prepareIncrementalConfigs over the resource's stored configs."""
    props = dict(current)
    for c in configs:
        if c.config_operation == SET:
            props[c.name] = c.value
        elif c.config_operation == DELETE:
            props.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            word = "append" if c.config_operation == APPEND else "subtract"
            d = DYNAMIC_BROKER_CONFIGS.get(base_name(c.name))
            if d is None and _config_type(c.name)[0] == UNKNOWN_TYPE:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {c.name}")
            if _config_type(c.name)[0] != LIST:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG, f"Config value {word} is not allowed for config key: {c.name}"
                )
            base = props.get(c.name, d.default if d is not None else None) or ""
            props[c.name] = list_operation(base, c.value or "", c.config_operation == APPEND)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {c.config_operation}")
    return props


def alter_broker(broker: Broker, resource: Any, incremental: bool, validate_only: bool) -> None:
    """Set the dynamic configs of this node or of the cluster default; raises KafkaError with Kafka's text."""
    problem = _node_name_problem(broker, resource.resource_name)
    if problem:
        raise KafkaError(ErrorCode.INVALID_REQUEST, problem)
    store = broker.dynamic_configs
    per_broker = resource.resource_name != ""
    current = store.configs(per_broker)
    if incremental:
        props = _incremental(current, resource.configs)
    else:
        # The legacy AlterConfigs replaces the resource's whole set.
        props = {c.name: c.value for c in resource.configs}
    check_size(props)

    def in_force(name: str) -> str | None:
        static, defaults = _tiers(broker)
        value = store.value(name)
        return value if value is not None else static.get(name, defaults.get(name))

    check_broker_configs(props, per_broker, in_force)
    problem = elr_problem(per_broker, [c.name for c in resource.configs], props)
    if problem:
        raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
    if validate_only:
        return
    changed = set(current) | set(props)
    store.replace(per_broker, props)
    apply(broker.config, store, changed)
