"""Gateway configuration: a kafka-pixy style YAML with named clusters.

kafka-pixy's own configuration file (its default.yaml) loads as is. Accepted shape (every key optional
except at least one cluster; "ignored" keys are accepted, have no effect and are named in one INFO log line)::

    grpc_addr: 127.0.0.1:19091        # kafka-pixy's names for the listen addresses
    tcp_addr: 127.0.0.1:19092
    unix_addr: /run/sluice.sock       # HTTP API also on this unix socket (plain HTTP, never TLS)
    tls:                              # TLS on the gateway's own listeners (not towards Kafka)
      grpc: {certificate_path: server.crt, key_path: server.key}   # kafka-pixy's key
      http: {certificate_path: server.crt, key_path: server.key}   # sluice extension: HTTPS on tcp_addr
      # either may add `client_ca_path: ca.pem`: mutual TLS, clients need a certificate that CA signed
    auth:                             # sluice extension: credentials every HTTP request and gRPC call
      basic: {alice: s3cret}          #   carries (Authorization header / metadata); see gateway/auth.py
      bearer_tokens: [t0k3n]
    max_request_bytes: 1048576        # default for both limits below
    max_grpc_message_bytes: 1048576   # largest gRPC request message accepted
    max_http_body_bytes: 1048576      # largest HTTP request body accepted
    default_cluster: main             # else the first cluster listed
    proxies:                          # kafka-pixy's name; `clusters:` is accepted too
      main:
        client_id: ""                 # else generated
        kafka:
          seed_peers: [127.0.0.1:9092]
          version: 0.10.2.1           # ignored: librdkafka negotiates API versions with the brokers
          tls: false
          ca_certificate_file: ...
          client_certificate_file: ...
          client_key_file: ...
          insecure: false
          sasl: {mechanism: PLAIN, user: u, password: p}
          sluice_admin: 127.0.0.1:9644   # sluice extension: the broker's admin listener; offsets set
                                      # through the gateway then rewind running groups live
          librdkafka: {any.librdkafka.property: value}   # passed through; wins over every mapped value
        net:                          # all of this cluster's librdkafka clients
          dial_timeout: 30s           # socket.connection.setup.timeout.ms (librdkafka's minimum is 1s)
          read_timeout: 30s           # socket.timeout.ms is the larger of read_timeout and write_timeout
          write_timeout: 30s          #   (clamped to librdkafka's 10ms..300s)
        zoo_keeper:                   # ignored: sluice keeps no state in ZooKeeper
          seed_peers: [localhost:2181]
          chroot: ""
          session_timeout: 15s
        producer:
          partitioner: hash           # hash (sarama FNV-1a) | murmur2 (Java client) | random
                                      # | roundrobin (each topic's partitions in turn, keys ignored)
          max_message_bytes: 1000000  # message.max.bytes (plus framing)
          required_acks: wait_for_all # acks: no_response | wait_for_local | wait_for_all
          timeout: 10s                # message.timeout.ms and request.timeout.ms
          compression: none           # compression.type: none | gzip | snappy | lz4 | zstd
          flush_bytes: 1048576        # batch.size (0: librdkafka's default)
          flush_frequency: 500ms      # linger.ms; 0 when absent, for the gateway's produce latency
          retry_backoff: 10s          # retry.backoff.ms and retry.backoff.max.ms: a fixed wait, as sarama's
          retry_max: 6                # retries
          shutdown_timeout: 30s       # how long stopping waits for undelivered messages; else `timeout`
          channel_buffer_size: 4096   # ignored: librdkafka's queue limit would reject messages where
                                      # sarama's channel only makes the sender wait
        consumer:
          disabled: false
          ack_timeout: 5m
          long_polling_timeout: 3s
          max_pending_messages: 300   # un-acked messages per partition, ConsumeNAck and HTTP consume
          max_pending_batch_messages: 5000  # the same limit for ConsumeBatch and ConsumeStream
          max_retries: -1
          offsets_commit_interval: 500ms
          channel_buffer_size: 64     # concurrent waiting consume requests per group/topic
          subscription_timeout: 15s
          fetch_max_bytes: 1048576    # max.partition.fetch.bytes (per partition, as kafka-pixy's)
          fetch_max_wait: 100ms       # fetch.wait.max.ms; 100ms when absent (kafka-pixy: 250ms): how long
                                      # a broker may hold a fetch, which the gateway's latency depends on
          retry_backoff: 500ms        # retry.backoff.ms and retry.backoff.max.ms
          session_timeout: 10s        # session.timeout.ms of the group membership
          initial_offset: oldest      # where a group with no committed offset starts: oldest | newest
          dead_letter_topic: ""       # "{topic}"/"{group}" replaced; empty drops dead letters
                                      # (acked at once); otherwise a dead letter stays uncommitted
                                      # until the topic has it, failed produces retried (1s..30s)

The properties of compression, flush_bytes, retry_max, the retry_backoffs, fetch_max_bytes and `net` are
only set when their key is present, so that an absent key keeps librdkafka's default; the other mapped
properties always are, from the defaults shown. The `librdkafka:` passthrough wins over all of them, though
not over client.id nor the consumer's group.id and offset handling (auto commit and offset store stay off).
Paths in `tls` are read as given (relative to the working directory); a file that is missing, unreadable
or not a PEM certificate and matching key fails the load with its path.

A sluice.yaml may hold all of this under a top-level ``gateway:`` key.
"""

from __future__ import annotations

import logging
import re
import ssl
import types
import typing
from collections.abc import Collection
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .auth import ClientAuth, client_auth_from

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
# Sluice's own choices where kafka-pixy's defaults would cost latency (see the module docstring).
DEFAULT_LINGER_MS = 0
DEFAULT_FETCH_MAX_WAIT_SECONDS = 0.1

PARTITIONERS = ("hash", "murmur2", "random", "roundrobin")
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
            # With librdkafka's default (1 s) a consumer whose local queue fills up stops fetching for a
            # whole second: fast streams then stall until it has drained, not until there is room again.
            "fetch.queue.backoff.ms": 10,
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


# kafka-pixy keys with no meaning for a librdkafka-based gateway, per section.
_IGNORED_KAFKA_KEYS = frozenset({"version"})
_IGNORED_PRODUCER_KEYS = frozenset({"channel_buffer_size"})
_ZOO_KEEPER_KEYS = frozenset({"seed_peers", "chroot", "session_timeout"})
_TLS_FILE_KEYS = ("certificate_path", "key_path")


def _mapping(section: Any, where: str) -> dict[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: expected a mapping")
    return section


def _reject_unknown(section: dict[str, Any], known: Collection[str], where: str) -> None:
    for key in section:
        if key not in known:
            raise ConfigError(f"{where}: unknown setting {key!r}")


def _field_type(hint: Any) -> type:
    """int for `int | None`; the type itself otherwise."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _dataclass_from(cls: type, section: Any, where: str, durations: set[str]) -> Any:
    instance = cls()
    hints = typing.get_type_hints(cls)
    section = _mapping(section, where)
    _reject_unknown(section, {f.name for f in fields(cls)}, where)
    for key, value in section.items():
        expected = _field_type(hints[key])
        if value is None and expected is not hints[key]:
            pass  # an optional setting left empty: the same as leaving it out
        elif key in durations:
            value = parse_duration(value, f"{where}.{key}")
        elif expected is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{where}.{key}: expected an integer, got {value!r}")
        elif expected is bool and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true or false, got {value!r}")
        elif expected is str:
            value = str(value)
        setattr(instance, key, value)
    return instance


def _without_ignored(
    section: dict[str, Any], ignored: frozenset[str], where: str, found: list[str]
) -> dict[str, Any]:
    found.extend(f"{where}.{key}" for key in section if key in ignored)
    return {key: value for key, value in section.items() if key not in ignored}


def _security_settings(kafka: dict[str, Any], where: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    tls = bool(kafka.get("tls", False))
    sasl = kafka.get("sasl") or {}
    if sasl and not isinstance(sasl, dict):
        raise ConfigError(f"{where}.sasl: expected a mapping")
    if tls and sasl:
        settings["security.protocol"] = "SASL_SSL"
    elif tls:
        settings["security.protocol"] = "SSL"
    elif sasl:
        settings["security.protocol"] = "SASL_PLAINTEXT"
    for ours, theirs in (
        ("ca_certificate_file", "ssl.ca.location"),
        ("client_certificate_file", "ssl.certificate.location"),
        ("client_key_file", "ssl.key.location"),
    ):
        if kafka.get(ours):
            settings[theirs] = str(kafka[ours])
    if kafka.get("insecure"):
        settings["enable.ssl.certificate.verification"] = False
    if sasl:
        settings["sasl.mechanism"] = str(sasl.get("mechanism", "PLAIN"))
        if "user" in sasl:
            settings["sasl.username"] = str(sasl["user"])
        if "password" in sasl:
            settings["sasl.password"] = str(sasl["password"])
    return settings


def _cluster_from(name: str, section: Any, ignored: list[str]) -> ClusterConfig:
    where = f"proxies.{name}"
    section = _mapping(section, where)
    kafka = _without_ignored(
        _mapping(section.get("kafka"), f"{where}.kafka"), _IGNORED_KAFKA_KEYS, f"{where}.kafka", ignored
    )
    peers = kafka.get("seed_peers") or kafka.get("bootstrap_servers")
    if isinstance(peers, str):
        peers = [peer.strip() for peer in peers.split(",") if peer.strip()]
    if not peers:
        raise ConfigError(f"{where}.kafka.seed_peers: at least one broker address is required")
    passthrough = dict(_mapping(kafka.get("librdkafka"), f"{where}.kafka.librdkafka"))
    zoo_keeper = _mapping(section.get("zoo_keeper"), f"{where}.zoo_keeper")
    _reject_unknown(zoo_keeper, _ZOO_KEEPER_KEYS, f"{where}.zoo_keeper")
    ignored.extend(f"{where}.zoo_keeper.{key}" for key in zoo_keeper)
    net = _dataclass_from(
        NetSettings, section.get("net"), f"{where}.net", {"dial_timeout", "read_timeout", "write_timeout"}
    )
    producer = _dataclass_from(
        ProducerSettings,
        _without_ignored(
            _mapping(section.get("producer"), f"{where}.producer"),
            _IGNORED_PRODUCER_KEYS,
            f"{where}.producer",
            ignored,
        ),
        f"{where}.producer",
        {"timeout", "flush_frequency", "retry_backoff", "shutdown_timeout"},
    )
    _check_producer(producer, f"{where}.producer")
    consumer = _dataclass_from(
        ConsumerSettings,
        section.get("consumer"),
        f"{where}.consumer",
        {
            "ack_timeout",
            "long_polling_timeout",
            "offsets_commit_interval",
            "subscription_timeout",
            "session_timeout",
            "fetch_max_wait",
            "retry_backoff",
        },
    )
    _check_consumer(consumer, f"{where}.consumer")
    cluster = ClusterConfig(
        name=name,
        bootstrap_servers=[str(peer) for peer in peers],
        security=_security_settings(kafka, f"{where}.kafka"),
        producer=producer,
        consumer=consumer,
        client_id=str(section.get("client_id") or ""),
        net=net,
        passthrough=passthrough,
        admin_url=_admin_url(kafka.get("sluice_admin"), f"{where}.kafka.sluice_admin"),
    )
    # Out-of-range mapped values fail the load rather than the first client created much later.
    cluster.producer_config(client_id="")
    cluster.consumer_config(group="", client_id="")
    return cluster


def _admin_url(value: Any, where: str) -> str:
    """HOST:PORT or an http(s) URL of a sluice broker's admin listener, as a base URL."""
    if value is None or value == "":
        return ""
    text = str(value).strip().rstrip("/")
    url = text if re.match(r"^https?://", text) else f"http://{text}"
    host, _, port = url.split("://", 1)[1].rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise ConfigError(f"{where}: expected HOST:PORT or http://HOST:PORT, got {value!r}")
    return url


def _check_producer(producer: ProducerSettings, where: str) -> None:
    if producer.partitioner not in PARTITIONERS:
        raise ConfigError(f"{where}.partitioner: expected one of {', '.join(PARTITIONERS)}")
    if producer.required_acks not in REQUIRED_ACKS:
        raise ConfigError(f"{where}.required_acks: expected no_response, wait_for_local or wait_for_all")
    if producer.compression is not None and producer.compression not in COMPRESSIONS:
        raise ConfigError(f"{where}.compression: expected one of {', '.join(COMPRESSIONS)}")
    if producer.flush_bytes is not None and not 0 <= producer.flush_bytes <= _INT32_MAX:
        raise ConfigError(f"{where}.flush_bytes: expected 0..{_INT32_MAX}")
    if producer.retry_max is not None and not 0 <= producer.retry_max <= _INT32_MAX:
        raise ConfigError(f"{where}.retry_max: expected 0..{_INT32_MAX}")


def _check_consumer(consumer: ConsumerSettings, where: str) -> None:
    if consumer.initial_offset not in ("oldest", "newest"):
        raise ConfigError(f"{where}.initial_offset: expected oldest or newest")
    limits = (
        consumer.max_pending_messages,
        consumer.max_pending_batch_messages,
        consumer.channel_buffer_size,
    )
    if min(limits) < 1:
        raise ConfigError(
            f"{where}: max_pending_messages, max_pending_batch_messages and channel_buffer_size must be >= 1"
        )


def _listener_tls(section: Any, where: str) -> ListenerTLS | None:
    if section is None:
        return None
    section = _mapping(section, where)
    _reject_unknown(section, (*_TLS_FILE_KEYS, "client_ca_path"), where)
    for key in _TLS_FILE_KEYS:
        if not section.get(key):
            raise ConfigError(f"{where}.{key}: required for TLS")
    paths: dict[str, str] = {}
    for key in (*_TLS_FILE_KEYS, "client_ca_path") if section.get("client_ca_path") else _TLS_FILE_KEYS:
        path = str(section[key])
        try:
            with open(path, "rb") as stream:
                stream.read(1)
        except OSError as exc:
            raise ConfigError(f"{where}.{key}: cannot read {path}: {exc.strerror or exc}") from exc
        paths[key] = path
    tls = ListenerTLS(paths["certificate_path"], paths["key_path"], paths.get("client_ca_path"))
    try:
        tls.server_ssl_context()
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{where}: {tls.certificate_path} and {tls.key_path} are not a PEM certificate and its key: {exc}"
        ) from exc
    return tls


def config_from_dict(document: dict[str, Any]) -> GatewayConfig:
    if not isinstance(document, dict):
        raise ConfigError("the gateway configuration must be a mapping")
    if isinstance(document.get("gateway"), dict):
        document = document["gateway"]
    clusters_section = document.get("proxies") or document.get("clusters")
    if not isinstance(clusters_section, dict) or not clusters_section:
        raise ConfigError("no clusters: expected a `proxies:` (or `clusters:`) mapping of name -> cluster")
    ignored: list[str] = []
    clusters = {
        str(name): _cluster_from(str(name), section, ignored) for name, section in clusters_section.items()
    }
    default = str(document.get("default_cluster") or next(iter(clusters)))
    if default not in clusters:
        raise ConfigError(f"default_cluster: {default!r} is not one of {sorted(clusters)}")
    limits: dict[str, int] = {}
    for name in ("max_request_bytes", "max_grpc_message_bytes", "max_http_body_bytes"):
        value = document.get(name, limits.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES))
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name}: expected a positive integer")
        limits[name] = value
    tls = _mapping(document.get("tls"), "tls")
    _reject_unknown(tls, ("grpc", "http"), "tls")
    try:
        client_auth = client_auth_from(document.get("auth"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if ignored:
        log.info("kafka-pixy settings that sluice has no use for, ignored: %s", ", ".join(ignored))
    return GatewayConfig(
        clusters=clusters,
        default_cluster=default,
        grpc_addr=str(document.get("grpc_addr", "127.0.0.1:19091")),
        http_addr=str(document.get("tcp_addr", document.get("http_addr", "127.0.0.1:19092"))),
        unix_addr=str(document.get("unix_addr") or ""),
        grpc_tls=_listener_tls(tls.get("grpc"), "tls.grpc"),
        http_tls=_listener_tls(tls.get("http"), "tls.http"),
        client_auth=client_auth,
        ignored_settings=tuple(ignored),
        **limits,
    )


def load_config(path: str | Path) -> GatewayConfig:
    with open(path, encoding="utf-8") as stream:
        document = yaml.safe_load(stream) or {}
    return config_from_dict(document)


def single_cluster_config(
    bootstrap_servers: str, *, admin_url: str | None = None, **consumer_overrides: Any
) -> GatewayConfig:
    """A one-cluster configuration, e.g. for `sluice serve` pointing at its own broker (and its admin
    listener, so that offsets set through the gateway rewind running groups live)."""
    kafka: dict[str, Any] = {"seed_peers": bootstrap_servers}
    if admin_url:
        kafka["sluice_admin"] = admin_url
    return config_from_dict({"proxies": {"default": {"kafka": kafka, "consumer": consumer_overrides}}})
