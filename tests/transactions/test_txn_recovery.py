"""Start-up recovery of transactions, in process on the real broker and disk storage: a commit a crash left
between its prepare record and its markers is finished, and a transaction nobody knows is aborted."""

from __future__ import annotations

import time
from pathlib import Path

from sluice.broker.broker import Broker
from sluice.broker.config import BrokerConfig
from sluice.coordinator.transactions import TransactionCoordinator
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches
from sluice.server.app import build_broker
from sluice.storage.compaction.cleaner import clean_partition


def now() -> int:
    return int(time.time() * 1000)


def txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return encode_batch(
        [Record(0, 0, None, value, [])],
        base_timestamp=now(),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def open_broker(data: Path) -> Broker:
    return build_broker(BrokerConfig(data_dir=data, listen_port=0))


def committed_values(broker: Broker, topic: str) -> list[bytes]:
    state = broker.partition(topic, 0)
    data = broker.read(state, 0, 1 << 20, committed=True)
    aborted = {a.producer_id for a in broker.aborted_transactions(state, 0, data)}
    from sluice.protocol.records import decode_batch

    out = []
    for pos, header in iter_batches(data):
        if header.is_control or header.producer_id in aborted:
            continue
        out += [r.value for r in decode_batch(data, pos)[1]]
    return out


def open_transaction_over_a_and_b(tmp_path: Path) -> tuple[Broker, TransactionCoordinator, int, int]:
    """A broker with topics a and b, and transactional id "t" with a transaction open over a-0 and b-0:
    (broker, its transaction coordinator, producer id, epoch)."""
    broker = open_broker(tmp_path)
    broker.create_topic("a", 1, {})
    broker.create_topic("b", 1, {})
    tc = broker.transactions.coordinator
    init = tc.init_producer_id("t", 60_000, -1, -1, now(), broker.new_producer_id(now()))
    broker.transactions.apply(init, now())
    pid, epoch = init.producer_id, init.epoch
    broker.transactions.apply(tc.add_partitions("t", pid, epoch, [("a", 0), ("b", 0)], now()), now())
    return broker, tc, pid, epoch


def test_a_prepared_commit_is_finished_at_start(tmp_path: Path) -> None:
    broker, tc, pid, epoch = open_transaction_over_a_and_b(tmp_path)
    for topic in ("a", "b"):
        batch = txn_batch(pid, epoch, 0, f"in-{topic}".encode())
        assert broker.append(topic, 0, batch, now()).error == 0
    # The crash: the prepare record reached the log, the markers and the complete record did not.
    ended = tc.end_txn("t", pid, epoch, True, now())
    broker.transactions.persist(ended.prepare, now())
    broker.close()

    again = open_broker(tmp_path)
    assert again.transactions.coordinator.txns["t"].state.value == "CompleteCommit"
    assert committed_values(again, "a") == [b"in-a"] and committed_values(again, "b") == [b"in-b"]
    again.close()


def test_an_unknown_open_transaction_is_aborted_at_start(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("a", 1, {})
    # Data of a transaction whose "partition added" record a crash lost (the verifier is bypassed here).
    broker.txn_verifier = lambda *args: None
    state = broker.partition("a", 0)
    broker.append_internal("a", 0, txn_batch(777, 0, 0, b"orphan"), now())
    broker.end_flush(broker.begin_flush())
    assert state.last_stable_offset == 0
    broker.close()

    again = open_broker(tmp_path)
    state = again.partition("a", 0)
    assert state.last_stable_offset == state.high_watermark == 2  # data + abort marker
    assert committed_values(again, "a") == []
    again.close()


def test_transaction_state_log_is_compacted_by_the_cleaner_and_reads_back(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path, listen_port=0, transaction_state_segment_bytes=2048)
    broker = build_broker(config)
    tc = broker.transactions.coordinator
    for i in range(200):  # 4 transactional ids, re-initialised over and over
        out = tc.init_producer_id(f"t{i % 4}", 60_000, -1, -1, now(), broker.new_producer_id(now()))
        broker.transactions.apply(out, now())
    broker.partition("__transaction_state", 0).log.flush()  # the cleaner only takes durable segments
    epochs = {t: m.epoch for t, m in tc.txns.items()}
    state = broker.partition("__transaction_state", 0)
    log = state.log
    before = state_offsets(log)
    assert len(before) == 200
    topic_config = broker.storage.topic("__transaction_state").config
    assert clean_partition(log, topic_config, now())
    after = state_offsets(log)
    # Offsets are kept (the log has gaps now); only the active segment and one record per id remain.
    assert set(after) < set(before) and after == sorted(after) and after[-1] == before[-1]
    assert len(after) < 60
    assert log.log_start_offset == 0
    broker.close()
    again = build_broker(config)
    assert {t: m.epoch for t, m in again.transactions.coordinator.txns.items()} == epochs
    assert state_offsets(again.partition("__transaction_state", 0).log) == after
    again.close()


def test_an_idle_transactional_id_expires_and_stays_gone_after_restart(tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from tests.transactions.conftest import create_topic
    from tests.transactions.test_txn_faults import describe_state

    from sluice.testing import BrokerProcess

    config = tmp_path / "broker.yaml"
    config.write_text("transactional_id_expiration_ms: 1500\n")
    proc = BrokerProcess(tmp_path / "data", config=config).start()
    try:
        create_topic(proc.bootstrap, "t")
        producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "idle"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("t", b"kept")
        producer.commit_transaction(30)
        del producer
        assert describe_state(proc.bootstrap, "idle") == "CompleteCommit"
        deadline = time.monotonic() + 10
        while describe_state(proc.bootstrap, "idle") == "CompleteCommit" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert describe_state(proc.bootstrap, "idle") == "TRANSACTIONAL_ID_NOT_FOUND"
    finally:
        proc.stop()
    proc.restart()
    try:
        assert describe_state(proc.bootstrap, "idle") == "TRANSACTIONAL_ID_NOT_FOUND"
        # The id is free again: a new producer starts over with it, and the committed data is still there.
        fresh = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "idle"})
        fresh.init_transactions(30)
        fresh.begin_transaction()
        fresh.produce("t", b"again")
        fresh.commit_transaction(30)
    finally:
        proc.stop()


def state_offsets(log) -> list[int]:
    offsets: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for pos, header in iter_batches(data):
            offsets += [header.base_offset + r.offset_delta for r in decode_batch(data, pos)[1]]
            offset = header.last_offset + 1
    return offsets


def test_a_single_partition_commit_waits_only_for_its_marker(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("a", 1, {})
    tc = broker.transactions.coordinator
    init = tc.init_producer_id("t", 60_000, -1, -1, now(), broker.new_producer_id(now()))
    broker.transactions.apply(init, now())
    pid, epoch = init.producer_id, init.epoch
    broker.transactions.apply(tc.add_partitions("t", pid, epoch, [("a", 0)], now()), now())
    assert broker.append("a", 0, txn_batch(pid, epoch, 0, b"kept"), now()).error == 0
    broker.end_flush(broker.begin_flush())
    assert broker.transactions.apply(tc.end_txn("t", pid, epoch, True, now()), now(), ending=True)
    # The EndTxn answer waits for the marker's partition only; the state records ride with a later flush.
    assert set(broker.unflushed) == {("a", 0)}
    assert set(broker.deferred) == {("__transaction_state", 0)}
    flushing = broker.begin_flush()
    assert [(s.topic, s.index) for s, _ in flushing] == [("a", 0)]
    broker.end_flush(flushing)
    # The next transaction's first record makes the state partition due: that flush covers both.
    broker.transactions.apply(tc.add_partitions("t", pid, epoch, [("a", 0)], now()), now())
    flushing = broker.begin_flush()
    assert [(s.topic, s.index) for s, _ in flushing] == [("__transaction_state", 0)]
    assert not broker.deferred
    broker.close()


def test_a_commit_whose_complete_record_a_crash_lost_stays_committed(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("a", 1, {})
    tc = broker.transactions.coordinator
    init = tc.init_producer_id("t", 60_000, -1, -1, now(), broker.new_producer_id(now()))
    broker.transactions.apply(init, now())
    pid, epoch = init.producer_id, init.epoch
    broker.transactions.apply(tc.add_partitions("t", pid, epoch, [("a", 0)], now()), now())
    assert broker.append("a", 0, txn_batch(pid, epoch, 0, b"kept"), now()).error == 0
    # The crash: the COMMIT marker reached the disk, the deferred Prepare/Complete records did not.
    ended = tc.end_txn("t", pid, epoch, True, now())
    for markers in ended.markers:
        broker.transactions._write_markers(markers, markers.partitions, now())
    broker.close()

    again = open_broker(tmp_path)
    assert again.transactions.coordinator.txns["t"].state.value == "Ongoing"
    assert committed_values(again, "a") == [b"kept"]
    # The producer comes back: the transaction the coordinator still thinks open is aborted, and that
    # ABORT marker, ending nothing, leaves the committed data committed.
    tc2 = again.transactions.coordinator
    again.transactions.apply(
        tc2.init_producer_id("t", 60_000, -1, -1, now(), again.new_producer_id(now())), now()
    )
    again.end_flush(again.begin_flush())
    assert committed_values(again, "a") == [b"kept"]
    again.close()


def test_an_end_txn_spanning_two_partitions_flushes_its_state_with_the_markers(tmp_path: Path) -> None:
    broker, tc, pid, epoch = open_transaction_over_a_and_b(tmp_path)
    for topic in ("a", "b"):
        assert broker.append(topic, 0, txn_batch(pid, epoch, 0, topic.encode()), now()).error == 0
    broker.end_flush(broker.begin_flush())
    broker.transactions.apply(tc.end_txn("t", pid, epoch, True, now()), now(), ending=True)
    assert not broker.deferred
    assert ("__transaction_state", 0) in broker.unflushed
    broker.close()
