"""Partitions load on first use (broker/partition_table.py, storage/disk.py): start-up reads no partition,
yet after kill -9 every acknowledged record reads back at its offset and a torn tail is gone before the
partition serves anything; a transaction a crash left hanging in a partition loaded later is still
aborted when it loads, and producer ids are never handed out twice."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.broker.test_fd_cache import PARTITIONS, produce_round, read_all
from tests.transactions.test_txn_recovery import committed_values, open_broker, txn_batch

from sluice.client.wire import WireClient
from sluice.protocol.records import Record, encode_batch
from sluice.storage.damage import Intact, scan_segment
from sluice.testing import BrokerProcess


def now() -> int:
    return int(time.time() * 1000)


def test_a_hanging_transaction_in_a_partition_loaded_after_start_is_aborted_and_ids_stay_unique(
    tmp_path: Path,
) -> None:
    broker = open_broker(tmp_path)
    broker.create_topic("many", 40, {})
    # Data of a transaction whose "partition added" record a crash lost (the verifier is bypassed here).
    broker.txn_verifier = lambda *args: None
    broker.append_internal("many", 37, txn_batch(777, 0, 0, b"orphan"), now())
    broker.end_flush(broker.begin_flush())
    assert broker.partition("many", 37).last_stable_offset == 0
    issued = {broker.new_producer_id(now()) for _ in range(100)}
    broker.storage.close(clean=False)  # a crash: no clean stop

    again = open_broker(tmp_path)
    assert ("many", 37) in again.partitions and not again.partitions.is_loaded(("many", 37))
    assert len(again.partitions.loaded_items()) < 10, "start-up loaded the topic's partitions"
    state = again.partition("many", 37)  # loads it: the hanging transaction is aborted first
    assert state.last_stable_offset == state.high_watermark == 2  # data + abort marker
    assert committed_values(again, "many") == []  # partition 0: nothing there
    data = again.read(state, 0, 1 << 20, committed=True)
    assert [a.producer_id for a in again.aborted_transactions(state, 0, data)] == [777]
    fresh = {again.new_producer_id(now()) for _ in range(100)}
    assert not fresh & issued and min(fresh) > max(issued)
    again.close()
    # After a clean stop the marker is durable: the partition loads with nothing open.
    third = open_broker(tmp_path)
    state = third.partition("many", 37)
    assert state.last_stable_offset == state.high_watermark == 2 and not state.producers.ongoing
    third.close()


def test_after_kill_9_a_torn_partition_is_recovered_at_first_use_and_nothing_acknowledged_moves(
    tmp_path: Path,
) -> None:
    topic = "lazy"
    acked: dict[tuple[int, int], bytes] = {}
    with BrokerProcess(tmp_path / "data") as broker:
        broker.create_topic(topic, PARTITIONS, {})
        with WireClient.connect(broker.bootstrap) as client:
            produce_round(client, topic, 0, acked)
        broker.kill()
        active = sorted((tmp_path / "data" / f"{topic}-7").glob("*.log"))[-1]
        torn = encode_batch([Record(0, 0, None, b"never acknowledged", [])], base_timestamp=now())
        with active.open("r+b") as out:
            # The batches end before the space the active segment reserved ahead of them: the write the
            # kill tore landed there.
            size = os.fstat(out.fileno()).st_size
            intact = max(
                found.position + found.header.size
                for found in scan_segment(out.fileno(), size, 0)
                if isinstance(found, Intact)
            )
            assert size > intact  # the reserved space
            out.seek(intact)
            out.write(torn[: len(torn) // 2])
        broker.restart()
        with WireClient.connect(broker.bootstrap) as client:
            assert read_all(client, topic) == acked
            assert active.stat().st_size == intact
            produce_round(client, topic, 1, acked)  # offsets go on where the acknowledged ones ended
            assert read_all(client, topic) == acked
    assert {offset for (partition, offset) in acked if partition == 7} == set(range(6))
