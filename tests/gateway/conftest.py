"""Fixtures for the gateway tests: a real Kafka-compatible broker and real gateways.

`start_kafka()` is the ONE place that decides which broker the gateway tests run
against: sluice's own durable broker in a child process. The quirk flags let the
same tests run against brokers that lack a feature (Tansu drops commit metadata and
describes groups without members); sluice has none of them.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from sluice.gateway import Gateway, config_from_dict
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc
from sluice.testing import BrokerProcess, create_topic

# Broker behaviours the tests must know about (each noted where a test depends on it).
DROPS_COMMIT_METADATA = "drops_commit_metadata"  # OffsetCommit metadata is not kept (e.g. Tansu 0.6)
NO_GROUP_MEMBERS = "no_group_members"  # DescribeGroups answers without members (Tansu 0.6)


@dataclass
class KafkaUnderTest:
    bootstrap: str
    quirks: frozenset[str] = field(default_factory=frozenset)

    def create_topic(self, partitions: int = 1, prefix: str = "t", name: str | None = None) -> str:
        return create_topic(self.bootstrap, partitions, prefix, timeout=10, name=name)


@contextlib.contextmanager
def start_kafka(*, auto_create_topics: bool = True) -> Iterator[KafkaUnderTest]:
    """Start a throwaway sluice broker (durable, in a temp dir) on loopback and stop it afterwards.

    Share groups may set their lock duration down to 1 s (Kafka's bound is 15 s), as librdkafka's CI does, so
    that lock expiry is tested in about a second."""
    with tempfile.TemporaryDirectory() as data_dir, tempfile.TemporaryDirectory() as config_dir:
        config = Path(config_dir) / "broker.yaml"
        config.write_text(
            "group_share_min_record_lock_duration_ms: 1000\n"
            + ("" if auto_create_topics else "auto_create_topics: false\n")
        )
        with BrokerProcess(Path(data_dir), config=config) as broker:
            yield KafkaUnderTest(broker.bootstrap, frozenset())


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaUnderTest]:
    with start_kafka() as broker:
        yield broker


@pytest.fixture(scope="session")
def second_kafka() -> Iterator[KafkaUnderTest]:
    with start_kafka() as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_without_auto_create() -> Iterator[KafkaUnderTest]:
    """A broker that refuses to produce to a topic until someone creates it (auto_create_topics off)."""
    with start_kafka(auto_create_topics=False) as broker:
        yield broker


# Short timings keep the suite fast; individual tests override what they exercise.
FAST_CONSUMER = {
    "long_polling_timeout": "1s",
    "ack_timeout": "30s",
    "offsets_commit_interval": "100ms",
    "session_timeout": "6s",
}


def gateway_config(
    clusters: dict[str, KafkaUnderTest], producer: dict[str, Any] | None = None, **consumer: Any
) -> dict[str, Any]:
    return {
        "max_request_bytes": 64 * 1024,
        "proxies": {
            name: {
                "kafka": {"seed_peers": [broker.bootstrap]},
                "producer": {"max_message_bytes": 32 * 1024, **(producer or {})},
                "consumer": {**FAST_CONSUMER, **consumer},
            }
            for name, broker in clusters.items()
        },
    }


GatewayFactory = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def make_gateway(kafka: KafkaUnderTest) -> AsyncIterator[GatewayFactory]:
    """Start gateways on free loopback ports; every one is stopped after the test."""
    started: list[Gateway] = []

    async def make(
        clusters: dict[str, KafkaUnderTest] | None = None,
        producer: dict[str, Any] | None = None,
        *,
        top_level: dict[str, Any] | None = None,
        **consumer: Any,
    ) -> Gateway:
        """`top_level` adds gateway-wide settings (e.g. `tls`, `unix_addr`) to the generated config."""
        document = gateway_config(clusters or {"default": kafka}, producer, **consumer)
        config = config_from_dict({**document, **(top_level or {})})
        gateway = Gateway(config, grpc_listen="127.0.0.1:0", http_listen="127.0.0.1:0", shutdown_grace=1.0)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield make
    for gateway in reversed(started):
        await gateway.stop()


@pytest.fixture
async def gateway(make_gateway: GatewayFactory) -> Gateway:
    return await make_gateway()


@pytest.fixture
async def pixy(gateway: Gateway) -> AsyncIterator[pb_grpc.KafkaPixyStub]:
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        yield pb_grpc.KafkaPixyStub(channel)


@pytest.fixture(scope="module")
def rest_proxy(broker: Any) -> Iterator[Any]:
    """A `sluice gateway` process serving only the REST Proxy API in front of the session broker (one per module)."""
    from rest_helpers import rest_gateway

    with rest_gateway(broker.bootstrap) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def registry(broker: Any) -> Iterator[str]:
    """A `sluice registry` process on the session broker, with its own schemas topic (one per module): its URL."""
    from rest_helpers import registry_process

    with registry_process(broker.bootstrap) as url:
        yield url


@pytest.fixture(scope="module")
def rest_with_registry(broker: Any, registry: str) -> Iterator[Any]:
    """A REST-only `sluice gateway` process whose schema formats go through `registry` (one per module)."""
    from rest_helpers import rest_gateway

    with rest_gateway(broker.bootstrap, "--schema-registry", registry) as gateway:
        yield gateway
