"""Kafka transactions with confluent-kafka (librdkafka) against a real sluice broker."""

from __future__ import annotations

from confluent_kafka import KafkaException, Producer
from tests.transactions.conftest import consume_all, create_topic, txn_producer

from sluice.client.wire import WireClient


def latest_offset(bootstrap: str, topic: str, *, read_committed: bool) -> int:
    """ListOffsets LATEST: the LSO for read_committed, the high watermark otherwise."""
    with WireClient.connect(bootstrap, timeout=10) as client:
        cls = client.request_class("ListOffsets")
        request = cls(
            replica_id=-1,
            isolation_level=int(read_committed),
            topics=[
                cls.ListOffsetsTopic(
                    name=topic, partitions=[cls.ListOffsetsPartition(partition_index=0, timestamp=-1)]
                )
            ],
        )
        return client.call("ListOffsets", 7, request).topics[0].partitions[0].offset


def test_committed_transaction_is_read_by_both_isolation_levels(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    create_topic(bootstrap, topic_name)
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, f"v{i}".encode())
    producer.commit_transaction(30)
    committed = consume_all(bootstrap, topic_name, "read_committed", expect=10)
    assert committed == [f"v{i}".encode() for i in range(10)]
    assert len(consume_all(bootstrap, topic_name, "read_uncommitted", expect=10)) == 10


def test_aborted_transaction_is_hidden_from_read_committed_only(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    create_topic(bootstrap, topic_name)
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic_name, f"aborted{i}".encode())
    producer.flush(10)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic_name, f"kept{i}".encode())
    producer.commit_transaction(30)
    committed = consume_all(bootstrap, topic_name, "read_committed")
    assert committed == [b"kept0", b"kept1", b"kept2"]
    uncommitted = consume_all(bootstrap, topic_name, "read_uncommitted")
    assert uncommitted == [f"aborted{i}".encode() for i in range(5)] + [b"kept0", b"kept1", b"kept2"]


def test_open_transaction_holds_back_later_writes_from_read_committed(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    create_topic(bootstrap, topic_name)
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic_name, b"in-txn")
    producer.flush(10)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic_name, b"after")
    plain.flush(10)
    # The later non-transactional write waits behind the open transaction's LSO...
    assert consume_all(bootstrap, topic_name, "read_committed", timeout=3) == []
    assert latest_offset(bootstrap, topic_name, read_committed=True) == 0
    assert latest_offset(bootstrap, topic_name, read_committed=False) == 2
    assert consume_all(bootstrap, topic_name, "read_uncommitted", expect=2) == [b"in-txn", b"after"]
    producer.commit_transaction(30)
    # ...and is released, in order, by the commit.
    assert consume_all(bootstrap, topic_name, "read_committed", expect=2) == [b"in-txn", b"after"]


def test_new_producer_with_same_transactional_id_fences_the_old_one(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    create_topic(bootstrap, topic_name)
    zombie = txn_producer(bootstrap, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie")
    zombie.flush(10)
    successor = txn_producer(bootstrap, txn_id)
    successor.begin_transaction()
    successor.produce(topic_name, b"successor")
    successor.commit_transaction(30)
    try:
        zombie.produce(topic_name, b"zombie-again")
        zombie.commit_transaction(10)
    except KafkaException as exc:
        assert exc.args[0].fatal() or "fenced" in str(exc).lower(), exc
    else:
        raise AssertionError("the fenced producer committed")
    assert consume_all(bootstrap, topic_name, "read_committed") == [b"successor"]
