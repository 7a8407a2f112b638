"""The gateway's settings: per cluster (producer, consumer, network, TLS towards Kafka) and for the gateway's
own listeners, with kafka-pixy's defaults. They are read from a kafka-pixy style YAML by
sluice.gateway.config_file."""

from __future__ import annotations

import fnmatch
import logging
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .auth import ClientAuth

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
# Sluice's own choices where kafka-pixy's defaults would cost latency (see the module docstring).
DEFAULT_LINGER_MS = 0
DEFAULT_FETCH_MAX_WAIT_SECONDS = 0.1

PARTITIONERS = ("hash", "murmur2", "random", "roundrobin")
# How ConsumeNAck/Ack (and ConsumeBatch/ConsumeStream) of a group are served: the gateway's own offset tracker
# over a classic consumer group, or a Kafka share group (KIP-932) whose broker keeps the acks.
TRACKER_BACKEND, SHARE_BACKEND = "tracker", "share"
BACKENDS = (TRACKER_BACKEND, SHARE_BACKEND)
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
REQUIRED_ACKS = {"no_response": 0, "wait_for_local": 1, "wait_for_all": -1}

# librdkafka's allowed ranges (CONFIGURATION.md) of the properties kafka-pixy keys map to.
_RETRY_BACKOFF_MS_RANGE = (1, 300_000)
_LINGER_MS_RANGE = (0, 900_000)
_REQUEST_TIMEOUT_MS_RANGE = (1, 900_000)
_FETCH_WAIT_MS_RANGE = (0, 300_000)
_FETCH_BYTES_RANGE = (1, 1_000_000_000)
_CONNECTION_SETUP_MS_RANGE = (1000, 2_147_483_647)
_SOCKET_TIMEOUT_MS_RANGE = (10, 300_000)
_INT32_MAX = 2_147_483_647


class ConfigError(ValueError):
    """The configuration file is malformed."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any, name: str) -> float:
    """Seconds from a Go-style duration ("500ms", "15s", "5m") or a bare number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ConfigError(f"{name}: not a duration: {value!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def _milliseconds(seconds: float) -> int:
    return round(seconds * 1000)


def _clamp(value: int, bounds: tuple[int, int]) -> int:
    return min(max(value, bounds[0]), bounds[1])


def _check_range(value: int, bounds: tuple[int, int], where: str, unit: str = "ms") -> int:
    low, high = bounds
    if not low <= value <= high:
        raise ConfigError(f"{where}: {value}{unit} is outside librdkafka's range {low}..{high}{unit}")
    return value


def _fixed_retry_backoff(seconds: float, where: str) -> dict[str, int]:
    # librdkafka backs off exponentially up to retry.backoff.max.ms (1s by default, capping anything longer);
    # sarama waits the same time before every retry, which the same value for both reproduces.
    backoff_ms = _check_range(_milliseconds(seconds), _RETRY_BACKOFF_MS_RANGE, where)
    return {"retry.backoff.ms": backoff_ms, "retry.backoff.max.ms": backoff_ms}


# With librdkafka's default (1 s) a consumer whose local queue fills up (queued.min.messages) stops fetching
# for a whole second: fast readers then stall once they have drained it, not just until there is room again.
FETCH_QUEUE_BACKOFF_MS = 10
# librdkafka properties a share consumer refuses at creation (librdkafka 2.15's rd_kafka_conf_finalize): the
# share group's own configs (share.auto.offset.reset, share.isolation.level, its session) take their place.
SHARE_CONSUMER_REFUSED = frozenset(
    {
        "allow.auto.create.topics",
        "auto.offset.reset",
        "consume.callback.max.messages",
        "enable.auto.commit",
        "enable.partition.eof",
        "fetch.error.backoff.ms",
        "fetch.queue.backoff.ms",
        "group.instance.id",
        "group.protocol",
        "group.protocol.type",
        "group.remote.assignor",
        "heartbeat.interval.ms",
        "isolation.level",
        "message.copy.max.bytes",
        "partition.assignment.strategy",
        "queued.max.messages.kbytes",
        "queued.min.messages",
        "session.timeout.ms",
        "socket.max.fails",
        "topic.blacklist",
    }
)


@dataclass
class ProducerSettings:
    partitioner: str = "hash"
    max_message_bytes: int = 1_000_000
    required_acks: str = "wait_for_all"
    timeout: float = 10.0
    # None: the key was absent, so librdkafka's (or sluice's) default applies.
    compression: str | None = None
    flush_bytes: int | None = None
    flush_frequency: float | None = None
    retry_backoff: float | None = None
    retry_max: int | None = None
    shutdown_timeout: float | None = None

    @property
    def shutdown_flush_seconds(self) -> float:
        """How long stopping the gateway waits for produced messages still undelivered."""
        return self.timeout if self.shutdown_timeout is None else self.shutdown_timeout

    def librdkafka(self, where: str = "producer") -> dict[str, Any]:
        """The librdkafka producer properties these settings map to."""
        message_timeout_ms = _milliseconds(self.timeout) or 1
        properties: dict[str, Any] = {
            "acks": REQUIRED_ACKS[self.required_acks],
            "message.max.bytes": max(self.max_message_bytes + 512, 1000),
            "message.timeout.ms": message_timeout_ms,
            "request.timeout.ms": _clamp(message_timeout_ms, _REQUEST_TIMEOUT_MS_RANGE),
            "linger.ms": DEFAULT_LINGER_MS,
        }
        if self.flush_frequency is not None:
            linger_ms = _milliseconds(self.flush_frequency)
            properties["linger.ms"] = _check_range(linger_ms, _LINGER_MS_RANGE, f"{where}.flush_frequency")
        if self.compression is not None:
            properties["compression.type"] = self.compression
        if self.flush_bytes:
            properties["batch.size"] = self.flush_bytes
        if self.retry_max is not None:
            properties["retries"] = self.retry_max
        if self.retry_backoff is not None:
            properties.update(_fixed_retry_backoff(self.retry_backoff, f"{where}.retry_backoff"))
        return properties


@dataclass
class ConsumerSettings:
    disabled: bool = False
    ack_timeout: float = 300.0
    long_polling_timeout: float = 3.0
    max_pending_messages: int = 300
    # Batch and stream callers hold many messages at once (16 streams with 200 credit each would
    # already pin 3,200): kafka-pixy's per-partition limit of 300 would throttle them, not protect anyone.
    max_pending_batch_messages: int = 5000
    max_retries: int = -1
    offsets_commit_interval: float = 0.5
    channel_buffer_size: int = 64
    subscription_timeout: float = 15.0
    initial_offset: str = "oldest"
    dead_letter_topic: str = ""
    session_timeout: float = 10.0
    fetch_max_wait: float = DEFAULT_FETCH_MAX_WAIT_SECONDS
    # None: the key was absent, so librdkafka's default applies.
    fetch_max_bytes: int | None = None
    retry_backoff: float | None = None
    # The backend of every group of the cluster, and per group (exact names first, then fnmatch patterns in
    # the order given). A share backend needs a cluster that serves share groups; elsewhere the tracker serves.
    backend: str = TRACKER_BACKEND
    group_backends: dict[str, str] = field(default_factory=dict)
    # Share backend: the records one share fetch acquires (librdkafka's max.poll.records, a soft bound: the
    # broker hands out whole record batches), and the share-group members one gateway runs per group and
    # topic (one fetches; the others only wait for the acks of messages handed out before it took over).
    share_max_poll_records: int = 500
    share_members: int = 4

    def backend_of(self, group: str) -> str:
        """The backend configured for `group` (whether the cluster can serve it is decided elsewhere)."""
        exact = self.group_backends.get(group)
        if exact is not None:
            return exact
        for pattern, backend in self.group_backends.items():
            if fnmatch.fnmatchcase(group, pattern):
                return backend
        return self.backend

    def librdkafka(self, where: str = "consumer") -> dict[str, Any]:
        """The librdkafka consumer properties these settings map to (group membership and fetching)."""
        session_ms = max(_milliseconds(self.session_timeout), 1000)
        properties: dict[str, Any] = {
            "auto.offset.reset": "earliest" if self.initial_offset == "oldest" else "latest",
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(min(1000, session_ms // 3), 100),
            "fetch.wait.max.ms": _check_range(
                _milliseconds(self.fetch_max_wait), _FETCH_WAIT_MS_RANGE, f"{where}.fetch_max_wait"
            ),
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        }
        if self.fetch_max_bytes is not None:
            properties["max.partition.fetch.bytes"] = _check_range(
                self.fetch_max_bytes, _FETCH_BYTES_RANGE, f"{where}.fetch_max_bytes", unit=""
            )
        if self.retry_backoff is not None:
            properties.update(_fixed_retry_backoff(self.retry_backoff, f"{where}.retry_backoff"))
        return properties


@dataclass
class NetSettings:
    dial_timeout: float | None = None
    read_timeout: float | None = None
    write_timeout: float | None = None

    def librdkafka(self) -> dict[str, Any]:
        """Socket timeouts for every librdkafka client of the cluster, clamped to librdkafka's ranges."""
        properties: dict[str, Any] = {}
        if self.dial_timeout is not None:
            properties["socket.connection.setup.timeout.ms"] = _clamp(
                _milliseconds(self.dial_timeout), _CONNECTION_SETUP_MS_RANGE
            )
        # librdkafka has one timeout for a whole request, sending and answer alike.
        io_timeouts = [t for t in (self.read_timeout, self.write_timeout) if t is not None]
        if io_timeouts:
            properties["socket.timeout.ms"] = _clamp(
                _milliseconds(max(io_timeouts)), _SOCKET_TIMEOUT_MS_RANGE
            )
        return properties


@dataclass(frozen=True)
class ListenerTLS:
    """Certificate (chain) and private key, PEM files, of one of the gateway's listeners; with
    `client_ca_path`, clients must present a certificate that CA signed (mutual TLS)."""

    certificate_path: str
    key_path: str
    client_ca_path: str | None = None

    def server_ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certificate_path, self.key_path)
        if self.client_ca_path:
            context.load_verify_locations(cafile=self.client_ca_path)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_ca_pem(self) -> bytes | None:
        return Path(self.client_ca_path).read_bytes() if self.client_ca_path else None

    def certificate_chain_pem(self) -> bytes:
        return Path(self.certificate_path).read_bytes()

    def private_key_pem(self) -> bytes:
        return Path(self.key_path).read_bytes()


@dataclass
class ClusterConfig:
    name: str
    bootstrap_servers: list[str]
    # TLS and SASL settings derived from the kafka section.
    security: dict[str, Any] = field(default_factory=dict)
    producer: ProducerSettings = field(default_factory=ProducerSettings)
    consumer: ConsumerSettings = field(default_factory=ConsumerSettings)
    client_id: str = ""
    net: NetSettings = field(default_factory=NetSettings)
    # The explicit `librdkafka:` section, applied last.
    passthrough: dict[str, Any] = field(default_factory=dict)
    # A sluice broker's admin HTTP API (http://host:port), or "" for any other Kafka cluster.
    admin_url: str = ""

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings shared by this cluster's producer, consumers and admin client."""
        return {
            "bootstrap.servers": ",".join(self.bootstrap_servers),
            **self.net.librdkafka(),
            **self.security,
            **self.passthrough,
        }

    def producer_config(self, client_id: str) -> dict[str, Any]:
        """Everything the cluster's Producer is created with; the passthrough wins over mapped settings."""
        where = f"proxies.{self.name}.producer"
        config = {
            **self.client_config(),
            **self.producer.librdkafka(where),
            **self.passthrough,
            "client.id": client_id,
        }
        linger, message_timeout = config.get("linger.ms"), config.get("message.timeout.ms")
        # librdkafka refuses to create such a producer; saying so at load time names the settings.
        numbers = isinstance(linger, int | float) and isinstance(message_timeout, int | float)
        if numbers and 0 < message_timeout <= linger:
            raise ConfigError(f"{where}: timeout must be longer than flush_frequency (linger.ms)")
        return config

    def consumer_config(self, group: str, client_id: str) -> dict[str, Any]:
        """Everything a group consumer is created with.

        The passthrough wins over mapped settings but not over what the gateway's at-least-once
        delivery relies on: it stores and commits offsets itself, only for acknowledged messages.
        """
        return {
            **self.client_config(),
            **self.consumer.librdkafka(f"proxies.{self.name}.consumer"),
            **self.passthrough,
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
        }

    def share_consumer_config(self, group: str, client_id: str) -> tuple[dict[str, Any], list[str]]:
        """What a share-group member (confluent-kafka's ShareConsumer) is created with, and the passthrough
        keys left out because a share consumer refuses them (its group's share.* configs rule instead)."""
        passthrough = {k: v for k, v in self.passthrough.items() if k not in SHARE_CONSUMER_REFUSED}
        config = {
            **{k: v for k, v in self.client_config().items() if k not in SHARE_CONSUMER_REFUSED},
            "fetch.wait.max.ms": _check_range(
                _milliseconds(self.consumer.fetch_max_wait),
                _FETCH_WAIT_MS_RANGE,
                f"proxies.{self.name}.consumer.fetch_max_wait",
            ),
            **passthrough,
            "group.id": group,
            "client.id": client_id,
            # Acks are the callers': every record a poll returns is acknowledged one by one.
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": self.consumer.share_max_poll_records,
        }
        return config, sorted(set(self.passthrough) - set(passthrough))


@dataclass
class GatewayConfig:
    clusters: dict[str, ClusterConfig]
    default_cluster: str
    grpc_addr: str = "127.0.0.1:19091"
    http_addr: str = "127.0.0.1:19092"
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_grpc_message_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_http_body_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    unix_addr: str = ""
    grpc_tls: ListenerTLS | None = None
    http_tls: ListenerTLS | None = None
    # Credentials clients must present (HTTP Authorization header, gRPC authorization metadata).
    client_auth: ClientAuth | None = None
    # kafka-pixy keys present in the file that mean nothing to sluice, e.g. "proxies.main.kafka.version".
    ignored_settings: tuple[str, ...] = ()

    def cluster(self, name: str) -> ClusterConfig:
        """The named cluster; an empty name means the default one."""
        found = self.clusters.get(name or self.default_cluster)
        if found is None:
            raise KeyError(name)
        return found
