"""Reading the gateway's configuration file: a kafka-pixy style YAML with named clusters, into the settings
of sluice.gateway.config.

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
          backend: tracker            # how groups consume-and-ack: tracker (the gateway's offset
                                      # tracker on a consumer group) | share (a Kafka share group,
                                      # KIP-932: acks kept by the broker; needs Kafka 4.2+ or sluice,
                                      # elsewhere the tracker serves and says why in the log)
          group_backends:             # per group, by exact name, else the first fnmatch pattern
            billing: share
            "jobs-*": share
          share_max_poll_records: 500 # share backend: records one share fetch acquires (soft bound)
          share_members: 4            # share backend: members per group/topic in this gateway (one
                                      # fetches, the others wait for acks of what they handed out)

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
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from .auth import client_auth_from
from .config import (
    _INT32_MAX,
    BACKENDS,
    COMPRESSIONS,
    DEFAULT_MAX_REQUEST_BYTES,
    PARTITIONERS,
    REQUIRED_ACKS,
    ClusterConfig,
    ConfigError,
    ConsumerSettings,
    GatewayConfig,
    ListenerTLS,
    NetSettings,
    ProducerSettings,
    parse_duration,
)

log = logging.getLogger("sluice.gateway.config")  # the name its INFO line had before the split
# kafka-pixy keys with no meaning for a librdkafka-based gateway, per section.
_IGNORED_KAFKA_KEYS = frozenset({"version"})
_IGNORED_PRODUCER_KEYS = frozenset({"channel_buffer_size"})
_ZOO_KEEPER_KEYS = frozenset({"seed_peers", "chroot", "session_timeout"})
_TLS_FILE_KEYS = ("certificate_path", "key_path")
# Each member is a librdkafka handle with threads and connections of its own.
_MAX_SHARE_MEMBERS = 16


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
    cluster.share_consumer_config(group="", client_id="")
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
    choices = " or ".join(BACKENDS)
    if consumer.backend not in BACKENDS:
        raise ConfigError(f"{where}.backend: expected {choices}, got {consumer.backend!r}")
    group_backends = _mapping(consumer.group_backends, f"{where}.group_backends")
    for group, backend in group_backends.items():
        if backend not in BACKENDS:
            raise ConfigError(f"{where}.group_backends.{group}: expected {choices}, got {backend!r}")
    consumer.group_backends = {str(group): str(backend) for group, backend in group_backends.items()}
    if not 1 <= consumer.share_max_poll_records <= _INT32_MAX:
        raise ConfigError(f"{where}.share_max_poll_records: expected 1..{_INT32_MAX}")
    if not 1 <= consumer.share_members <= _MAX_SHARE_MEMBERS:
        raise ConfigError(f"{where}.share_members: expected 1..{_MAX_SHARE_MEMBERS}")


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
