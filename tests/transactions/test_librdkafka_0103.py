"""librdkafka's transaction test 0103, its broker-facing cases redone with confluent-kafka (librdkafka 2.x)
against sluice: API misuse, commit/abort with sync and async producing (with and without compression), a
streams-like consume-transform-produce job aborting every third transaction, fencing with and without a
produce after the fence, DeleteRecords under an open transaction (KIP-360 brokers keep the producer's
state), and empty transactions with and without offsets."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.transactions.conftest import consume_all, create_topic, txn_producer


def group_consumer(bootstrap: str, group: str, topic: str, **extra: object) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **extra,
        }
    )
    consumer.subscribe([topic])
    return consumer


def wait_assignment(consumer: Consumer, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not consumer.assignment():
        assert time.monotonic() < deadline, "no assignment"
        consumer.poll(0.1)


def poll_values(consumer: Consumer, want: int | None, timeout: float) -> list[bytes]:
    """Values polled until `want` arrived, or everything that came within `timeout` when want is None."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (want is None or len(values) < want):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    return values


def test_misuse_of_the_transaction_api(bootstrap: str, txn_id: str) -> None:
    # A timeout the broker cannot accept is refused with INVALID_TRANSACTION_TIMEOUT (fatal), not a hang.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 2147483647}
    )
    started = time.monotonic()
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(10)
    assert refused.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT
    assert refused.value.args[0].fatal()
    assert time.monotonic() - started < 5
    del producer

    def state_error(call: object, *args: object, codes: tuple[int, ...] = (KafkaError._STATE,)) -> None:
        with pytest.raises(KafkaException) as failed:
            call(*args)  # type: ignore[operator]
        assert failed.value.args[0].code() in codes, failed.value

    # After a successful init, init again is a state error, before and after begin_transaction().
    producer = txn_producer(bootstrap, txn_id)
    state_error(producer.init_transactions, 1)
    producer.begin_transaction()
    state_error(producer.init_transactions, 3)
    del producer

    # An init that times out is retriable and can be resumed...
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    with pytest.raises(KafkaException) as timed_out:
        producer.init_transactions(0.001)
    assert timed_out.value.args[0].code() == KafkaError._TIMED_OUT
    assert timed_out.value.args[0].retriable()
    producer.init_transactions(30)
    del producer

    # ...even after a great many short attempts; begin_transaction() is refused until one succeeds.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    for _ in range(5000):
        try:
            producer.init_transactions(0.001)
            break
        except KafkaException as exc:
            assert exc.args[0].retriable(), exc
            # librdkafka 2.x says _CONFLICT while the resumable init is still running, _STATE otherwise.
            state_error(producer.begin_transaction, codes=(KafkaError._STATE, KafkaError._CONFLICT))
    else:
        raise AssertionError("init_transactions() never completed")
    state_error(producer.init_transactions, 5)
    producer.begin_transaction()
    producer.commit_transaction(30)


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_basic_producer_transactions(bootstrap: str, topic_name: str, txn_id: str, compression: str) -> None:
    create_topic(bootstrap, topic_name, partitions=4)
    consumer = group_consumer(bootstrap, f"{topic_name}-group", topic_name)
    wait_assignment(consumer)
    producer = txn_producer(bootstrap, txn_id, **{"compression.codec": compression})
    cases = [
        ("commit, sync producing", 100, False, True),
        ("commit, async producing", 1000, False, False),
        ("abort, sync producing", 500, True, True),
        ("abort, async producing", 5000, True, False),
    ]
    try:
        for desc, count, abort, sync in cases:
            testid = uuid.uuid4().hex[:8]
            producer.begin_transaction()
            for i in range(count):
                while True:
                    try:
                        producer.produce(topic_name, f"{testid}:{i}".encode())
                        break
                    except BufferError:
                        producer.poll(0.05)
            if sync:
                assert producer.flush(30) == 0
            if abort:
                producer.abort_transaction(30)
                seen = poll_values(consumer, None, 2.0)
                assert not [v for v in seen if v.startswith(testid.encode())], desc
            else:
                producer.commit_transaction(30)
                seen = poll_values(consumer, count, 30.0)
                assert sorted(seen) == sorted(f"{testid}:{i}".encode() for i in range(count)), desc
    finally:
        consumer.close()


def test_consumer_producer_job_aborting_every_third_transaction(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source, partitions=4)
    create_topic(bootstrap, sink, partitions=4)
    seed = txn_producer(bootstrap, f"{txn_id}-seed")
    seed.begin_transaction()
    for i in range(300):
        seed.produce(source, f"in{i}".encode(), key=str(i).encode())
    seed.commit_transaction(30)
    del seed

    group = f"{topic_name}-job"
    reader = group_consumer(bootstrap, group, source)
    job = txn_producer(bootstrap, txn_id)
    expected: list[bytes] = []
    try:
        for txn in range(10):
            count = 10 * (1 + txn % 3)
            abort = txn % 3 == 0
            msgs: list = []
            deadline = time.monotonic() + 30
            while len(msgs) < count:
                assert time.monotonic() < deadline, f"txn {txn}: only {len(msgs)} of {count} consumed"
                msg = reader.poll(0.5)
                if msg is not None and msg.error() is None:
                    msgs.append(msg)
            job.begin_transaction()
            for msg in msgs:
                job.produce(sink, msg.value(), key=msg.key())
            job.send_offsets_to_transaction(
                reader.position(reader.assignment()), reader.consumer_group_metadata(), 30
            )
            if abort:
                job.abort_transaction(30)
            else:
                job.commit_transaction(30)
                expected += [m.value() for m in msgs]
            if abort and txn == 3:
                # A new consumer starts from the offsets committed with the last committed transaction.
                reader.close()
                reader = group_consumer(bootstrap, group, source)
    finally:
        reader.close()
    out = consume_all(bootstrap, sink, "read_committed", partitions=4, expect=len(expected), timeout=30)
    assert sorted(out) == sorted(expected)
    assert len(out) == len(expected)


@pytest.mark.parametrize("produce_after_fence", [False, True])
def test_fenced_producer_commits_nothing(
    bootstrap: str, topic_name: str, txn_id: str, produce_after_fence: bool
) -> None:
    create_topic(bootstrap, topic_name)
    first = txn_producer(bootstrap, txn_id)
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    first.begin_transaction()
    for i in range(10):
        first.produce(topic_name, f"fenced{i}".encode())
    assert first.flush(10) == 0
    second.init_transactions(30)  # fences the first
    if produce_after_fence:
        # Kafka answers a produce with the old epoch INVALID_PRODUCER_EPOCH: librdkafka raises it as fatal.
        with pytest.raises(KafkaException) as produce_failed:
            for i in range(10):
                first.produce(topic_name, f"after{i}".encode())
            first.flush(10)
        assert produce_failed.value.args[0].code() == KafkaError._FENCED
    with pytest.raises(KafkaException) as failed:
        first.commit_transaction(30)
    error = failed.value.args[0]
    assert error.fatal() and not error.txn_requires_abort() and not error.retriable(), error
    assert error.code() == KafkaError._FENCED
    assert consume_all(bootstrap, topic_name, "read_committed") == []


def test_delete_records_under_an_open_transaction_keeps_the_producer_going(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    """librdkafka's do_test_fatal_idempo_error_without_kip360, on a KIP-360 broker: the producer state
    outlives DeleteRecords of all its data, so the transaction carries on and commits."""
    create_topic(bootstrap, topic_name)
    producer = txn_producer(bootstrap, txn_id, **{"batch.num.messages": 1})
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, f"t1-{i}".encode(), partition=0)
    producer.commit_transaction(30)

    producer.begin_transaction()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cut = TopicPartition(topic_name, 0, 11)  # the ten messages and their COMMIT marker
    assert admin.delete_records([cut])[cut].result(30).low_watermark == 11
    for i in range(10):
        producer.produce(topic_name, f"t2-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, f"t3-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    values = consume_all(bootstrap, topic_name, "read_committed", expect=20)
    assert values == [f"t2-{i}".encode() for i in range(10)] + [f"t3-{i}".encode() for i in range(10)]


@pytest.mark.parametrize("send_offsets", [False, True])
@pytest.mark.parametrize("commit", [True, False])
def test_empty_transaction(
    bootstrap: str, topic_name: str, txn_id: str, send_offsets: bool, commit: bool
) -> None:
    create_topic(bootstrap, topic_name)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        plain.produce(topic_name, f"plain{i}".encode())
    assert plain.flush(10) == 0
    consumer = group_consumer(
        bootstrap, f"{topic_name}-group", topic_name, **{"isolation.level": "read_uncommitted"}
    )
    try:
        wait_assignment(consumer)
        producer = txn_producer(bootstrap, txn_id)
        producer.begin_transaction()
        if send_offsets:
            assert len(poll_values(consumer, 10, 20.0)) == 10
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        committed = consumer.committed(consumer.assignment(), 10)
        assert len(committed) == 1
        if commit and send_offsets:
            assert committed[0].offset >= 10
        else:
            assert committed[0].offset < 0
    finally:
        consumer.close()
