"""Broker settings: each limit is named, with Kafka's default where Kafka has one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

LISTENER_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listener(value: str) -> tuple[str, str, int]:
    """`SASL_SSL://host:port` -> ("SASL_SSL", "host", port)."""
    protocol, sep, address = str(value).partition("://")
    host, colon, port = address.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise ValueError(f"listener {value!r} is not PROTOCOL://host:port")
    if protocol not in LISTENER_PROTOCOLS:
        raise ValueError(f"listener {value!r}: protocol must be one of {', '.join(LISTENER_PROTOCOLS)}")
    return protocol, host.strip("[]") or "0.0.0.0", int(port)


# Kafka's ranges of the group.share.* settings, and the ones that come as min/default/max triples.
SHARE_SETTING_RANGES = {
    "group_share_delivery_count_limit": (2, 10),
    "group_share_min_delivery_count_limit": (2, 5),
    "group_share_max_delivery_count_limit": (5, 25),
    "group_share_record_lock_duration_ms": (1_000, 3_600_000),
    "group_share_min_record_lock_duration_ms": (1_000, 30_000),
    "group_share_max_record_lock_duration_ms": (30_000, 3_600_000),
    "group_share_partition_max_record_locks": (100, 10_000),
    "group_share_min_partition_max_record_locks": (100, 2_000),
    "group_share_max_partition_max_record_locks": (2_000, 10_000),
    "group_share_max_size": (1, 1_000),
    "group_share_max_share_sessions": (1, 2**31 - 1),
    "group_share_assignment_interval_ms": (0, 2**31 - 1),
}
SHARE_BOUNDED = (
    "delivery_count_limit",
    "record_lock_duration_ms",
    "partition_max_record_locks",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "assignment_interval_ms",
)


# What Kafka's Utils.validHostPattern accepts as a host in max.connections.per.ip.overrides.
_HOST = re.compile(r"^[a-zA-Z0-9_.:\-\[\]%]+$")


def per_ip_overrides(value: dict[str, int] | str | None) -> dict[str, int]:
    """max.connections.per.ip.overrides as host -> limit, from a mapping or Kafka's "host:count,..." string;
    ValueError names what is wrong (Kafka's words for an address it cannot accept)."""
    if not value:
        return {}
    if isinstance(value, str):
        pairs = []
        for item in value.split(","):
            host, sep, count = item.strip().rpartition(":")
            if not sep or not host:
                raise ValueError(
                    f"max.connections.per.ip.overrides: {item.strip()!r} is not host:count (e.g. 10.0.0.7:50)"
                )
            pairs.append((host, count))
    elif isinstance(value, dict):
        pairs = [(str(host), count) for host, count in value.items()]
    else:
        raise ValueError(
            f"max.connections.per.ip.overrides must be a mapping or host:count,..., got {value!r}"
        )
    invalid = [host for host, _ in pairs if not _HOST.match(host)]
    if invalid:
        raise ValueError(f"max.connections.per.ip.overrides contains invalid addresses : {','.join(invalid)}")
    limits = {}
    for host, count in pairs:
        try:
            limits[host] = int(count)
        except (TypeError, ValueError):
            raise ValueError(
                f"max.connections.per.ip.overrides: the limit of {host} is not a number: {count!r}"
            ) from None
        if limits[host] < 0:
            raise ValueError(f"max.connections.per.ip.overrides: the limit of {host} is negative: {count}")
    return limits


def overrides_text(value: dict[str, int] | str) -> str:
    """max.connections.per.ip.overrides in Kafka's form, "host:count,host:count"."""
    if isinstance(value, str):
        return value
    return ",".join(f"{host}:{count}" for host, count in value.items())


@dataclass
class BrokerConfig:
    node_id: int = 1
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    # What clients are told to connect to; defaults to the listen address (the bound port when it was 0).
    advertised_host: str | None = None
    advertised_port: int | None = None
    # None keeps everything in memory (tests, throwaway brokers).
    data_dir: Path | None = Path("sluice-data")
    auto_create_topics: bool = True
    default_partitions: int = 1
    # Acknowledge acks=1/-1 produce only after fsync (group commit). False trades durability for speed.
    fsync_before_ack: bool = True
    # Group commits whose fsyncs have lately taken under this many ms on average run on the event loop
    # (cheaper than the hand-off to the fsync thread); slower ones run on that thread, so the loop keeps
    # serving meanwhile. 0: always on the thread.
    fsync_on_loop_below_ms: float = 0.5
    # socket.request.max.bytes
    max_request_bytes: int = 100 * 1024 * 1024
    # message.max.bytes: largest record batch accepted (topic max.message.bytes can lower or raise it).
    max_message_bytes: int = 1024 * 1024 + 12
    # fetch.max.bytes: largest fetch response the broker assembles, whatever the client asks.
    fetch_max_bytes: int = 55 * 1024 * 1024
    # Requests decoded but not yet answered, per connection, before the broker stops reading from it.
    max_in_flight_per_connection: int = 64
    # max.connections: client connections open at once; None (Kafka's default, no number) leaves only the
    # open-file bound: the soft RLIMIT_NOFILE less `reserved_descriptors` and a floor of segment files. At
    # that bound the connection quiet the longest (owing nothing) is closed so a new client still gets in.
    max_connections: int | None = None
    # max.connections.per.ip: connections one client address may hold (None: no limit); more are refused.
    max_connections_per_ip: int | None = None
    # max.connections.per.ip.overrides: address or host name -> its own limit, as a mapping or Kafka's
    # "host:count,host:count" string; a host name counts for every address it resolves to.
    max_connections_per_ip_overrides: dict[str, int] | str = field(default_factory=dict)
    # Descriptors no client connection and no cached segment file may take: index and checkpoint files
    # opened for a moment, the metadata journal, the admin API's sockets, pipes, logs, and under `sluice
    # serve` the gateway's and registry's own client connections. At most a quarter of the open-file limit.
    reserved_descriptors: int = 1024
    # connections.max.idle.ms: a connection with nothing received and nothing owed for this long is closed.
    connections_max_idle_ms: int = 600_000
    # A client that sent part of a request and then nothing for this long is cut off.
    partial_request_timeout_ms: int = 30_000
    # Long-poll ceiling even if the client asks for longer.
    max_fetch_wait_ms: int = 30_000
    retention_check_interval_ms: int = 60_000
    # Offsets whose bytes recovery found damaged (see `sluice storage verify`) answer Fetch with
    # CORRUPT_MESSAGE, as Kafka does; True lets consumers skip over them instead.
    skip_damaged_offsets: bool = False
    # Produce is refused with KAFKA_STORAGE_ERROR while the data dir's filesystem has less free space than
    # this (Redpanda's storage_min_free_bytes); None means max(1 GiB, 5% of the filesystem), 0 disables it.
    # Fetch, metadata, DeleteRecords, DeleteTopics and retention keep working, so space can be freed.
    min_free_bytes: int | None = None
    # Segment files held open at once (closed least recently used, opened again on demand); None means what
    # the open-file limit leaves after reserved_descriptors and the open client connections (so they yield
    # descriptors as connections come). The soft limit is raised to the hard one at start.
    open_segment_files: int | None = None
    # Group coordinator
    group_initial_rebalance_delay_ms: int = 300
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 1_000
    # KIP-848 consumer groups (group.protocol=consumer): the broker, not the client, sets these.
    consumer_group_session_timeout_ms: int = 45_000
    consumer_group_heartbeat_interval_ms: int = 5_000
    # Share groups (KIP-932), Kafka 4.3's group.share.* settings with its defaults; a group's own share.* config
    # must lie within each min/max pair (KIP-1240).
    group_share_delivery_count_limit: int = 5
    group_share_min_delivery_count_limit: int = 2
    group_share_max_delivery_count_limit: int = 10
    group_share_record_lock_duration_ms: int = 30_000
    group_share_min_record_lock_duration_ms: int = 15_000
    group_share_max_record_lock_duration_ms: int = 60_000
    # The in-flight cap of one share-partition: offsets from its start offset to its end offset.
    group_share_partition_max_record_locks: int = 2_000
    group_share_min_partition_max_record_locks: int = 100
    group_share_max_partition_max_record_locks: int = 4_000
    group_share_session_timeout_ms: int = 45_000
    group_share_min_session_timeout_ms: int = 45_000
    group_share_max_session_timeout_ms: int = 60_000
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_min_heartbeat_interval_ms: int = 5_000
    group_share_max_heartbeat_interval_ms: int = 15_000
    # KIP-1263: a share group's target assignment is recomputed at most this often.
    group_share_assignment_interval_ms: int = 1_000
    group_share_min_assignment_interval_ms: int = 0
    group_share_max_assignment_interval_ms: int = 15_000
    group_share_max_size: int = 200
    # Share sessions the broker keeps (one per member fetching); more are refused SHARE_SESSION_LIMIT_REACHED.
    group_share_max_share_sessions: int = 2_000
    # share.coordinator.state.topic.segment.bytes: __share_group_state is compacted by the log cleaner.
    share_coordinator_state_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_topic_partitions: int = 1
    offset_metadata_max_bytes: int = 4096
    # offsets.topic.segment.bytes: __consumer_offsets is compacted by the log cleaner, segment by segment.
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    # The log cleaner (Kafka's log.cleaner.*): compaction of topics whose cleanup.policy has "compact".
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    # Memory for the key -> offset map of one pass, shared by the cleaner threads.
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    # How long a cleaner thread sleeps when no partition is due.
    log_cleaner_backoff_ms: int = 15_000
    # Transactions: transaction.max.timeout.ms and transactional.id.expiration.ms.
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # transaction.state.log.segment.bytes: __transaction_state is compacted by the log cleaner.
    transaction_state_segment_bytes: int = 100 * 1024 * 1024
    topic_defaults: dict[str, str] = field(default_factory=dict)
    # ----- security (Kafka's names, snake_case) -----
    # `PROTOCOL://host:port` each, PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, at most one
    # listener per protocol. Empty: one PLAINTEXT listener on listen_host:listen_port (`--listen`).
    listeners: list[str] = field(default_factory=list)
    # Same shape; what Metadata tells a client that came through the listener of that protocol.
    advertised_listeners: list[str] = field(default_factory=list)
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: str = "none"  # none | requested | required
    sasl_enabled_mechanisms: list[str] = field(default_factory=lambda: ["SCRAM-SHA-256", "SCRAM-SHA-512"])
    super_users: list[str] = field(default_factory=list)
    authorizer: str | None = None  # "acl" turns authorization on
    allow_everyone_if_no_acl_found: bool = False
    # connections.max.reauth.ms (KIP-368): SASL sessions last this long, then clients re-authenticate. 0: forever.
    connections_max_reauth_ms: int = 0
    # connection.failed.authentication.delay.ms: the first failed login's answer waits this long; repeats
    # from the same host double it (up to 5 s).
    connection_failed_authentication_delay_ms: int = 100
    # Ports actually bound per protocol (a listener on port 0 gets one at start); not a setting.
    bound_ports: dict[str, int] = field(default_factory=dict)
    # HOST:PORT of the admin HTTP listener (/metrics and the /v1 admin API); None: no listener.
    admin_listen: str | None = None
    # Credentials every admin request must carry (Authorization header): {basic: {user: password},
    # bearer_tokens: [...]}, the gateway's `auth:` shape. None: the listener asks for none.
    admin_auth: dict[str, Any] | None = None
    # Serve the admin listener over HTTPS with ssl_certfile/ssl_keyfile (client certificates per ssl_client_auth).
    admin_tls: bool = False

    @property
    def advertised(self) -> tuple[str, int]:
        return self.advertised_host or self.listen_host, self.advertised_port or self.listen_port

    def listener_specs(self) -> list[tuple[str, str, int]]:
        """(protocol, host, port) of every listener."""
        if not self.listeners:
            return [("PLAINTEXT", self.listen_host, self.listen_port)]
        return [parse_listener(item) for item in self.listeners]

    def advertised_for(self, protocol: str) -> tuple[str, int]:
        """Where a client that connected through the `protocol` listener is told to connect."""
        for item in self.advertised_listeners:
            proto, host, port = parse_listener(item)
            if proto == protocol:
                return host, port
        if not self.listeners:
            return self.advertised
        for proto, host, port in self.listener_specs():
            if proto == protocol:
                return host, self.bound_ports.get(proto, port) or port
        return self.advertised

    def validate(self) -> None:
        """Refuse settings that cannot work, naming the setting (checked before any socket opens)."""
        from sluice.security.authn import MECHANISMS

        protocols = [proto for proto, _, _ in self.listener_specs()]
        if len(set(protocols)) != len(protocols):
            raise ValueError("listeners: at most one listener per protocol")
        for item in self.advertised_listeners:
            parse_listener(item)
        if any(p in ("SSL", "SASL_SSL") for p in protocols) and not (self.ssl_certfile and self.ssl_keyfile):
            raise ValueError("an SSL or SASL_SSL listener needs ssl_certfile and ssl_keyfile")
        if self.ssl_client_auth not in ("none", "requested", "required"):
            raise ValueError(
                f"ssl_client_auth must be none, requested or required, got {self.ssl_client_auth!r}"
            )
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise ValueError("ssl_client_auth needs ssl_cafile (the CA that signs client certificates)")
        unknown = [m for m in self.sasl_enabled_mechanisms if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"sasl_enabled_mechanisms: unknown {unknown} (known: {', '.join(MECHANISMS)})")
        if self.authorizer not in (None, "acl"):
            raise ValueError(f"authorizer must be 'acl' or absent, got {self.authorizer!r}")
        for principal in self.super_users:
            if ":" not in principal:
                raise ValueError(f"super_users: {principal!r} is not TYPE:NAME (e.g. User:admin)")
        self.admin_credentials()
        if not 0 <= self.fsync_on_loop_below_ms <= 1000:
            raise ValueError(f"fsync_on_loop_below_ms must be 0 to 1000, got {self.fsync_on_loop_below_ms}")
        if self.admin_tls and not (self.ssl_certfile and self.ssl_keyfile):
            raise ValueError("admin_tls needs ssl_certfile and ssl_keyfile")
        for name in ("max_connections", "max_connections_per_ip"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a whole number of connections, 0 or more, got {value!r}")
        if self.reserved_descriptors < 0:
            raise ValueError(f"reserved_descriptors must be 0 or more, got {self.reserved_descriptors}")
        overrides = per_ip_overrides(self.max_connections_per_ip_overrides)
        if self.max_connections_per_ip == 0 and not overrides:
            # Kafka's KafkaConfig rule and words.
            raise ValueError(
                "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."
            )
        self._validate_share_settings()

    def _validate_share_settings(self) -> None:
        """Kafka's start-up checks of group.share.*: each setting in its range, min <= default <= max."""
        for name, (low, high) in SHARE_SETTING_RANGES.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{name} must be between {low} and {high}, got {value}")
        for rest in SHARE_BOUNDED:
            low, value, high = (getattr(self, f"group_share_{kind}{rest}") for kind in ("min_", "", "max_"))
            if not low <= value <= high:
                raise ValueError(f"group_share_{rest} ({value}) must lie within its min ({low}) and max ({high})")
        if self.group_share_heartbeat_interval_ms >= self.group_share_session_timeout_ms:
            raise ValueError("group_share_heartbeat_interval_ms must be less than group_share_session_timeout_ms")
        if self.group_share_max_share_sessions < self.group_share_max_size:
            raise ValueError("group_share_max_share_sessions must be at least group_share_max_size")

    def admin_credentials(self) -> Any:
        """The parsed `admin_auth` (a ClientAuth), or None; ValueError names what is wrong."""
        if self.admin_auth is None:
            return None  # without importing the HTTP stack, which a broker without admin_auth may never load
        from sluice.security.http_auth import client_auth_from

        return client_auth_from(self.admin_auth, "admin_auth")

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> BrokerConfig:
        """Load a YAML file whose keys are this class's field names (dashes allowed for underscores)."""
        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping of settings")
        raw = raw.get("broker", raw)
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            name = str(key).replace("-", "_").replace(".", "_")
            if name not in known:
                raise ValueError(f"{path}: unknown broker setting {key!r}")
            values[name] = Path(value) if name == "data_dir" and value is not None else value
        # None means "not given" for every override but data_dir, where it means "keep nothing on disk".
        values.update({k: v for k, v in overrides.items() if v is not None or k == "data_dir"})
        return cls(**values)
