"""An application's test against a real broker with sluice's pytest fixtures.

    pip install sluice pytest
    pytest examples/pytest -p sluice.pytest_plugin     # (or nothing: installing sluice registers it)
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer


def publish_order(bootstrap: str, topic: str, order_id: str) -> None:
    """The code under test: it only knows a bootstrap address."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=order_id.encode(), value=b'{"status": "new"}')
    assert producer.flush(10) == 0


def test_an_order_is_published(kafka_bootstrap: str, kafka_topic: str) -> None:
    publish_order(kafka_bootstrap, kafka_topic, "order-1")
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "checker",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([kafka_topic])
    message = None
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            break
    consumer.close()
    assert message is not None and message.key() == b"order-1"


def test_orders_survive_a_broker_crash(fresh_kafka_broker) -> None:  # type: ignore[no-untyped-def]
    topic = fresh_kafka_broker.create_topic(partitions=2)
    publish_order(fresh_kafka_broker.bootstrap, topic, "order-2")
    fresh_kafka_broker.kill()  # SIGKILL: no clean shutdown
    fresh_kafka_broker.restart()
    consumer = Consumer({"bootstrap.servers": fresh_kafka_broker.bootstrap, "group.id": "after-crash",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    keys = []
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            keys.append(message.key())
            break
    consumer.close()
    assert keys == [b"order-2"]
