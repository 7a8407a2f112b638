"""Helpers for the transaction tests: confluent-kafka producers and counting consumers."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    for future in futures.values():
        future.result(30)


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **extra}
    )
    producer.init_transactions(30)
    return producer


def consume_all(
    bootstrap: str,
    topic: str,
    isolation: str,
    *,
    expect: int | None = None,
    timeout: float = 10.0,
    partitions: int = 1,
) -> list[bytes]:
    """Every value a fresh consumer reads from the start with `isolation`; stops once `expect` arrived
    (or the partitions' ends are reached and nothing more comes for a moment when expect is None)."""
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    eofs: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eofs.add(msg.partition())
                    if expect is None and len(eofs) == partitions:
                        break
                    continue
                raise AssertionError(msg.error())
            values.append(msg.value())
            if expect is not None and len(values) >= expect:
                break
    finally:
        consumer.close()
    return values


@pytest.fixture
def txn_id(topic_name: str) -> str:
    return f"txn-{topic_name}"
