"""Exactly-once pieces with confluent-kafka: consume-transform-produce, the broker's timeout abort, and
transactions across kill -9 and clean restarts of a real broker process."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from tests.transactions.conftest import consume_all, create_topic, txn_producer

from sluice.testing import BrokerProcess


def test_consume_transform_produce_commits_offsets_with_the_output(
    bootstrap: str, topic_name: str, txn_id: str, group_name: str
) -> None:
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(bootstrap, source)
    create_topic(bootstrap, sink)
    seed = txn_producer(bootstrap, f"{txn_id}-seed")
    seed.begin_transaction()
    for i in range(20):
        seed.produce(source, str(i).encode())
    seed.commit_transaction(30)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = txn_producer(bootstrap, txn_id)
    done = 0
    rounds = 0
    deadline = time.monotonic() + 30
    while done < 20 and time.monotonic() < deadline:
        msgs = consumer.consume(10, 1.0)
        msgs = [m for m in msgs if not m.error()]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, str(int(m.value()) * 10).encode())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 10
        )
        if rounds == 0:
            # The first round is thrown away: its output and its offsets must both vanish.
            producer.abort_transaction(30)
            consumer.seek(TopicPartition(source, 0, msgs[0].offset()))
            pending = consumer.committed([TopicPartition(source, 0)], 10)[0].offset
            assert pending < 0, "offsets of an aborted transaction became visible"
        else:
            producer.commit_transaction(30)
            done += len(msgs)
        rounds += 1
    committed = consumer.committed([TopicPartition(source, 0)], 10)[0].offset
    consumer.close()
    assert committed == 20
    out = consume_all(bootstrap, sink, "read_committed", expect=20)
    assert sorted(int(v) for v in out) == [i * 10 for i in range(20)]


def test_broker_aborts_a_transaction_past_its_timeout(bootstrap: str, topic_name: str, txn_id: str) -> None:
    create_topic(bootstrap, topic_name)
    producer = txn_producer(bootstrap, txn_id, **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    producer.produce(topic_name, b"never")
    producer.flush(10)
    # The open transaction holds the LSO until the broker's timer aborts it.
    assert consume_all(bootstrap, topic_name, "read_committed", timeout=1) == []
    time.sleep(2.5)
    try:
        producer.commit_transaction(10)
    except KafkaException:
        pass
    else:
        raise AssertionError("a transaction aborted by its timeout was committed")
    assert consume_all(bootstrap, topic_name, "read_committed") == []
    assert consume_all(bootstrap, topic_name, "read_uncommitted") == [b"never"]


def test_kill_9_keeps_the_committed_transaction_and_aborts_the_open_one(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(proc.bootstrap, "t", partitions=2)
        committed = txn_producer(proc.bootstrap, "committer")
        committed.begin_transaction()
        for i in range(10):
            committed.produce("t", f"c{i}".encode(), partition=i % 2)
        committed.commit_transaction(30)
        open_one = txn_producer(proc.bootstrap, "opener")
        open_one.begin_transaction()
        for i in range(10):
            open_one.produce("t", f"o{i}".encode(), partition=i % 2)
        open_one.flush(10)
        proc.kill()
        del open_one
        proc.start()
        # The committed transaction is whole; nothing of the open one is visible, and it stays open...
        visible = consume_all(proc.bootstrap, "t", "read_committed", partitions=2, timeout=5)
        assert sorted(visible) == sorted(f"c{i}".encode() for i in range(10))
        # ...which a new producer with its transactional id does.
        successor = txn_producer(proc.bootstrap, "opener")
        successor.begin_transaction()
        successor.produce("t", b"after", partition=0)
        successor.commit_transaction(30)
        values = consume_all(proc.bootstrap, "t", "read_committed", partitions=2)
        assert sorted(values) == sorted([f"c{i}".encode() for i in range(10)] + [b"after"])
        assert len(consume_all(proc.bootstrap, "t", "read_uncommitted", partitions=2)) == 21
    finally:
        proc.kill()


def test_transactions_survive_a_clean_restart(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(proc.bootstrap, "t")
        producer = txn_producer(proc.bootstrap, "restarter")
        producer.begin_transaction()
        producer.produce("t", b"aborted")
        producer.flush(10)
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.produce("t", b"kept")
        producer.commit_transaction(30)
        del producer
        proc.stop()
        proc.start()
        assert consume_all(proc.bootstrap, "t", "read_committed") == [b"kept"]
        assert consume_all(proc.bootstrap, "t", "read_uncommitted") == [b"aborted", b"kept"]
        # The transactional id is remembered: a new incarnation gets the next epoch of the same producer.
        again = txn_producer(proc.bootstrap, "restarter")
        again.begin_transaction()
        again.produce("t", b"again")
        again.commit_transaction(30)
        assert consume_all(proc.bootstrap, "t", "read_committed") == [b"kept", b"again"]
        proc.stop()
        # The aborted-transaction index is on disk, and rebuilt from the log's markers when lost.
        index_files = list((tmp_path / "data").rglob("*.txnindex"))
        assert index_files
        for path in index_files:
            path.unlink()
        proc.start()
        assert consume_all(proc.bootstrap, "t", "read_committed") == [b"kept", b"again"]
        assert list((tmp_path / "data").rglob("*.txnindex"))
    finally:
        proc.stop()


def test_kill_9_mid_stream_never_shows_half_a_transaction(tmp_path: Path) -> None:
    """Transactions of 10 records over 2 partitions stream until kill -9: afterwards every transaction whose
    commit was acknowledged is whole, and no transaction is visible in part."""
    import threading

    proc = BrokerProcess(tmp_path / "data").start()
    acknowledged: list[int] = []
    try:
        create_topic(proc.bootstrap, "s", partitions=2)
        producer = txn_producer(
            proc.bootstrap, "streamer", **{"transaction.timeout.ms": 10_000, "message.timeout.ms": 3000}
        )
        stop = threading.Event()

        def stream() -> None:
            n = 0
            while not stop.is_set():
                try:
                    producer.begin_transaction()
                    for i in range(10):
                        producer.produce("s", f"{n}:{i}".encode(), partition=i % 2)
                    producer.commit_transaction(3)
                except KafkaException:
                    return  # the broker is gone
                acknowledged.append(n)
                n += 1

        thread = threading.Thread(target=stream)
        thread.start()
        time.sleep(1.5)
        proc.kill()
        stop.set()
        thread.join(30)
        assert acknowledged, "no transaction committed before the kill"
        proc.start()
        # A new incarnation of the producer aborts whatever the crash left open.
        txn_producer(proc.bootstrap, "streamer").begin_transaction()
        values = consume_all(proc.bootstrap, "s", "read_committed", partitions=2, timeout=20)
        by_txn: dict[int, int] = {}
        for value in values:
            n, _ = value.decode().split(":")
            by_txn[int(n)] = by_txn.get(int(n), 0) + 1
        assert all(count == 10 for count in by_txn.values()), {n: c for n, c in by_txn.items() if c != 10}
        assert set(acknowledged) <= set(by_txn)
    finally:
        proc.kill()
