"""Dynamic group configs (KIP-848): what IncrementalAlterConfigs set on a GROUP resource (type 32).

Kept in `<data dir>/group-configs.json` (replaced atomically, so a kill -9 leaves the old or the new file).
A group config overrides the broker's group.* default for that group alone; the ones the KIP-848 coordinator
acts on (consumer.session.timeout.ms, consumer.heartbeat.interval.ms) take effect at the member's next
heartbeat, and a share group's (share.*) at its next heartbeat, fetch or acknowledgement. Names, types,
defaults, bounds and refusals follow Kafka 4.3's GroupConfig (KIP-1240: a share config must lie within the
broker's group.share.min/max settings as they are when it is set).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.broker.config import BrokerConfig
from sluice.broker.settings_file import SettingsFile
from sluice.errors import ErrorCode, KafkaError

GROUP_CONFIGS_FILE = "group-configs.json"
FILE_VERSION = 1
MAX_GROUPS = 100_000  # a bound on what clients can make the broker keep
MAX_VALUE_BYTES = 1024


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """One group config: its broker-level synonym (the default it overrides) and Kafka's bounds for it."""

    broker_name: str
    default: str
    kind: str  # "INT", "STRING" or "BOOLEAN"
    at_least: int = 1  # the config's own lower bound (ConfigDef's atLeast), checked as it is parsed
    minimum: tuple[str, int] | None = None  # (broker config name, its default) the value must not go below
    maximum: tuple[str, int] | None = None
    choices: tuple[str, ...] = ()


def _int_def(name: str, default: int, low: int | None, high: int, at_least: int = 1) -> GroupConfigDef:
    kind, rest = name.split(".", 1)
    broker_kind = f"group.{kind}"
    return GroupConfigDef(
        f"{broker_kind}.{rest}",
        str(default),
        "INT",
        at_least,
        None if low is None else (f"{broker_kind}.min.{rest}", low),
        (f"{broker_kind}.max.{rest}", high),
    )


# Kafka 4.3's GroupConfig. Where the broker has the setting (BrokerConfig's group_share_* fields), its
# current value is the default and the bounds; the numbers here are Kafka's defaults for the others.
# The order is Kafka's order of checking the bounds.
GROUP_CONFIGS: dict[str, GroupConfigDef] = {
    "consumer.heartbeat.interval.ms": _int_def("consumer.heartbeat.interval.ms", 5_000, 5_000, 15_000),
    "consumer.session.timeout.ms": _int_def("consumer.session.timeout.ms", 45_000, 45_000, 60_000),
    "share.heartbeat.interval.ms": _int_def("share.heartbeat.interval.ms", 5_000, 5_000, 15_000),
    "share.session.timeout.ms": _int_def("share.session.timeout.ms", 45_000, 45_000, 60_000),
    "share.record.lock.duration.ms": _int_def("share.record.lock.duration.ms", 30_000, 15_000, 60_000, 1_000),
    "share.delivery.count.limit": _int_def("share.delivery.count.limit", 5, 2, 10, 2),
    "share.partition.max.record.locks": _int_def("share.partition.max.record.locks", 2_000, 100, 4_000, 100),
    "share.assignment.interval.ms": _int_def("share.assignment.interval.ms", 1_000, 0, 15_000, 0),
    "streams.heartbeat.interval.ms": _int_def("streams.heartbeat.interval.ms", 5_000, 5_000, 15_000),
    "streams.session.timeout.ms": _int_def("streams.session.timeout.ms", 45_000, 45_000, 60_000),
    "streams.num.standby.replicas": GroupConfigDef(
        "group.streams.num.standby.replicas", "0", "INT", 0, None, ("group.streams.max.standby.replicas", 2)
    ),
    "share.auto.offset.reset": GroupConfigDef("share.auto.offset.reset", "latest", "STRING"),
    "share.isolation.level": GroupConfigDef(
        "share.isolation.level", "read_uncommitted", "STRING", choices=("read_committed", "read_uncommitted")
    ),
    "share.renew.acknowledge.enable": GroupConfigDef("share.renew.acknowledge.enable", "true", "BOOLEAN"),
}
BOOLEAN_TYPE, INT_TYPE, STRING_TYPE = 1, 3, 2  # DescribeConfigs config_type values


# The duration share.auto.offset.reset's by_duration takes: Java's Duration text, PnDTnHnMn.nS, not negative.
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def duration_ms(text: str) -> int:
    """A by_duration duration in milliseconds (`text` passed the group config check)."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    days, hours, minutes, seconds = (float(part or 0) for part in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def broker_setting(config: BrokerConfig, name: str, fallback: int) -> int:
    """The broker's value of a group.* setting (`group.share.max.size` is `config.group_share_max_size`),
    or `fallback` where the broker has no such setting."""
    value = getattr(config, name.replace(".", "_"), None)
    return fallback if value is None else int(value)


def broker_defaults(config: BrokerConfig) -> dict[str, str]:
    """The value of each group config for a group that sets none: the broker's own setting."""
    defaults = {name: d.default for name, d in GROUP_CONFIGS.items()}
    defaults["consumer.session.timeout.ms"] = str(config.consumer_group_session_timeout_ms)
    defaults["consumer.heartbeat.interval.ms"] = str(config.consumer_group_heartbeat_interval_ms)
    for name, d in GROUP_CONFIGS.items():
        if d.kind == "INT" and name.startswith("share."):
            defaults[name] = str(broker_setting(config, d.broker_name, int(d.default)))
    return defaults


def _parse(name: str, value: str) -> int | str:
    """ConfigDef.parse of one value: its type, then its own validator; raises with Kafka's text."""
    d = GROUP_CONFIGS[name]
    if len(value) > MAX_VALUE_BYTES:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value for configuration {name}: too long")
    if d.kind == "BOOLEAN":
        if value.lower() not in ("true", "false"):
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {value} for configuration {name}: Expected value to be either true or false",
            )
        return value.lower()
    if d.kind == "STRING":
        if d.choices and value not in d.choices:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {value} for configuration {name}: String must be one of: {', '.join(d.choices)}",
            )
        if name == "share.auto.offset.reset" and not (
            value in ("latest", "earliest")
            or (value.startswith("by_duration:") and _DURATION.fullmatch(value.removeprefix("by_duration:")))
        ):
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
                "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
            )
        return value
    try:
        number = int(value.strip())
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Invalid value {value} for configuration {name}: Not a number of type INT",
        ) from None
    if not -(2**31) <= number < 2**31:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Invalid value {value} for configuration {name}: Not a number of type INT",
        )
    if number < d.at_least:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Invalid value {number} for configuration {name}: Value must be at least {d.at_least}",
        )
    return number


def check_group_configs(props: Mapping[str, str], config: BrokerConfig) -> None:
    """Kafka's GroupConfig.validate of the set a group would hold, laid over the broker's defaults: names,
    then types, then the broker's bounds, then session timeouts above heartbeat intervals. Raises KafkaError
    (INVALID_CONFIG, as Kafka answers InvalidConfigurationException and ConfigException) with Kafka's text."""
    for name in props:
        if name not in GROUP_CONFIGS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
    combined = broker_defaults(config) | dict(props)
    values = {name: _parse(name, combined[name]) for name in GROUP_CONFIGS}
    for name, d in GROUP_CONFIGS.items():
        number = values[name]
        # Only the group's own values: a broker default lies within its bounds by construction in Kafka, and
        # sluice lets a broker set consumer.* outside Kafka's fixed bounds (fast test brokers do).
        if not isinstance(number, int) or name not in props:
            continue
        if d.minimum is not None and number < broker_setting(config, *d.minimum):
            raise KafkaError(
                ErrorCode.INVALID_CONFIG, f"{name} must be greater than or equal to {d.minimum[0]}"
            )
        if d.maximum is not None and number > broker_setting(config, *d.maximum):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be less than or equal to {d.maximum[0]}")
    for kind in ("consumer", "share", "streams"):
        session, interval = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        if int(values[session]) <= int(values[interval]):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{session} must be greater than {interval}")


def _parse_kept(raw: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The configs of each group in the file; a value that is not of its config's type raises."""
    groups = {
        str(group): {str(k): str(v) for k, v in configs.items()} for group, configs in raw["groups"].items()
    }
    for configs in groups.values():
        for name, value in configs.items():
            if GROUP_CONFIGS[name].kind == "INT":
                int(value)
    return groups


@dataclass
class GroupConfigs:
    """The configs set on each group, by group id (a group need not exist to hold them, as in Kafka)."""

    file: SettingsFile
    groups: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def open(cls, data_dir: Path | None) -> GroupConfigs:
        file = SettingsFile.in_data_dir(data_dir, GROUP_CONFIGS_FILE, FILE_VERSION, "the group configs")
        return cls(file, file.load(_parse_kept) or {})

    def configs(self, group_id: str) -> dict[str, str]:
        return dict(self.groups.get(group_id, {}))

    def replace(self, group_id: str, configs: dict[str, str]) -> None:
        """Make `configs` the whole set of that group, durably, then in memory."""
        groups = dict(self.groups)
        if configs:
            if group_id not in groups and len(groups) >= MAX_GROUPS:
                raise KafkaError(ErrorCode.POLICY_VIOLATION, f"At most {MAX_GROUPS} groups can hold configs")
            groups[group_id] = dict(configs)
        else:
            groups.pop(group_id, None)
        self.file.save({"groups": groups})
        self.groups = groups

    def int_value(self, group_id: str, name: str) -> int | None:
        value = self.groups.get(group_id, {}).get(name)
        return None if value is None else int(value.strip())

    def effective(self, group_id: str, name: str, config: BrokerConfig) -> int:
        """What a share group runs with: its own value, else the broker's; a value the broker's bounds have
        since moved away from is held within them (KIP-1240's clamp: the group's value stays as it was set)."""
        d = GROUP_CONFIGS[name]
        value = self.int_value(group_id, name)
        if value is None:
            return broker_setting(config, d.broker_name, int(d.default))
        if d.minimum is not None:
            value = max(value, broker_setting(config, *d.minimum))
        if d.maximum is not None:
            value = min(value, broker_setting(config, *d.maximum))
        return value

    def text(self, group_id: str, name: str) -> str:
        """A string or boolean group config's value (its default where the group sets none)."""
        return self.groups.get(group_id, {}).get(name, GROUP_CONFIGS[name].default)

    def share_overrides(self, group_id: str) -> tuple[int | None, int | None, int | None]:
        """What share-group membership acts on: (session timeout, heartbeat interval, assignment interval)."""
        return (
            self.int_value(group_id, "share.session.timeout.ms"),
            self.int_value(group_id, "share.heartbeat.interval.ms"),
            self.int_value(group_id, "share.assignment.interval.ms"),
        )

    def coordinator_overrides(self, group_id: str) -> tuple[int | None, int | None]:
        """What the KIP-848 coordinator acts on: (session timeout, heartbeat interval) set on the group."""
        return (
            self.int_value(group_id, "consumer.session.timeout.ms"),
            self.int_value(group_id, "consumer.heartbeat.interval.ms"),
        )
