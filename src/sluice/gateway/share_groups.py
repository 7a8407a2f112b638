"""The share backend's questions to a cluster: does it serve share groups (asked once per cluster), and what
is a share group set to (its lock duration, the gateway's ack timeout; where a new group starts).

Blocking calls, made from a worker or consumer thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from sluice.client.api_versions import BrokerApis, api_versions
from sluice.client.secure import connect_secure, unsupported_reason

from .config import ClusterConfig

log = logging.getLogger("sluice.gateway.consumer")

SHARE_FETCH_KEY = 78
SHARE_FEATURE = "share.version"
# Kafka's group.share.record.lock.duration.ms default: assumed when the group's config cannot be read.
DEFAULT_LOCK_SECONDS = 30.0
_GROUP_CONFIG_SOURCE = 8  # DescribeConfigs' ConfigSource of a value set on the group itself
_LOCK_CONFIG = "share.record.lock.duration.ms"
_RESET_CONFIG = "share.auto.offset.reset"


@dataclass(frozen=True)
class ShareSupport:
    served: bool
    reason: str


def _host_port(server: str) -> tuple[str, int]:
    address = server.split("://", 1)[-1]
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def share_support_of(server: str, apis: BrokerApis) -> ShareSupport:
    """What a broker's ApiVersions answer says about share groups (see `probe_share_support`)."""
    served = apis.versions.get(SHARE_FETCH_KEY)
    if served is None:
        return ShareSupport(False, f"{server} does not serve ShareFetch (ApiVersions lacks key 78)")
    level = apis.finalized.get(SHARE_FEATURE, 0)
    if apis.finalized and level < 1:
        return ShareSupport(
            False, f"{server}'s cluster has share groups off (feature {SHARE_FEATURE} is not finalized at 1+)"
        )
    features = f", {SHARE_FEATURE}={level}" if level else ""
    return ShareSupport(True, f"{server} serves ShareFetch v{served[0]}-{served[1]}{features}")


def probe_share_support(cluster: ClusterConfig, timeout: float) -> ShareSupport:
    """Whether the cluster serves share groups, from a bootstrap broker's ApiVersions: ShareFetch (key 78)
    listed, and, where the cluster finalizes feature levels (Kafka 4.x), `share.version` at 1 or more (Kafka
    still lists the share APIs with the feature off, and answers them UNSUPPORTED_VERSION).

    Raises OSError (or the wire client's errors) when no bootstrap broker answers."""
    settings = cluster.client_config()
    unsupported = unsupported_reason(settings)
    if unsupported is not None:
        return ShareSupport(True, f"not checked ({unsupported}): the setting is trusted")
    failure: Exception | None = None
    for server in cluster.bootstrap_servers:
        try:
            host, port = _host_port(server)
            with connect_secure(host, port, settings, timeout, client_id="sluice-gateway-probe") as client:
                apis = api_versions(client, features=True)
        except Exception as exc:  # the next bootstrap broker may answer
            failure = exc
            continue
        return share_support_of(server, apis)
    raise OSError(f"no bootstrap broker answered ApiVersions: {failure}")


def prepare_share_group(admin: AdminClient, group: str, initial_offset: str, timeout: float) -> float:
    """The group's lock duration in seconds; where the group leaves `share.auto.offset.reset` unset, it is
    set from the gateway's `initial_offset` (Kafka's default for share groups is latest, kafka-pixy's oldest).

    Raises KafkaException when the cluster cannot describe the group's configs."""
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = next(iter(admin.describe_configs([resource]).values())).result(timeout=timeout)
    lock = entries.get(_LOCK_CONFIG)
    reset = entries.get(_RESET_CONFIG)
    if reset is not None and int(reset.source) != _GROUP_CONFIG_SOURCE:
        wanted = "earliest" if initial_offset == "oldest" else "latest"
        change = ConfigEntry(_RESET_CONFIG, wanted, incremental_operation=AlterConfigOpType.SET)
        altered = admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[change])]
        )
        try:
            next(iter(altered.values())).result(timeout=timeout)
            log.info(
                "share group %s: %s set to %s (initial_offset %s)",
                group,
                _RESET_CONFIG,
                wanted,
                initial_offset,
            )
        except KafkaException as exc:
            log.warning("share group %s: setting %s=%s failed: %s", group, _RESET_CONFIG, wanted, exc)
    if lock is None or lock.value is None:
        return DEFAULT_LOCK_SECONDS
    return int(lock.value) / 1000.0
