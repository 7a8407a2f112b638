"""Fixtures for pipeline tests: one local Kafka-compatible broker (the SparkSession, ``spark``, is the suite's:
tests/conftest.py).

The broker, sluice's own, is started by the ``kafka`` fixture alone.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sluice.testing import BrokerProcess


@dataclass
class KafkaForTests:
    """A running broker plus the helpers tests use to fill and inspect topics."""

    bootstrap: str
    # Extra producer settings a broker under test may need (none for sluice's broker).
    producer_overrides: dict[str, str] = field(default_factory=dict)

    def new_topic(self, prefix: str, partitions: int = 1) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
        return name

    def delete_topic(self, name: str) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # must outlive the future
        admin.delete_topics([name])[name].result(10)

    def recreate_topic(self, name: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        self.delete_topic(name)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def produce(self, topic: str, records: list[dict[str, Any]]) -> None:
        """Each record: value, and optionally key, partition, headers, timestamp (ms)."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, **self.producer_overrides})
        for record in records:
            extra = {k: record[k] for k in ("key", "partition", "headers", "timestamp") if k in record}
            producer.produce(topic, value=record["value"], **extra)
        assert producer.flush(30) == 0

    def consume_all(self, topic: str, partitions: int, timeout_s: float = 20) -> list[Any]:
        """Every message of ``topic`` up to the current end, read without Spark."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "tests", "enable.partition.eof": True}
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        messages: list[Any] = []
        finished: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(finished) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is None:
                    messages.append(message)
                elif message.error().code() == -191:  # _PARTITION_EOF
                    finished.add(message.partition())
        consumer.close()
        return messages


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaForTests]:
    """sluice's own durable broker in a child process."""
    with BrokerProcess(tmp_path_factory.mktemp("pipeline-broker")) as broker:
        yield KafkaForTests(broker.bootstrap)


# The security tests' secured broker (TLS, SASL, ACLs), loaded by path: tests/security is not on sys.path here.
_spec = importlib.util.spec_from_file_location(
    "security_fixtures", Path(__file__).resolve().parent.parent / "security" / "secure_broker.py"
)
assert _spec is not None and _spec.loader is not None
_security = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _security  # dataclasses look their module up
_spec.loader.exec_module(_security)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A secured broker per test module; `.admin_settings(mechanism)` logs in as its super user."""
    broker = _security.start_secure_broker(tmp_path_factory.mktemp("secure"))
    yield broker
    broker.process.kill()
