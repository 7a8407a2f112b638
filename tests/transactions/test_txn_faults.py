"""Transactions under faults, against a real `sluice broker` process: a full disk in the middle of a
transaction, a corrupt byte in `__transaction_state`, and producers that vanish mid-transaction (killed,
or cut off half-way through sending EndTxn)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from tests.transactions.conftest import consume_all, create_topic, txn_producer
from tests.transactions.test_txn_bad_input import end_txn, init

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

MIN_FREE = 4 << 20


@pytest.fixture
def small_tmpfs(mount_tmpfs: Callable[[str], Path]) -> Path:
    return mount_tmpfs("24m")


def fill_below(directory: Path, free_bytes: int) -> Path:
    """Leave about `free_bytes` free on the filesystem of `directory`."""
    stats = os.statvfs(directory)
    filler = directory / "filler"
    with filler.open("wb") as out:
        out.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - free_bytes))
    return filler


def test_full_disk_mid_transaction_refuses_commit_until_space_is_back(small_tmpfs: Path) -> None:
    proc = BrokerProcess(small_tmpfs / "data", min_free_bytes=MIN_FREE).start()
    try:
        bootstrap = proc.bootstrap
        create_topic(bootstrap, "t", partitions=2)
        producer = txn_producer(bootstrap, "filler-txn")
        producer.begin_transaction()
        for i in range(10):
            producer.produce("t", f"m{i}".encode(), partition=i % 2)
        assert producer.flush(10) == 0
        # A second transaction whose timeout runs out while the disk is full.
        late = txn_producer(bootstrap, "late-txn", **{"transaction.timeout.ms": 1500})
        late.begin_transaction()
        late.produce("t", b"late", partition=0)
        assert late.flush(10) == 0

        filler = fill_below(small_tmpfs, MIN_FREE // 2)
        time.sleep(1.2)  # the broker measures free space about once a second while writes are accepted
        started = time.monotonic()
        with pytest.raises(KafkaException) as refused:
            producer.commit_transaction(3)
        assert refused.value.args[0].retriable(), refused.value.args[0]
        assert time.monotonic() - started < 10
        # Straight on the wire: InitProducerId is refused at once with NOT_COORDINATOR (Kafka's answer when the
        # coordinator cannot write its log; retriable), and the coordinator changed nothing (the same commit
        # goes through once space is back).
        with WireClient.connect(bootstrap) as client:
            assert init(client, "other-txn").error_code == ErrorCode.NOT_COORDINATOR
        time.sleep(2.5)  # past late-txn's timeout: its abort must wait for space too
        assert consume_all(bootstrap, "t", "read_committed", partitions=2, timeout=2) == []
        assert "refusing writes" in "".join(proc.output)

        filler.unlink()
        time.sleep(0.5)
        producer.commit_transaction(30)
        visible = consume_all(bootstrap, "t", "read_committed", partitions=2, expect=10, timeout=15)
        assert sorted(visible) == sorted(f"m{i}".encode() for i in range(10))
        # The late transaction was aborted by the timer once writes were accepted again.
        with pytest.raises(KafkaException):
            late.commit_transaction(10)
        assert "broker timer failed" not in "".join(proc.output)
        producer.begin_transaction()
        producer.produce("t", b"after", partition=1)
        producer.commit_transaction(30)
    finally:
        proc.stop()
    proc.restart()
    try:
        visible = consume_all(proc.bootstrap, "t", "read_committed", partitions=2)
        assert sorted(visible) == sorted([f"m{i}".encode() for i in range(10)] + [b"after"])
    finally:
        proc.stop()


def _flip_byte_in_last_batch(log_file: Path) -> None:
    data = bytearray(log_file.read_bytes())
    pos, last = 0, 0
    while pos + 12 <= len(data):
        last = pos
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    # A byte in the records (covered by the CRC), well past the batch header.
    data[last + 70] ^= 0xFF
    log_file.write_bytes(bytes(data))


def test_corrupt_byte_in_transaction_state_costs_no_committed_data(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(proc.bootstrap, "t", partitions=2)
        producer = txn_producer(proc.bootstrap, "damaged")
        producer.begin_transaction()
        for i in range(6):
            producer.produce("t", f"c{i}".encode(), partition=i % 2)
        producer.commit_transaction(30)
        del producer
    finally:
        proc.stop()
    state_dir = tmp_path / "data" / "__transaction_state-0"
    logs = sorted(state_dir.glob("*.log"))
    assert logs, list(state_dir.iterdir())
    _flip_byte_in_last_batch(logs[-1])

    proc.start()
    try:
        # The broker comes up; the damaged record (the CompleteCommit) is lost, so the PrepareCommit before
        # it is finished again: the transaction stays committed, whole.
        visible = consume_all(proc.bootstrap, "t", "read_committed", partitions=2)
        assert sorted(visible) == sorted(f"c{i}".encode() for i in range(6))
        again = txn_producer(proc.bootstrap, "damaged")
        again.begin_transaction()
        again.produce("t", b"next", partition=0)
        again.commit_transaction(30)
        visible = consume_all(proc.bootstrap, "t", "read_committed", partitions=2)
        assert sorted(visible) == sorted([f"c{i}".encode() for i in range(6)] + [b"next"])
    finally:
        proc.stop()


VANISHING_PRODUCER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "vanishing",
                  "transaction.timeout.ms": 2000, "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(20):
        p.produce(sys.argv[2], b"lost%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_a_producer_killed_mid_transaction_is_aborted_by_its_timeout(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    child = subprocess.Popen(
        [sys.executable, "-c", VANISHING_PRODUCER, bootstrap, topic_name], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.kill()
        child.wait(10)
    # Writes after the vanished producer's wait behind its open transaction, then appear once the
    # broker's timer aborts it; nothing it wrote is ever visible to read_committed.
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(4):
        plain.produce(topic_name, f"later{i}".encode(), partition=i % 2)
    assert plain.flush(10) == 0
    assert consume_all(bootstrap, topic_name, "read_committed", partitions=2, timeout=1) == []
    visible = consume_all(bootstrap, topic_name, "read_committed", partitions=2, expect=4, timeout=15)
    assert sorted(visible) == sorted(f"later{i}".encode() for i in range(4))
    assert len(consume_all(bootstrap, topic_name, "read_uncommitted", partitions=2)) == 24


def test_a_connection_cut_half_way_through_end_txn_changes_nothing(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    from tests.transactions.test_txn_bad_input import add_partitions, txn_produce

    create_topic(bootstrap, topic_name)
    with WireClient.connect(bootstrap) as client:
        ids = init(client, txn_id)
        pid, epoch = ids.producer_id, ids.producer_epoch
        assert add_partitions(client, txn_id, pid, epoch, topic_name) == ErrorCode.NONE
        assert txn_produce(client, txn_id, topic_name, pid, epoch) == ErrorCode.NONE
        cls = client.request_class("EndTxn")
        frame = client.encode_request(
            "EndTxn", 3, cls(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=True)
        )
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as cut:
        cut.sendall(len(frame).to_bytes(4, "big") + frame[: len(frame) // 2])
    # The half request was never a commit: the transaction is still open, and a whole EndTxn commits it.
    assert consume_all(bootstrap, topic_name, "read_committed", timeout=1) == []
    with WireClient.connect(bootstrap) as client:
        assert end_txn(client, txn_id, pid, epoch) == ErrorCode.NONE
    assert consume_all(bootstrap, topic_name, "read_committed", expect=1) == [b"v"]


EIO_HOOK = Path(__file__).parents[1] / "broker" / "eio_hook"


def describe_state(bootstrap: str, transactional_id: str) -> str:
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("DescribeTransactions")
        state = client.call(
            "DescribeTransactions", 0, cls(transactional_ids=[transactional_id])
        ).transaction_states[0]
        return ErrorCode(state.error_code).name if state.error_code else state.transaction_state


def test_a_partition_refusing_its_marker_holds_the_transaction_whole(tmp_path: Path) -> None:
    """An I/O error takes one partition of a committed transaction offline before its COMMIT marker is
    written. The transaction stays PrepareCommit (its producer hears CONCURRENT_TRANSACTIONS, so no later
    state can hide the unfinished marker) and a restart writes the marker: the transaction is committed in
    both partitions, never committed in one and aborted in the other."""
    trigger = tmp_path / "eio-now"
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "SLUICE_TEST_EIO_TRIGGER", "SLUICE_TEST_EIO_DIR")}
    os.environ.update(
        PYTHONPATH=os.pathsep.join([str(EIO_HOOK), *sys.path]),
        SLUICE_TEST_EIO_TRIGGER=str(trigger),
        SLUICE_TEST_EIO_DIR="victim-0",
    )
    try:
        proc = BrokerProcess(tmp_path / "data").start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        bootstrap = proc.bootstrap
        create_topic(bootstrap, "victim")
        create_topic(bootstrap, "healthy")
        producer = txn_producer(bootstrap, "held")
        producer.begin_transaction()
        for i in range(5):
            producer.produce("victim", f"v{i}".encode())
            producer.produce("healthy", f"h{i}".encode())
        assert producer.flush(10) == 0
        trigger.touch()
        producer.commit_transaction(30)  # the decision is durable: the prepare record was fsynced
        assert sorted(consume_all(bootstrap, "healthy", "read_committed", expect=5)) == [
            f"h{i}".encode() for i in range(5)
        ]
        assert describe_state(bootstrap, "held") == "PrepareCommit"
        assert "cannot write its COMMIT marker into victim-0" in "".join(proc.output)
        # Until the marker is written the producer cannot start another transaction (retriable).
        producer.begin_transaction()
        producer.produce("healthy", b"blocked")
        with pytest.raises(KafkaException) as blocked:
            producer.commit_transaction(3)
        assert blocked.value.args[0].retriable() or blocked.value.args[0].txn_requires_abort()
        assert describe_state(bootstrap, "held") == "PrepareCommit"
        # Retried every second, said once.
        assert "".join(proc.output).count("cannot write its COMMIT marker") == 1
    finally:
        proc.stop()
    trigger.unlink()
    proc.restart()
    try:
        assert sorted(consume_all(proc.bootstrap, "victim", "read_committed", expect=5)) == [
            f"v{i}".encode() for i in range(5)
        ]
        assert describe_state(proc.bootstrap, "held") == "CompleteCommit"
        again = txn_producer(proc.bootstrap, "held")
        again.begin_transaction()
        again.produce("victim", b"after")
        again.commit_transaction(30)
        assert consume_all(proc.bootstrap, "victim", "read_committed", expect=6)[-1] == b"after"
    finally:
        proc.stop()


def test_a_single_partition_commit_is_complete_on_disk_soon_after_its_answer(tmp_path: Path) -> None:
    """EndTxn of a one-partition transaction waits for its marker only; its CompleteCommit record rides
    with the next flush or, on an idle broker, a timer within milliseconds. Killed after that, and stopped
    cleanly right after a commit, the broker comes back with the transaction CompleteCommit."""
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(proc.bootstrap, "one")
        producer = txn_producer(proc.bootstrap, "solo")
        producer.begin_transaction()
        producer.produce("one", b"first")
        producer.commit_transaction(30)
        time.sleep(0.5)
        proc.kill()
        del producer
        proc.restart()
        assert describe_state(proc.bootstrap, "solo") == "CompleteCommit"
        assert consume_all(proc.bootstrap, "one", "read_committed", expect=1) == [b"first"]
        again = txn_producer(proc.bootstrap, "solo")
        again.begin_transaction()
        again.produce("one", b"second")
        again.commit_transaction(30)
        del again
    finally:
        proc.stop()
    proc.restart()
    try:
        assert describe_state(proc.bootstrap, "solo") == "CompleteCommit"
        assert consume_all(proc.bootstrap, "one", "read_committed", expect=2) == [b"first", b"second"]
    finally:
        proc.stop()
