"""Issue #15's restart matrix at the broker, with the data shapes the storage-level state machine
(tests/storage/test_storage_restarts.py) does not produce: transactional batches, committed and aborted,
and their control markers, spread over many small segments (most with an empty .index), behind a prefix
removed by DeleteRecords. After each way of stopping, every acknowledged record is at its offset, aborted
ones stay hidden from read_committed consumers and visible to read_uncommitted ones."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from test_storage_faults import create, produce, stop_by

from sluice.testing import BrokerProcess

TOPIC = "mix"


def transaction(bootstrap: str, values: list[bytes], *, commit: bool, txn_id: str) -> dict[bytes, int]:
    """value -> offset of each record of one transaction (acknowledged before the commit or abort)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2})
    producer.init_transactions(30)
    producer.begin_transaction()
    offsets: dict[bytes, int] = {}

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        offsets[msg.value()] = msg.offset()

    for value in values:
        producer.produce(TOPIC, value, on_delivery=delivered)
    assert producer.flush(30) == 0
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    return offsets


def read(bootstrap: str, isolation: str, end: int) -> dict[int, bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"matrix-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    low, _ = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    consumer.assign([TopicPartition(TOPIC, 0, low)])
    seen: dict[int, bytes] = {}
    deadline = time.monotonic() + 20
    # Control markers take offsets no consumer sees, so the last offset read decides when to stop.
    while (not seen or max(seen) < end - 1) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.3):
            assert msg.error() is None, msg.error()
            seen[msg.offset()] = msg.value()
    consumer.close()
    return seen


@pytest.mark.parametrize("stops", [("sigterm", "kill"), ("kill", "sigint")])
def test_transactional_data_over_many_small_segments_survives_every_stop(
    tmp_path: Path, stops: tuple[str, str]
) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        bootstrap = proc.bootstrap
        create(bootstrap, TOPIC, {"segment.bytes": "4096"})
        committed: dict[int, bytes] = {}
        aborted: dict[int, bytes] = {}

        def plain(prefix: str, count: int) -> None:
            acked = produce(bootstrap, TOPIC, [f"{prefix}{n}".encode().ljust(60, b".") for n in range(count)])
            committed.update({offset: value for value, (_, offset) in acked.items()})  # type: ignore[misc]

        def txn(prefix: str, count: int, *, commit: bool) -> None:
            values = [f"{prefix}{n}".encode().ljust(60, b".") for n in range(count)]
            offsets = transaction(bootstrap, values, commit=commit, txn_id=f"matrix-{prefix}")
            (committed if commit else aborted).update({offset: value for value, offset in offsets.items()})

        plain("p", 150)
        txn("c", 60, commit=True)
        txn("a", 60, commit=False)
        plain("q", 100)
        txn("d", 60, commit=True)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        target = TopicPartition(TOPIC, 0, 50)
        assert admin.delete_records([target])[target].result(timeout=30).low_watermark == 50
        committed = {o: v for o, v in committed.items() if o >= 50}
        logs = sorted((tmp_path / "data" / f"{TOPIC}-0").glob("*.log"))
        assert len(logs) > 5
        indexes = [log.with_suffix(".index") for log in logs[:-1]]
        assert any(i.exists() and i.stat().st_size == 0 for i in indexes), (
            "no sealed segment with an empty index"
        )
        end = max(committed) + 1
        for round_, stop in enumerate(stops):
            stop_by(proc, stop)
            proc.restart()
            bootstrap = proc.bootstrap
            assert read(bootstrap, "read_committed", end) == committed, f"after {stop}"
            assert read(bootstrap, "read_uncommitted", end) == committed | aborted, f"after {stop}"
            if round_ == 0:  # and the restarted broker carries on: another aborted and committed pair
                txn("b", 30, commit=False)
                txn("e", 30, commit=True)
                end = max(committed) + 1
    finally:
        proc.stop()
