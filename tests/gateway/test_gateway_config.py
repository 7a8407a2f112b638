from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import trustme
from confluent_kafka import Consumer, Producer, ShareConsumer

from sluice.gateway.config import ConfigError, parse_duration
from sluice.gateway.config_file import config_from_dict, load_config


def test_kafka_pixy_style_yaml(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yaml"
    path.write_text(
        """
gateway:
  max_request_bytes: 2000
  max_http_body_bytes: 3000
  grpc_addr: 127.0.0.1:1
  tcp_addr: 127.0.0.1:2
  proxies:
    first:
      kafka:
        seed_peers: [a:9092, b:9092]
        tls: true
        ca_certificate_file: /ca.pem
        sasl: {mechanism: SCRAM-SHA-256, user: u, password: p}
        librdkafka: {socket.keepalive.enable: true}
      producer: {partitioner: murmur2}
      consumer: {ack_timeout: 90s, long_polling_timeout: 500ms, max_retries: 3, initial_offset: newest}
    second:
      kafka: {seed_peers: "c:9092,d:9092"}
"""
    )
    config = load_config(path)
    assert config.default_cluster == "first"
    assert (config.grpc_addr, config.http_addr) == ("127.0.0.1:1", "127.0.0.1:2")
    assert (config.max_grpc_message_bytes, config.max_http_body_bytes) == (2000, 3000)
    first = config.cluster("")
    assert first.client_config() == {
        "bootstrap.servers": "a:9092,b:9092",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": "/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "u",
        "sasl.password": "p",
        "socket.keepalive.enable": True,
    }
    assert first.producer.partitioner == "murmur2"
    assert (first.consumer.ack_timeout, first.consumer.long_polling_timeout) == (90.0, 0.5)
    assert first.consumer.max_retries == 3 and first.consumer.initial_offset == "newest"
    assert config.cluster("second").bootstrap_servers == ["c:9092", "d:9092"]
    with pytest.raises(KeyError):
        config.cluster("third")


@pytest.mark.parametrize(
    "document,complaint",
    [
        ({}, "no clusters"),
        ({"proxies": {"a": {"kafka": {}}}}, "seed_peers"),
        ({"proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}, "consumer": {"bogus": 1}}}}, "unknown setting"),
        (
            {"proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}, "consumer": {"ack_timeout": "soon"}}}},
            "duration",
        ),
        (
            {"proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}, "producer": {"partitioner": "crc"}}}},
            "partitioner",
        ),
        ({"proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}}}, "default_cluster": "b"}, "default_cluster"),
        ({"proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}, "consumer": {"max_retries": "x"}}}}, "integer"),
    ],
)
def test_bad_configuration_is_explained(document: dict, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        config_from_dict(document)


@pytest.mark.parametrize(
    "text,seconds", [("500ms", 0.5), ("15s", 15.0), ("5m", 300.0), ("1h", 3600.0), (2, 2.0)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text, "x") == seconds


@pytest.fixture(scope="module")
def server_pem_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A certificate for localhost and its key, as PEM files."""
    directory = tmp_path_factory.mktemp("pem")
    issued = trustme.CA().issue_cert("localhost", "127.0.0.1")
    certificate, key = directory / "server.crt", directory / "server.key"
    issued.cert_chain_pems[0].write_to_path(str(certificate))
    issued.private_key_pem.write_to_path(str(key))
    return certificate, key


# kafka-pixy's default.yaml values (plus its tls.yaml section), with distinct net timeouts.
KAFKA_PIXY_YAML = """
grpc_addr: 0.0.0.0:19091
tcp_addr: 0.0.0.0:19092
unix_addr: {socket}
proxies:
  default:
    client_id: pixy_test
    kafka:
      seed_peers:
        - localhost:9092
      version: 0.10.2.1
    net:
      dial_timeout: 30s
      read_timeout: 30s
      write_timeout: 45s
    zoo_keeper:
      seed_peers:
        - localhost:2181
      chroot: ""
      session_timeout: 15s
    producer:
      channel_buffer_size: 4096
      max_message_bytes: 1000000
      compression: snappy
      flush_bytes: 1048576
      flush_frequency: 500ms
      retry_backoff: 10s
      retry_max: 6
      required_acks: wait_for_all
      shutdown_timeout: 30s
      partitioner: hash
      timeout: 10s
    consumer:
      disabled: false
      ack_timeout: 5m
      channel_buffer_size: 64
      fetch_max_bytes: 1048576
      fetch_max_wait: 250ms
      long_polling_timeout: 3s
      max_pending_messages: 300
      max_retries: -1
      offsets_commit_interval: 500ms
      retry_backoff: 500ms
      subscription_timeout: 15s
tls:
  grpc:
    certificate_path: {certificate}
    key_path: {key}
"""


def test_kafka_pixy_configuration_maps_to_librdkafka(
    tmp_path: Path, server_pem_files: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    certificate, key = server_pem_files
    path = tmp_path / "kafka-pixy.yaml"
    path.write_text(KAFKA_PIXY_YAML.format(socket=tmp_path / "pixy.sock", certificate=certificate, key=key))
    with caplog.at_level(logging.INFO, logger="sluice.gateway.config"):
        config = load_config(path)

    cluster = config.cluster("")
    shared = {
        "bootstrap.servers": "localhost:9092",
        "socket.connection.setup.timeout.ms": 30_000,
        "socket.timeout.ms": 45_000,
    }
    assert cluster.producer_config("pixy_test") == {
        **shared,
        "client.id": "pixy_test",
        "acks": -1,
        "message.max.bytes": 1_000_512,
        "message.timeout.ms": 10_000,
        "request.timeout.ms": 10_000,
        "linger.ms": 500,
        "compression.type": "snappy",
        "batch.size": 1_048_576,
        "retries": 6,
        "retry.backoff.ms": 10_000,
        "retry.backoff.max.ms": 10_000,
    }
    assert cluster.consumer_config("billing", "pixy_test") == {
        **shared,
        "group.id": "billing",
        "client.id": "pixy_test",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1000,
        "fetch.wait.max.ms": 250,
        "fetch.queue.backoff.ms": 10,
        "max.partition.fetch.bytes": 1_048_576,
        "retry.backoff.ms": 500,
        "retry.backoff.max.ms": 500,
    }
    assert cluster.producer.shutdown_flush_seconds == 30.0
    assert cluster.client_id == "pixy_test"
    assert (cluster.consumer.ack_timeout, cluster.consumer.subscription_timeout) == (300.0, 15.0)
    assert (config.grpc_addr, config.http_addr) == ("0.0.0.0:19091", "0.0.0.0:19092")
    assert config.unix_addr == str(tmp_path / "pixy.sock")
    assert config.grpc_tls is not None and config.http_tls is None
    assert (config.grpc_tls.certificate_path, config.grpc_tls.key_path) == (str(certificate), str(key))

    ignored = (
        "proxies.default.kafka.version",
        "proxies.default.zoo_keeper.seed_peers",
        "proxies.default.zoo_keeper.chroot",
        "proxies.default.zoo_keeper.session_timeout",
        "proxies.default.producer.channel_buffer_size",
    )
    assert config.ignored_settings == ignored
    [line] = [record.getMessage() for record in caplog.records if "ignored" in record.getMessage()]
    assert all(name in line for name in ignored)

    # librdkafka itself accepts every mapped property and value (it refuses unknown or out-of-range ones).
    unreachable = {"bootstrap.servers": "127.0.0.1:1"}
    Producer({**cluster.producer_config("pixy_test"), **unreachable}).flush(0)
    Consumer({**cluster.consumer_config("billing", "pixy_test"), **unreachable}).close()


def test_absent_kafka_pixy_keys_keep_sluice_defaults() -> None:
    cluster = config_from_dict({"proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}}}}).cluster("")
    producer = cluster.producer_config("id")
    consumer = cluster.consumer_config("g", "id")
    assert producer["linger.ms"] == 0
    assert consumer["fetch.wait.max.ms"] == 100
    mapped_only_when_set = {
        "compression.type",
        "batch.size",
        "retries",
        "retry.backoff.ms",
        "max.partition.fetch.bytes",
        "socket.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "queue.buffering.max.messages",
    }
    assert not mapped_only_when_set & (producer.keys() | consumer.keys())
    assert cluster.producer.shutdown_flush_seconds == cluster.producer.timeout == 10.0


def test_librdkafka_passthrough_wins_over_mapped_settings_but_not_over_offset_control() -> None:
    passthrough = {
        "linger.ms": 7,
        "compression.type": "zstd",
        "fetch.wait.max.ms": 50,
        "socket.timeout.ms": 1234,
        "enable.auto.commit": True,
    }
    cluster = config_from_dict(
        {
            "proxies": {
                "a": {
                    "kafka": {"seed_peers": ["x:1"], "librdkafka": passthrough},
                    "net": {"read_timeout": "30s"},
                    "producer": {"flush_frequency": "500ms", "compression": "lz4"},
                    "consumer": {"fetch_max_wait": "250ms"},
                }
            }
        }
    ).cluster("")
    producer = cluster.producer_config("id")
    consumer = cluster.consumer_config("g", "id")
    assert (producer["linger.ms"], producer["compression.type"], producer["socket.timeout.ms"]) == (
        7,
        "zstd",
        1234,
    )
    assert (consumer["fetch.wait.max.ms"], consumer["socket.timeout.ms"]) == (50, 1234)
    # The gateway commits only acknowledged messages: auto-commit would commit unacknowledged ones.
    assert consumer["enable.auto.commit"] is False


def test_net_timeouts_are_clamped_to_librdkafka_ranges() -> None:
    cluster = config_from_dict(
        {
            "proxies": {
                "a": {
                    "kafka": {"seed_peers": ["x:1"]},
                    "net": {"dial_timeout": "100ms", "read_timeout": "1ms", "write_timeout": "5ms"},
                }
            }
        }
    ).cluster("")
    assert cluster.client_config()["socket.connection.setup.timeout.ms"] == 1000
    assert cluster.client_config()["socket.timeout.ms"] == 10


@pytest.mark.parametrize("partitioner", ["hash", "murmur2", "random", "roundrobin"])
def test_every_partitioner_is_accepted(partitioner: str) -> None:
    document = {
        "proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}, "producer": {"partitioner": partitioner}}}
    }
    assert config_from_dict(document).cluster("").producer.partitioner == partitioner


def _cluster(**sections: object) -> dict:
    return {"proxies": {"a": {"kafka": {"seed_peers": ["x:1"]}, **sections}}}


@pytest.mark.parametrize(
    "document,complaint",
    [
        (_cluster(net={"connect_timeout": "1s"}), "net: unknown setting 'connect_timeout'"),
        (_cluster(zoo_keeper={"hosts": ["z:2181"]}), "zoo_keeper: unknown setting 'hosts'"),
        (_cluster(producer={"flush_messages": 10}), "producer: unknown setting 'flush_messages'"),
        ({**_cluster(), "tls": {"kafka": {}}}, "tls: unknown setting 'kafka'"),
        ({**_cluster(), "tls": {"grpc": {"ca_path": "x"}}}, "tls.grpc: unknown setting 'ca_path'"),
        ({**_cluster(), "tls": {"http": {"certificate_path": "x"}}}, "tls.http.key_path: required"),
        (_cluster(producer={"compression": "brotli"}), "compression"),
        (_cluster(producer={"retry_backoff": "10m"}), "retry_backoff: 600000ms is outside"),
        (_cluster(producer={"retry_max": -1}), "retry_max"),
        (_cluster(producer={"flush_frequency": "10s", "timeout": "5s"}), "longer than flush_frequency"),
        (_cluster(consumer={"fetch_max_bytes": 0}), "fetch_max_bytes"),
        (_cluster(consumer={"fetch_max_wait": "10m"}), "fetch_max_wait"),
        (_cluster(consumer={"retry_backoff": "soon"}), "duration"),
        (_cluster(consumer={"fetch_max_bytes": True}), "integer"),
        (_cluster(consumer={"backend": "queue"}), "consumer.backend: expected tracker or share"),
        (
            _cluster(consumer={"group_backends": {"g": "kafka"}}),
            "group_backends.g: expected tracker or share",
        ),
        (_cluster(consumer={"group_backends": ["g"]}), "group_backends: expected a mapping"),
        (_cluster(consumer={"share_members": 0}), "share_members: expected 1..16"),
        (_cluster(consumer={"share_max_poll_records": 0}), "share_max_poll_records"),
    ],
)
def test_bad_kafka_pixy_settings_are_explained(document: dict, complaint: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(complaint)):
        config_from_dict(document)


@pytest.mark.parametrize("listener", ["grpc", "http"])
@pytest.mark.parametrize("missing", ["certificate_path", "key_path"])
def test_missing_tls_file_fails_with_its_path(
    tmp_path: Path, server_pem_files: tuple[Path, Path], listener: str, missing: str
) -> None:
    certificate, key = server_pem_files
    paths = {
        "certificate_path": str(certificate),
        "key_path": str(key),
        missing: str(tmp_path / "absent.pem"),
    }
    with pytest.raises(
        ConfigError, match=re.escape(f"tls.{listener}.{missing}: cannot read {tmp_path / 'absent.pem'}")
    ):
        config_from_dict({**_cluster(), "tls": {listener: paths}})


def test_tls_files_that_are_not_a_certificate_and_key_fail_with_their_paths(
    tmp_path: Path, server_pem_files: tuple[Path, Path]
) -> None:
    certificate, _ = server_pem_files
    not_a_key = tmp_path / "not-a-key.pem"
    not_a_key.write_text("hello\n")
    with pytest.raises(ConfigError, match=re.escape(f"{certificate} and {not_a_key}")):
        config_from_dict(
            {
                **_cluster(),
                "tls": {"grpc": {"certificate_path": str(certificate), "key_path": str(not_a_key)}},
            }
        )


def test_the_backend_of_a_group_is_its_exact_name_then_the_first_matching_pattern_then_the_clusters() -> None:
    consumer = {
        "backend": "share",
        "group_backends": {"jobs-*": "tracker", "jobs-urgent": "share", "*": "tracker"},
    }
    settings = config_from_dict(_cluster(consumer=consumer)).cluster("a").consumer
    assert [settings.backend_of(g) for g in ("jobs-urgent", "jobs-1", "other")] == [
        "share",
        "tracker",
        "tracker",
    ]
    assert config_from_dict(_cluster()).cluster("a").consumer.backend_of("any") == "tracker"


def test_a_share_consumer_is_given_explicit_acks_and_none_of_the_settings_it_refuses() -> None:
    passthrough = {"partition.assignment.strategy": "cooperative-sticky", "isolation.level": "read_committed"}
    document = _cluster(consumer={"fetch_max_wait": "50ms", "share_max_poll_records": 100})
    document["proxies"]["a"]["kafka"]["librdkafka"] = {**passthrough, "socket.keepalive.enable": True}
    cluster = config_from_dict(document).cluster("a")
    config, refused = cluster.share_consumer_config("billing", "gw-1")
    assert refused == sorted(passthrough)
    assert not set(passthrough) & set(config)
    assert config["share.acknowledgement.mode"] == "explicit" and config["max.poll.records"] == 100
    assert (config["group.id"], config["fetch.wait.max.ms"], config["socket.keepalive.enable"]) == (
        "billing",
        50,
        True,
    )
    ShareConsumer({**config, "bootstrap.servers": "127.0.0.1:1"}).close()  # librdkafka accepts all of it
