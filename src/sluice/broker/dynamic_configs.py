"""Dynamic broker configs (KIP-226): what AlterConfigs set on this node or as the cluster-wide default.

Kept in `<data dir>/dynamic-broker-configs.json` (replaced atomically, so a kill -9 leaves the old or the new
file), layered over the broker's own settings: per-node value, then cluster default, then the config file,
then Kafka's default. Validation follows Kafka's DynamicBrokerConfig and ConfigAdminManager, words included.
The ones sluice acts on (see HONOURED) change the running broker at once; the rest are kept and reported.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.broker.config import BrokerConfig, per_ip_overrides
from sluice.broker.config_defs import TOPIC_CONFIGS, value_problem
from sluice.broker.dynamic_config_defs import (
    CLUSTER_LEVEL_LISTENER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    LISTENER_PREFIX,
    PER_BROKER_CONFIGS,
    SSL_RECONFIGURABLE,
    STATIC_BROKER_CONFIGS,
    THREAD_POOL_CONFIGS,
)
from sluice.broker.settings_file import SettingsFile
from sluice.errors import ErrorCode, KafkaError

DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"
FILE_VERSION = 1
MAX_CONFIGS = 1000  # per resource: a bound on what a client can make the broker keep
MAX_VALUE_BYTES = 64 * 1024

# DescribeConfigs ConfigSource values of the broker tiers, most specific first.
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's names of the one setting in several units (DynamicBrokerConfig.brokerConfigSynonyms).
_SYNONYM_GROUPS = [
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
]
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {name: group for group in _SYNONYM_GROUPS for name in group}

# KIP-966: Kafka 4.1 clusters run with Eligible Leader Replicas, and their controller keeps a cluster-level
# min.insync.replicas (the config file's value, written when the cluster first starts): every topic and
# broker reports it as a dynamic default, and it may be changed but neither removed nor set per broker.
MIN_INSYNC_REPLICAS = "min.insync.replicas"


def _set_max_connections(config: BrokerConfig, value: str | None, static: BrokerConfig) -> None:
    config.max_connections = int(value) if value is not None else static.max_connections


def _set_max_connections_per_ip(config: BrokerConfig, value: str | None, static: BrokerConfig) -> None:
    config.max_connections_per_ip = int(value) if value is not None else static.max_connections_per_ip


def _set_max_connections_per_ip_overrides(
    config: BrokerConfig, value: str | None, static: BrokerConfig
) -> None:
    config.max_connections_per_ip_overrides = (
        value if value is not None else static.max_connections_per_ip_overrides
    )


def _set_message_max_bytes(config: BrokerConfig, value: str | None, static: BrokerConfig) -> None:
    config.max_message_bytes = int(value) if value is not None else static.max_message_bytes


# Configs the running broker acts on at once: name -> how to apply the effective dynamic value (None: back
# to the static setting). The broker names of topic configs also become the defaults of topics created next.
HONOURED: dict[str, Callable[[BrokerConfig, str | None, BrokerConfig], None]] = {
    "max.connections": _set_max_connections,
    "max.connections.per.ip": _set_max_connections_per_ip,
    "max.connections.per.ip.overrides": _set_max_connections_per_ip_overrides,
    "message.max.bytes": _set_message_max_bytes,
}
# min.insync.replicas is reported, never copied into new topics: it refuses no write here (Kafka caps it at
# the replica count, one on this node; see handlers/produce.py).
_TOPIC_BY_BROKER_NAME = {
    d.broker_synonym: name
    for name, d in TOPIC_CONFIGS.items()
    if d.broker_synonym in DYNAMIC_BROKER_CONFIGS and name != MIN_INSYNC_REPLICAS
}


def scala_set(names: Iterable[str]) -> str:
    """How Kafka's messages print a Scala Set of names (Set(...) up to four, HashSet(...) beyond)."""
    items = sorted(names)
    return f"{'Set' if len(items) <= 4 else 'HashSet'}({', '.join(items)})"


def _names_to_values(kept: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in kept.items()}


def base_name(name: str) -> str:
    """The config a listener-prefixed name (listener.name.<listener>.<config>) sets."""
    match = LISTENER_PREFIX.match(name)
    return match.group(2) if match else name


def check_broker_configs(
    props: Mapping[str, str], per_broker: bool, current: Callable[[str], str | None]
) -> None:
    """Kafka's DynamicBrokerConfig.validate of the configs one BROKER resource would hold; raises KafkaError
    (INVALID_REQUEST, as Kafka wraps every refusal here) with Kafka's text. `current` gives a config's
    value in force now (thread pools may only halve or double)."""
    static = [name for name in props if name in STATIC_BROKER_CONFIGS]
    if static:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {scala_set(static)}"
        )
    unprefixed_ssl = [name for name in props if name in SSL_RECONFIGURABLE]
    if unprefixed_ssl:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "These security configs can be dynamically updated only per-listener using the listener prefix: "
            + scala_set(unprefixed_ssl),
        )
    by_base = {base_name(name): value for name, value in props.items()}
    for name, d in DYNAMIC_BROKER_CONFIGS.items():
        if name in by_base:
            problem = value_problem(d, name, by_base[name])
            if problem:
                raise KafkaError(ErrorCode.INVALID_REQUEST, problem)
    _check_per_ip_limits(props, current)
    if not per_broker:
        only_per_broker = [
            name
            for name in props
            if name in PER_BROKER_CONFIGS
            or (
                LISTENER_PREFIX.match(name) is not None
                and base_name(name) not in CLUSTER_LEVEL_LISTENER_CONFIGS
            )
        ]
        if only_per_broker:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "Cannot update these configs at default cluster level, broker id must be specified: "
                + scala_set(only_per_broker),
            )
    for name in sorted(THREAD_POOL_CONFIGS & props.keys()):
        old = current(name) or DYNAMIC_BROKER_CONFIGS[name].default or "1"
        _check_thread_count(name, int(props[name].strip()), int(old))


def _check_per_ip_limits(props: Mapping[str, str], current: Callable[[str], str | None]) -> None:
    """Kafka's KafkaConfig rules for max.connections.per.ip and its overrides, with its words."""
    per_ip_name, overrides_name = "max.connections.per.ip", "max.connections.per.ip.overrides"
    overrides = props[overrides_name] if overrides_name in props else current(overrides_name)
    try:
        parsed = per_ip_overrides(overrides)
    except ValueError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    per_ip = props[per_ip_name] if per_ip_name in props else current(per_ip_name)
    if per_ip is not None and per_ip.strip() == "0" and not parsed:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"{per_ip_name} can be set to zero only if {overrides_name} property is set.",
        )


def _check_thread_count(name: str, new: int, old: int) -> None:
    if new == old:
        return
    reason = f"Dynamic thread count update validation failed for {name}={new}"
    if new <= 0:
        reason += ", value should be at least 1"
    elif new < old // 2:
        reason += f", value should be at least half the current value {old}"
    elif new > old * 2:
        reason += f", value should not be greater than double the current value {old}"
    else:
        return
    # Kafka wraps the validator's ConfigException in ConfigException(name, value): this is its exact text.
    raise KafkaError(
        ErrorCode.INVALID_REQUEST,
        f"Invalid value org.apache.kafka.common.config.ConfigException: {reason} "
        "for configuration Invalid dynamic configuration",
    )


@dataclass
class DynamicBrokerConfigs:
    """The dynamic configs of this node ("broker") and the cluster-wide defaults ("default")."""

    file: SettingsFile
    node: dict[str, str] = field(default_factory=dict)
    default: dict[str, str] = field(default_factory=dict)
    # The broker's settings as its config file made them, before any dynamic value was laid over them.
    static: BrokerConfig = field(default_factory=BrokerConfig)

    @classmethod
    def start(cls, config: BrokerConfig) -> DynamicBrokerConfigs:
        """Load the stored configs and make `config` (the running broker's) act on them."""
        store = cls.open(config.data_dir)
        store.static = copy.deepcopy(config)
        # The config file's min.insync.replicas is only the cluster default's first value (below): topics
        # follow that default, as on Kafka, rather than keep a copy of the file's value made when created.
        config.topic_defaults.pop(MIN_INSYNC_REPLICAS, None)
        if MIN_INSYNC_REPLICAS not in store.default:
            # What Kafka's controller writes when a cluster with ELR first starts (or turns ELR on).
            value = (
                store.static.topic_defaults.get(MIN_INSYNC_REPLICAS)
                or TOPIC_CONFIGS[MIN_INSYNC_REPLICAS].default
            )
            with_elr = {**store.default, MIN_INSYNC_REPLICAS: str(value)}
            try:
                store.replace(False, with_elr)
            except KafkaError:
                # A full or read-only disk: in force all the same, written with the next change.
                store.default = with_elr
        apply(config, store, set(store.node) | set(store.default))
        return store

    @classmethod
    def open(cls, data_dir: Path | None) -> DynamicBrokerConfigs:
        # Passwords (ssl.*.password, sasl.jaas.config) may be among them: owner-only, like Kafka's files.
        file = SettingsFile.in_data_dir(
            data_dir, DYNAMIC_CONFIGS_FILE, FILE_VERSION, "the dynamic broker configs", mode=0o600
        )
        store = cls(file)
        kept = file.load(lambda raw: (_names_to_values(raw["broker"]), _names_to_values(raw["default"])))
        if kept is not None:
            store.node, store.default = kept
        return store

    def configs(self, per_broker: bool) -> dict[str, str]:
        return self.node if per_broker else self.default

    def replace(self, per_broker: bool, configs: dict[str, str]) -> None:
        """Make `configs` the whole set of that resource, durably, then in memory."""
        node, default = (configs, self.default) if per_broker else (self.node, configs)
        self.file.save({"broker": node, "default": default})
        self.node, self.default = dict(node), dict(default)

    def value(self, name: str) -> str | None:
        return self.node.get(name, self.default.get(name))


def elr_problem(per_broker: bool, named: Iterable[str], props: Mapping[str, str]) -> str | None:
    """The controller's refusal (INVALID_CONFIG) of a change to the BROKER resource whose configs would
    become `props`, asked with the config names `named`, while ELR is on; None when allowed."""
    if per_broker and MIN_INSYNC_REPLICAS in named:
        return f"Broker-level {MIN_INSYNC_REPLICAS} cannot be altered while ELR is enabled."
    if not per_broker and MIN_INSYNC_REPLICAS not in props:
        return f"Cluster-level {MIN_INSYNC_REPLICAS} cannot be removed while ELR is enabled."
    return None


def check_size(configs: Mapping[str, str]) -> None:
    if len(configs) > MAX_CONFIGS:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, f"a broker resource holds at most {MAX_CONFIGS} configs")
    for name, value in configs.items():
        if len(name) + len(value) > MAX_VALUE_BYTES:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"config {name} is over {MAX_VALUE_BYTES} bytes")


def apply(config: BrokerConfig, store: DynamicBrokerConfigs, names: Iterable[str]) -> None:
    """Make the running broker act on the effective values of `names` (after a change, or at start)."""
    static = store.static
    for name in names:
        value = store.value(name)
        if name in HONOURED:
            HONOURED[name](config, value, static)
        topic_name = _TOPIC_BY_BROKER_NAME.get(name)
        if topic_name is not None:
            if value is not None:
                config.topic_defaults[topic_name] = value
            elif topic_name in static.topic_defaults:
                config.topic_defaults[topic_name] = static.topic_defaults[topic_name]
            else:
                config.topic_defaults.pop(topic_name, None)


def synonyms(
    name: str,
    store: DynamicBrokerConfigs,
    static: Mapping[str, str | None],
    defaults: Mapping[str, str | None],
    per_broker: bool,
) -> list[tuple[str, str | None, int]]:
    """Kafka's ConfigHelper.configSynonyms: each tier (this node, cluster default, config file, default) in
    turn, each synonym name in Kafka's order; those before `name` itself are dropped."""
    names = BROKER_SYNONYMS.get(name, (name,))
    if name not in names:
        names = (name,)
    listener = LISTENER_PREFIX.match(name)
    if listener:
        names = (name, listener.group(2))
    tiers: list[tuple[Mapping[str, Any], int]] = [
        (store.node, DYNAMIC_BROKER_CONFIG),
        (store.default, DYNAMIC_DEFAULT_BROKER_CONFIG),
        (static, STATIC_BROKER_CONFIG),
        (defaults, DEFAULT_CONFIG),
    ]
    found = [
        (n, tier[n], source) for tier, source in tiers for n in names if n in tier and tier[n] is not None
    ]
    if not per_broker:
        found = [s for s in found if s[2] == DYNAMIC_DEFAULT_BROKER_CONFIG]
    while found and found[0][0] != name:
        found.pop(0)
    return found
