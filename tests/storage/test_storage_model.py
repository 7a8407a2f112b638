"""Random operation sequences give identical answers from the memory and disk engines, across reopens."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from storage_batches import make_batch, values_of

from sluice.errors import KafkaError
from sluice.storage import DiskStorage, MemoryStorage, PartitionLog

NOW = 1_700_000_000_000
CONFIGS = {"segment.bytes": "3000", "index.interval.bytes": "256", "segment.ms": "50000"}


def read_outcome(log: PartitionLog, offset: int, max_bytes: int) -> bytes | tuple[str, int]:
    try:
        return log.read(offset, max_bytes)
    except KafkaError as error:
        return ("error", error.code)


@pytest.mark.parametrize("seed", range(4))
def test_memory_and_disk_agree(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    memory = MemoryStorage()
    memory.create_topic("t", 1, CONFIGS)
    disk = DiskStorage(tmp_path / "data")
    disk.create_topic("t", 1, CONFIGS)
    clock = NOW
    batch_number = 0

    def logs() -> tuple[PartitionLog, PartitionLog]:
        return memory.log("t", 0), disk.log("t", 0)

    for _ in range(400):
        choice = rng.random()
        mem_log, disk_log = logs()
        if choice < 0.55:
            count = rng.randint(1, 5)
            clock += rng.randint(0, 2000)
            stamps = [clock + rng.randint(-3000, 3000) for _ in range(count)]
            batch, header = make_batch(
                values_of(count, rng.randint(1, 300), prefix=f"{batch_number}-"), stamps
            )
            batch_number += 1
            assert mem_log.append(batch, header, append_time_ms=clock) == disk_log.append(
                batch, header, append_time_ms=clock
            )
        elif choice < 0.8:
            offset = rng.randint(mem_log.log_start_offset - 2, mem_log.log_end_offset + 2)
            max_bytes = rng.choice([1, 500, 2000, 100_000])
            assert read_outcome(mem_log, offset, max_bytes) == read_outcome(disk_log, offset, max_bytes)
        elif choice < 0.87:
            target = clock + rng.randint(-20_000, 1000)
            assert mem_log.offset_for_timestamp(target) == disk_log.offset_for_timestamp(target)
            assert mem_log.max_timestamp() == disk_log.max_timestamp()
        elif choice < 0.9:
            offset = rng.randint(mem_log.log_start_offset, mem_log.log_end_offset)
            assert mem_log.delete_records_before(offset) == disk_log.delete_records_before(offset)
        elif choice < 0.94:
            retention_bytes = rng.choice([-1, 5000, 20000])
            retention_ms = rng.choice([-1, 30_000])
            assert mem_log.apply_retention(clock, retention_ms, retention_bytes) == disk_log.apply_retention(
                clock, retention_ms, retention_bytes
            )
        elif choice < 0.97:
            disk_log.flush()
        else:
            disk.close(clean=rng.random() < 0.5)
            disk = DiskStorage(tmp_path / "data")
        mem_log, disk_log = logs()
        assert (mem_log.log_start_offset, mem_log.log_end_offset, mem_log.size_bytes) == (
            disk_log.log_start_offset,
            disk_log.log_end_offset,
            disk_log.size_bytes,
        )
        assert mem_log.segment_count == disk_log.segment_count  # type: ignore[attr-defined]
    mem_log, disk_log = logs()
    start = mem_log.log_start_offset
    assert [h.base_offset for h in mem_log.iter_batch_headers(start)] == [
        h.base_offset for h in disk_log.iter_batch_headers(start)
    ]
    disk.close()
