from __future__ import annotations

from pathlib import Path

import pytest

from sluice.gateway.config import ConfigError, config_from_dict, load_config, parse_duration


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
