"""Gateway configuration: a kafka-pixy style YAML with named clusters.

Accepted shape (every key optional except at least one cluster)::

    grpc_addr: 127.0.0.1:19091        # kafka-pixy's names for the listen addresses
    tcp_addr: 127.0.0.1:19092
    max_request_bytes: 1048576        # default for both limits below
    max_grpc_message_bytes: 1048576   # largest gRPC request message accepted
    max_http_body_bytes: 1048576      # largest HTTP request body accepted
    default_cluster: main             # else the first cluster listed
    proxies:                          # kafka-pixy's name; `clusters:` is accepted too
      main:
        kafka:
          seed_peers: [127.0.0.1:9092]
          tls: false
          ca_certificate_file: ...
          client_certificate_file: ...
          client_key_file: ...
          insecure: false
          sasl: {mechanism: PLAIN, user: u, password: p}
          librdkafka: {any.librdkafka.property: value}   # passed through untouched
        producer:
          partitioner: hash           # hash (sarama FNV-1a) | murmur2 (Java client) | random
          max_message_bytes: 1000000
          required_acks: wait_for_all # no_response | wait_for_local | wait_for_all
          timeout: 10s
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
          initial_offset: oldest      # where a group with no committed offset starts: oldest | newest
          dead_letter_topic: ""       # "{topic}"/"{group}" replaced; empty drops dead letters
                                      # (acked at once); otherwise a dead letter stays uncommitted
                                      # until the topic has it, failed produces retried (1s..30s)

A sluice.yaml may hold all of this under a top-level ``gateway:`` key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024


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


@dataclass
class ProducerSettings:
    partitioner: str = "hash"
    max_message_bytes: int = 1_000_000
    required_acks: str = "wait_for_all"
    timeout: float = 10.0


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


@dataclass
class ClusterConfig:
    name: str
    bootstrap_servers: list[str]
    librdkafka: dict[str, Any] = field(default_factory=dict)
    producer: ProducerSettings = field(default_factory=ProducerSettings)
    consumer: ConsumerSettings = field(default_factory=ConsumerSettings)
    client_id: str = ""

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings shared by this cluster's producer, consumers and admin client."""
        config: dict[str, Any] = {"bootstrap.servers": ",".join(self.bootstrap_servers)}
        config.update(self.librdkafka)
        return config


@dataclass
class GatewayConfig:
    clusters: dict[str, ClusterConfig]
    default_cluster: str
    grpc_addr: str = "127.0.0.1:19091"
    http_addr: str = "127.0.0.1:19092"
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_grpc_message_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_http_body_bytes: int = DEFAULT_MAX_REQUEST_BYTES

    def cluster(self, name: str) -> ClusterConfig:
        """The named cluster; an empty name means the default one."""
        found = self.clusters.get(name or self.default_cluster)
        if found is None:
            raise KeyError(name)
        return found


def _dataclass_from(cls: type, section: dict[str, Any], where: str, durations: set[str]) -> Any:
    instance = cls()
    for key, value in (section or {}).items():
        if not hasattr(instance, key):
            raise ConfigError(f"{where}: unknown setting {key!r}")
        if key in durations:
            value = parse_duration(value, f"{where}.{key}")
        else:
            expected = type(getattr(instance, key))
            if expected is int and not isinstance(value, int):
                raise ConfigError(f"{where}.{key}: expected an integer, got {value!r}")
            if expected is bool and not isinstance(value, bool):
                raise ConfigError(f"{where}.{key}: expected true or false, got {value!r}")
            if expected is str:
                value = str(value)
        setattr(instance, key, value)
    return instance


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


def _cluster_from(name: str, section: dict[str, Any]) -> ClusterConfig:
    where = f"proxies.{name}"
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: expected a mapping")
    kafka = section.get("kafka") or {}
    peers = kafka.get("seed_peers") or kafka.get("bootstrap_servers")
    if isinstance(peers, str):
        peers = [peer.strip() for peer in peers.split(",") if peer.strip()]
    if not peers:
        raise ConfigError(f"{where}.kafka.seed_peers: at least one broker address is required")
    passthrough = dict(kafka.get("librdkafka") or {})
    librdkafka = {**_security_settings(kafka, f"{where}.kafka"), **passthrough}
    producer = _dataclass_from(
        ProducerSettings, section.get("producer") or {}, f"{where}.producer", {"timeout"}
    )
    if producer.partitioner not in ("hash", "murmur2", "random"):
        raise ConfigError(f"{where}.producer.partitioner: expected hash, murmur2 or random")
    if producer.required_acks not in ("no_response", "wait_for_local", "wait_for_all"):
        raise ConfigError(
            f"{where}.producer.required_acks: expected no_response, wait_for_local or wait_for_all"
        )
    consumer = _dataclass_from(
        ConsumerSettings,
        section.get("consumer") or {},
        f"{where}.consumer",
        {
            "ack_timeout",
            "long_polling_timeout",
            "offsets_commit_interval",
            "subscription_timeout",
            "session_timeout",
        },
    )
    if consumer.initial_offset not in ("oldest", "newest"):
        raise ConfigError(f"{where}.consumer.initial_offset: expected oldest or newest")
    limits = (
        consumer.max_pending_messages,
        consumer.max_pending_batch_messages,
        consumer.channel_buffer_size,
    )
    if min(limits) < 1:
        raise ConfigError(
            f"{where}.consumer: max_pending_messages, max_pending_batch_messages and channel_buffer_size"
            " must be >= 1"
        )
    return ClusterConfig(
        name=name,
        bootstrap_servers=[str(peer) for peer in peers],
        librdkafka=librdkafka,
        producer=producer,
        consumer=consumer,
        client_id=str(section.get("client_id", "")),
    )


def config_from_dict(document: dict[str, Any]) -> GatewayConfig:
    if not isinstance(document, dict):
        raise ConfigError("the gateway configuration must be a mapping")
    if isinstance(document.get("gateway"), dict):
        document = document["gateway"]
    clusters_section = document.get("proxies") or document.get("clusters")
    if not isinstance(clusters_section, dict) or not clusters_section:
        raise ConfigError("no clusters: expected a `proxies:` (or `clusters:`) mapping of name -> cluster")
    clusters = {str(name): _cluster_from(str(name), section) for name, section in clusters_section.items()}
    default = str(document.get("default_cluster") or next(iter(clusters)))
    if default not in clusters:
        raise ConfigError(f"default_cluster: {default!r} is not one of {sorted(clusters)}")
    limits: dict[str, int] = {}
    for name in ("max_request_bytes", "max_grpc_message_bytes", "max_http_body_bytes"):
        value = document.get(name, limits.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES))
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name}: expected a positive integer")
        limits[name] = value
    return GatewayConfig(
        clusters=clusters,
        default_cluster=default,
        grpc_addr=str(document.get("grpc_addr", "127.0.0.1:19091")),
        http_addr=str(document.get("tcp_addr", document.get("http_addr", "127.0.0.1:19092"))),
        **limits,
    )


def load_config(path: str | Path) -> GatewayConfig:
    with open(path, encoding="utf-8") as stream:
        document = yaml.safe_load(stream) or {}
    return config_from_dict(document)


def single_cluster_config(bootstrap_servers: str, **consumer_overrides: Any) -> GatewayConfig:
    """A one-cluster configuration, e.g. for `sluice serve` pointing at its own broker."""
    return config_from_dict(
        {"proxies": {"default": {"kafka": {"seed_peers": bootstrap_servers}, "consumer": consumer_overrides}}}
    )
