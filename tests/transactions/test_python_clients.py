"""kafka-python's and aiokafka's transactional producers against sluice: an aborted and a committed
transaction, read back with both isolation levels."""

from __future__ import annotations

import asyncio

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from tests.transactions.conftest import consume_all, create_topic


def test_kafka_python_transactional_producer_commits_and_aborts(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    create_topic(bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic_name, f"aborted{i}".encode())
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic_name, f"committed{i}".encode())
        producer.commit_transaction()
    finally:
        producer.close(5)
    assert consume_all(bootstrap, topic_name, "read_committed") == [
        f"committed{i}".encode() for i in range(5)
    ]
    assert len(consume_all(bootstrap, topic_name, "read_uncommitted")) == 10


def test_kafka_python_suite_transactional_producer_messages(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    """kafka-python's own test_transactional_producer_messages: each send waited for, the topic created on
    first use, a read_committed consumer assigned to partition 0."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, partition=0, value=b"msg1").get(timeout=30)
        producer.send(topic_name, partition=0, value=b"msg2").get(timeout=30)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, partition=0, value=b"msg3").get(timeout=30)
        producer.send(topic_name, partition=0, value=b"msg4").get(timeout=30)
        producer.commit_transaction()
    finally:
        producer.close(5)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        consumer_timeout_ms=10_000,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    messages = set()
    try:
        consumer.assign([TopicPartition(topic_name, 0)])
        for msg in consumer:
            assert msg.value in {b"msg3", b"msg4"}
            messages.add(msg.value)
            if messages == {b"msg3", b"msg4"}:
                break
    finally:
        consumer.close()
    assert messages == {b"msg3", b"msg4"}


def test_kafka_python_suite_transactional_producer_offsets(
    bootstrap: str, topic_name: str, txn_id: str, group_name: str
) -> None:
    """kafka-python's own test_transactional_producer_offsets: offsets sent in a committed transaction are
    the group's (metadata and leader epoch kept); those of an aborted one are not."""
    create_topic(bootstrap, topic_name, partitions=2)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, partition=0, value=b"msg1").get(timeout=30)
        producer.send_offsets_to_transaction({tp0: OffsetAndMetadata(0, "metadata", 0)}, group_name)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({tp1: OffsetAndMetadata(1, "bad", 1)}, group_name)
        producer.abort_transaction()
    finally:
        producer.close(5)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        # kafka-python 3 answers per group.
        assert admin.list_group_offsets(group_name)[group_name] == {
            tp0: OffsetAndMetadata(offset=0, metadata="metadata", leader_epoch=0)
        }
    finally:
        admin.close()


def test_aiokafka_transactional_producer_commits_and_aborts(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    create_topic(bootstrap, topic_name)

    async def run() -> tuple[list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send(topic_name, f"kept{i}".encode())
            await producer.begin_transaction()
            for i in range(5):
                await producer.send(topic_name, f"dropped{i}".encode())
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic_name, b"last")
        finally:
            await producer.stop()
        seen: dict[str, list[bytes]] = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                isolation_level=isolation,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                tp = TopicPartition(topic_name, 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                values: list[bytes] = []
                want = 6 if isolation == "read_committed" else 11
                async with asyncio.timeout(15):
                    while len(values) < want:
                        batch = await consumer.getmany(tp, timeout_ms=500)
                        values += [m.value for m in batch.get(tp, [])]
                seen[isolation] = values
            finally:
                await consumer.stop()
        return seen["read_committed"], seen["read_uncommitted"]

    committed, uncommitted = asyncio.run(run())
    assert committed == [f"kept{i}".encode() for i in range(5)] + [b"last"]
    assert len(uncommitted) == 11
