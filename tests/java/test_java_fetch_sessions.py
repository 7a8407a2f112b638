"""The Java consumer fetches through KIP-227 sessions (FetchSessionHandler): records produced while it sits in
incremental fetches reach it, in order, at their offsets."""

from __future__ import annotations

import threading

from confluent_kafka import Producer
from java_driver import JavaClient

from sluice.testing import BrokerProcess


def test_records_arriving_during_incremental_fetches_reach_the_java_consumer(
    java: JavaClient, java_broker: BrokerProcess, topic_name: str
) -> None:
    java_broker.create_topic(topic_name, 3)
    producer = Producer({"bootstrap.servers": java_broker.bootstrap, "linger.ms": 0})

    def produce(first: int, last: int) -> None:
        for n in range(first, last):
            producer.produce(topic_name, f"v{n}".encode(), partition=1)
        assert producer.flush(30) == 0

    produce(0, 5)
    # Sent while the consumer waits in its session (its fetches long-poll for 500 ms each).
    later = threading.Timer(1.5, produce, (5, 10))
    later.start()
    try:
        records = java.call("consume", topic_name, 1, 0, 10, timeout=90)
    finally:
        later.join()
    assert [r["offset"] for r in records] == list(range(10))
