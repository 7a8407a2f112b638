"""Partitions open on first use (storage/disk.py): opening a data dir reads no partition, and a partition's
crash recovery (a torn tail cut off, damage recorded, indexes rebuilt) happens at its first use, before it
serves anything, even when a clean stop came between the crash and that first use."""

from __future__ import annotations

from pathlib import Path

import pytest
from cleaner_helpers import consumer_batches
from storage_batches import make_batch, values_of

from sluice.errors import ErrorCode, KafkaError
from sluice.storage import DiskStorage
from sluice.storage.disk import CLEAN_SHUTDOWN_MARKER, DiskPartitionLog

NOW = 1_700_000_000_000
PARTITIONS = 4


def fill(log: DiskPartitionLog, batches: int, tag: str) -> dict[int, bytes]:
    """Appends and flushes (what a broker acknowledges); base offset -> the batch's first value."""
    acked = {}
    for n in range(batches):
        values = values_of(3, 80, prefix=f"{tag}-{n}-")
        batch, header = make_batch(values, [NOW + n] * 3)
        acked[log.append(batch, header, append_time_ms=NOW)] = values[0]
    log.flush()
    return acked


def first_values(log: DiskPartitionLog) -> dict[int, bytes]:
    from sluice.protocol.records import decode_batch

    found = {}
    for _, data, position, header in consumer_batches(log):
        _, records = decode_batch(data, position)
        found[header.base_offset] = records[0].value
    return found


def crashed_data_dir(data_dir: Path) -> dict[int, dict[int, bytes]]:
    """A topic of PARTITIONS partitions with acknowledged batches, then a crash (no clean stop)."""
    storage = DiskStorage(data_dir)
    storage.create_topic("lazy", PARTITIONS, {"segment.bytes": "4000"})
    acked = {p: fill(storage.log("lazy", p), 30, f"p{p}") for p in range(PARTITIONS)}
    storage.close(clean=False)
    return acked


def tear(data_dir: Path, partition: int) -> tuple[Path, int]:
    """A write the crash tore at the end of the active segment; returns it and its intact size."""
    active = sorted((data_dir / f"lazy-{partition}").glob("*.log"))[-1]
    intact = active.stat().st_size
    with active.open("ab") as out:
        out.write(make_batch(values_of(3, 80))[0][:150])
    return active, intact


def test_a_torn_tail_is_cut_off_at_first_use_and_acknowledged_records_stay_at_their_offsets(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    acked = crashed_data_dir(data_dir)
    active, intact = tear(data_dir, 2)
    storage = DiskStorage(data_dir)
    assert active.stat().st_size == intact + 150, "opening the data dir read a partition"
    assert first_values(storage.log("lazy", 0)) == acked[0]
    assert active.stat().st_size == intact + 150  # only the partition used was opened
    log = storage.log("lazy", 2)
    assert active.stat().st_size == intact and log.truncated_bytes_at_load == 150
    assert first_values(log) == acked[2]
    assert log.log_end_offset == 90
    storage.close()


def test_a_clean_stop_before_first_use_still_leaves_the_recovery_to_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    acked = crashed_data_dir(data_dir)
    active, intact = tear(data_dir, 3)
    storage = DiskStorage(data_dir)
    storage.log("lazy", 0)
    storage.close()  # clean, with partitions 1-3 never opened since the crash
    assert "lazy-3" in (data_dir / CLEAN_SHUTDOWN_MARKER).read_text()
    storage = DiskStorage(data_dir)
    log = storage.log("lazy", 3)
    assert active.stat().st_size == intact and log.truncated_bytes_at_load == 150
    assert first_values(log) == acked[3]
    storage.close()
    storage = DiskStorage(data_dir)  # every partition recovered or clean: the marker lists none now
    assert storage.was_clean_shutdown and first_values(storage.log("lazy", 1)) == acked[1]
    storage.close()


def test_a_corrupt_byte_in_a_lazily_opened_partition_costs_only_its_batch(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    acked = crashed_data_dir(data_dir)
    active = sorted((data_dir / "lazy-1").glob("*.log"))[-1]
    data = bytearray(active.read_bytes())
    data[len(data) // 2] ^= 0x40
    active.write_bytes(bytes(data))
    storage = DiskStorage(data_dir)
    log = storage.log("lazy", 1)
    survivors = first_values(log)
    lost = sorted(set(acked[1]) - set(survivors))
    assert len(lost) == 1 and all(survivors[offset] == acked[1][offset] for offset in survivors)
    with pytest.raises(KafkaError) as raised:
        log.read(lost[0], 100)
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
    assert first_values(storage.log("lazy", 0)) == acked[0]
    storage.close()


def test_unknown_partitions_are_refused_without_touching_the_disk(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    crashed_data_dir(data_dir)
    storage = DiskStorage(data_dir)
    for topic, partition in (("lazy", PARTITIONS), ("lazy", -1), ("missing", 0)):
        with pytest.raises(KafkaError) as raised:
            storage.log(topic, partition)
        assert raised.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not (data_dir / f"lazy-{PARTITIONS}").exists() and not (data_dir / "missing-0").exists()
    storage.close()


def test_a_clean_stop_rewrites_only_the_partitions_that_changed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    acked = crashed_data_dir(data_dir)
    DiskStorage(data_dir).close()  # opened nothing: the marker lists every partition, still to recover
    storage = DiskStorage(data_dir)
    for partition in range(PARTITIONS):
        storage.log("lazy", partition)  # recovered now
    storage.close()
    checkpoints = {p: data_dir / f"lazy-{p}" / "partition.checkpoint" for p in range(PARTITIONS)}
    written = {p: path.stat().st_mtime_ns for p, path in checkpoints.items()}
    storage = DiskStorage(data_dir)
    for partition in range(PARTITIONS):
        storage.log("lazy", partition)
    acked[1].update(fill(storage.log("lazy", 1), 2, "more"))
    storage.close()
    assert [p for p in range(PARTITIONS) if checkpoints[p].stat().st_mtime_ns != written[p]] == [1]
    storage = DiskStorage(data_dir)
    assert storage.was_clean_shutdown
    for partition in range(PARTITIONS):
        log = storage.log("lazy", partition)
        assert first_values(log) == acked[partition] and log.truncated_bytes_at_load == 0
    storage.close()
