"""The space an active segment's file reserves past its last batch (storage/segment.py RESERVE_BYTES): sparse,
cut when the segment is sealed or closed, and after a crash cut by recovery without calling it torn data
or damage, while a torn write inside it still is."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cleaner_helpers import consumer_batches
from storage_batches import make_batch, values_of

from sluice.storage import DiskStorage
from sluice.storage.damage import DAMAGE_FILE
from sluice.storage.disk import DiskPartitionLog
from sluice.storage.reserve import RESERVE_BYTES, trailing_hole
from sluice.storage.verify import verify_data_dir

NOW = 1_700_000_000_000


def fill(log: DiskPartitionLog, batches: int, first: int = 0) -> None:
    for n in range(first, first + batches):
        batch, header = make_batch(values_of(5, 100, prefix=f"b{n}-"), [NOW + n] * 5)
        log.append(batch, header, append_time_ms=NOW)


def readable(log: DiskPartitionLog) -> dict[int, bytes]:
    return {h.base_offset: data[p : p + h.size] for _, data, p, h in consumer_batches(log)}


def log_files(partition: Path) -> list[Path]:
    return sorted(partition.glob("*.log"))


def open_log(data_dir: Path, segment_bytes: int = 4000) -> tuple[DiskStorage, DiskPartitionLog]:
    storage = DiskStorage(data_dir)
    if storage.topic("t") is None:
        storage.create_topic("t", 1, {"segment.bytes": str(segment_bytes)})
    return storage, storage.log("t", 0)  # type: ignore[return-value]


def test_the_active_segment_reserves_sparse_space_and_sealed_ones_end_at_their_last_batch(tmp_path: Path) -> None:
    storage, log = open_log(tmp_path / "data")
    fill(log, 12)  # about 700 B each: rolls every 4000 B
    log.flush()
    *sealed, active = log.segments
    assert sealed, "segments should have rolled"
    for segment in sealed:
        assert segment.log_path.stat().st_size == segment.size_bytes
    stat = active.log_path.stat()
    assert stat.st_size % RESERVE_BYTES == 0 and stat.st_size > active.size_bytes
    assert stat.st_blocks * 512 < RESERVE_BYTES // 4, "the reserved space takes no disk space"
    contents = readable(log)
    storage.close()
    assert [path.stat().st_size for path in log_files(tmp_path / "data" / "t-0")] == [
        segment.size_bytes for segment in log.segments
    ]
    storage, log = open_log(tmp_path / "data")
    assert readable(log) == contents and log.truncated_bytes_at_load == 0
    storage.close()


def crash_copy(source: Path, target: Path, sparse: bool) -> None:
    """The files as kill -9 leaves them, copied while the log is open, reserved space and all: as a hole
    (`sparse`, what the file system keeps) or written out as zeros (a file system without holes)."""
    if sparse:
        subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True)
    else:
        shutil.copytree(source, target)


@pytest.mark.parametrize("sparse", [True, False])
def test_after_a_crash_recovery_cuts_the_reserved_space_without_calling_it_torn(
    tmp_path: Path, sparse: bool
) -> None:
    storage, log = open_log(tmp_path / "data")
    fill(log, 12)
    log.flush()
    contents = readable(log)
    end = log.log_end_offset
    crash_copy(tmp_path / "data", tmp_path / "crashed", sparse)
    storage.close(clean=False)
    partition = tmp_path / "crashed" / "t-0"
    active = log_files(partition)[-1]
    size = active.stat().st_size
    assert size % RESERVE_BYTES == 0
    with active.open("rb") as file:  # recovery reads only up to the hole, when there is one
        assert (trailing_hole(file.fileno(), 0, size) < size) == sparse
    [report] = verify_data_dir(tmp_path / "crashed")
    assert report.ok and not any(segment.incomplete_tail for segment in report.segments), (
        "reserved space is neither damage nor an incomplete tail"
    )

    storage, log = open_log(tmp_path / "crashed")
    assert readable(log) == contents and log.log_end_offset == end
    assert log.truncated_bytes_at_load == 0
    assert not (partition / DAMAGE_FILE).exists()
    assert log_files(partition)[-1].stat().st_size == log.segments[-1].size_bytes
    fill(log, 2, first=12)  # offsets go on where they ended
    assert log.log_end_offset == end + 10
    storage.close()


def test_a_torn_write_inside_the_reserved_space_is_cut_and_counted(tmp_path: Path) -> None:
    storage, log = open_log(tmp_path / "data", segment_bytes=1 << 20)
    fill(log, 3)
    log.flush()
    contents = readable(log)
    active = log.segments[-1]
    shutil.copytree(tmp_path / "data", tmp_path / "crashed")
    storage.close(clean=False)
    torn = make_batch(values_of(5, 100, prefix="torn-"), [NOW] * 5)[0][:200]
    torn = torn.rstrip(b"\0")  # the count is of the bytes the write left, up to its last non-zero one
    with (tmp_path / "crashed" / "t-0" / active.log_path.name).open("r+b") as out:
        out.seek(active.size_bytes)
        out.write(torn)
    storage, log = open_log(tmp_path / "crashed", segment_bytes=1 << 20)
    assert readable(log) == contents
    assert log.truncated_bytes_at_load == len(torn)
    storage.close()


def test_a_sealed_segment_whose_cut_the_crash_undid_is_cut_again_not_damaged(tmp_path: Path) -> None:
    """Sealing cuts the file at once, but only a later flush makes that size durable: a crash before it may
    leave the sealed segment with its reserved space. Recovery cuts it; nothing is damaged or moved."""
    storage, log = open_log(tmp_path / "data")
    fill(log, 12)
    contents = readable(log)  # nothing flushed since the rolls: the sealed segments are not durable
    end = log.log_end_offset
    shutil.copytree(tmp_path / "data", tmp_path / "crashed")
    storage.close(clean=False)
    partition = tmp_path / "crashed" / "t-0"
    first = log_files(partition)[0]
    size = first.stat().st_size
    os.truncate(first, RESERVE_BYTES)
    storage, log = open_log(tmp_path / "crashed")
    assert readable(log) == contents and log.log_end_offset == end
    assert not (partition / DAMAGE_FILE).exists() and log.truncated_bytes_at_load == 0
    assert first.stat().st_size == size
    storage.close()
