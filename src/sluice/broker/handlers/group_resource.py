"""The GROUP config resource (type 32, KIP-848): DescribeConfigs and IncrementalAlterConfigs of one group's
dynamic configs, in Kafka 4.1's terms (ConfigHelper.describeGroupConfigs, GroupConfig.validate)."""

from __future__ import annotations

from typing import Any

from sluice.broker.broker import Broker
from sluice.broker.group_configs import (
    BOOLEAN_TYPE,
    GROUP_CONFIGS,
    INT_TYPE,
    STRING_TYPE,
    broker_defaults,
    check_group_configs,
)
from sluice.broker.handlers.broker_resource import entry
from sluice.errors import ErrorCode, KafkaError

GROUP_CONFIG = 8  # ConfigSource of a value set on the group
DEFAULT_CONFIG = 5
MAX_GROUP_ID_BYTES = 255 * 4  # a bound on a resource name that becomes a key of a kept file


def _check_group_id(group_id: str) -> None:
    if not group_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    if len(group_id.encode()) > MAX_GROUP_ID_BYTES:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Group name is longer than {MAX_GROUP_ID_BYTES} bytes")


def describe_group(broker: Broker, R: Any, result: Any, request: Any, keys: Any) -> None:
    """Every group config (or those asked for): the group's value with source GROUP_CONFIG, else the broker's
    default with source DEFAULT_CONFIG; synonyms are the group value then the broker setting it overrides."""
    try:
        _check_group_id(result.resource_name)
    except KafkaError as exc:
        result.error_code, result.error_message = exc.code, exc.message
        return
    configured = broker.group_configs.configs(result.resource_name)
    defaults = broker_defaults(broker.config)
    for name, d in GROUP_CONFIGS.items():
        if keys and name not in keys:
            continue
        default_row = (d.broker_name, defaults[name], DEFAULT_CONFIG)
        if name in configured:
            value, source = configured[name], GROUP_CONFIG
            synonym_rows = [(name, value, GROUP_CONFIG), default_row]
        else:
            value, source, synonym_rows = defaults[name], DEFAULT_CONFIG, [default_row]
        config_type = {"INT": INT_TYPE, "BOOLEAN": BOOLEAN_TYPE}.get(d.kind, STRING_TYPE)
        result.configs.append(entry(R, name, value, source, config_type, None, synonym_rows, False, request))


def alter_group(broker: Broker, group_id: str, changes: dict[str, str | None], validate_only: bool) -> None:
    """Apply SET (a value) and DELETE (None) to the group's configs: validate the whole result, keep it
    durably, then make the coordinator act on it. Raises KafkaError with Kafka's code and text."""
    _check_group_id(group_id)
    configs = broker.group_configs.configs(group_id)
    for name, value in changes.items():
        if name not in GROUP_CONFIGS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        if value is None:
            configs.pop(name, None)
        else:
            configs[name] = value.strip()
    check_group_configs(configs, broker.config)
    if validate_only:
        return
    broker.group_configs.replace(group_id, configs)
    if broker.groups is not None:
        apply_group_overrides(broker, group_id)


def apply_group_overrides(broker: Broker, group_id: str) -> None:
    """Hand the group coordinator the configs it acts on for `group_id` (KIP-848 and share groups)."""
    coordinator = broker.groups.coordinator
    for overrides, table in (
        (broker.group_configs.coordinator_overrides(group_id), coordinator.consumer.group_overrides),
        (broker.group_configs.share_overrides(group_id), coordinator.share.group_overrides),
    ):
        if all(value is None for value in overrides):
            table.pop(group_id, None)
        else:
            table[group_id] = overrides
