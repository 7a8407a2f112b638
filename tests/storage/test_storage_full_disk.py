"""A full disk (issue #15) at the storage layer: the free-space guard's threshold and recovery, and topic
metadata writes that fail with ENOSPC leave memory and disk as they were (never half-written). ENOSPC is
injected at the I/O layer (os.write of the metadata file); tests/broker/test_storage_faults.py fills a
real tmpfs."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from storage_batches import make_batch, values_of

from sluice.errors import ErrorCode, KafkaError
from sluice.storage import DiskStorage
from sluice.storage.log import DiskFull
from sluice.storage.space import FreeSpaceGuard

GIB = 1 << 30


class Disk:
    """A filesystem's (free, total) bytes, as statvfs would say."""

    def __init__(self, free: int, total: int) -> None:
        self.free, self.total = free, total

    def __call__(self) -> tuple[int, int]:
        return self.free, self.total


@pytest.mark.parametrize(("total", "expected"), [(100 * GIB, 5 * GIB), (4 * GIB, GIB)])
def test_default_min_free_bytes_is_the_larger_of_1_gib_and_5_percent(total: int, expected: int) -> None:
    disk = Disk(total // 2, total)
    guard = FreeSpaceGuard(Path("/d"), None, probe=disk)
    assert guard.refusal(0, 0) is None
    assert guard.min_free_bytes == expected
    disk.free = expected - 1
    assert (
        guard.refusal(1000, 0)
        == f"data dir /d: {expected - 1} bytes free, below min_free_bytes {expected}; refusing writes"
    )
    disk.free = expected
    assert guard.refusal(1200, 0) is None


def test_refusals_log_at_error_rate_limited_and_writes_resume_when_space_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = Disk(10 << 20, GIB)
    guard = FreeSpaceGuard(Path("/d"), 8 << 20, probe=disk)
    assert guard.refusal(0, 1 << 20) is None
    # 1 MiB written twice more eats half the 2 MiB margin: measured again before the next write.
    disk.free = 7 << 20
    with caplog.at_level(logging.WARNING, logger="sluice.storage"):
        assert guard.refusal(10, 1 << 20) is not None
        for now in range(20, 5000, 10):
            assert guard.refusal(now, 100) is not None
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "below min_free_bytes 8388608; refusing writes" in errors[0].getMessage()
        disk.free = 9 << 20
        assert guard.refusal(5200, 100) is None
        assert any("free again; accepting writes" in r.getMessage() for r in caplog.records)


def test_after_enospc_writes_wait_for_a_real_margin() -> None:
    disk = Disk(100 << 20, GIB)
    guard = FreeSpaceGuard(Path("/d"), 0, probe=disk)  # 0: no threshold, only ENOSPC stops writes
    assert guard.refusal(0, 0) is None
    disk.free = 4096
    guard.disk_full(10)
    assert "disk full (ENOSPC)" in (guard.refusal(20, 0) or "")
    disk.free = 512 << 10  # less than 1 MiB: still refused
    assert guard.refusal(300, 0) is not None
    disk.free = 2 << 20
    assert guard.refusal(600, 0) is None


def test_space_taken_by_others_is_noticed_within_a_tenth_of_a_second_even_if_the_clock_steps_back() -> None:
    disk = Disk(100 << 20, GIB)
    guard = FreeSpaceGuard(Path("/d"), 8 << 20, probe=disk)
    assert guard.refusal(10_000, 100) is None
    disk.free = 4 << 20  # another program filled the disk; this broker wrote little since its probe
    assert guard.refusal(10_050, 100) is None  # between probes
    assert guard.refusal(10_100, 100) is not None
    disk.free = 100 << 20
    assert guard.refusal(10_400, 100) is None
    disk.free = 4 << 20
    # The wall clock steps back 5 s (an NTP correction): the next write probes rather than waits 5 s.
    assert guard.refusal(5_400, 100) is not None


@pytest.fixture
def enospc(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Makes file writes (sluice.storage.files, which writes the topic metadata) fail with ENOSPC while
    `state["full"]` is true."""
    import sluice.storage.files as files_module

    state = {"full": False}
    real_write = os.write

    def write(fd: int, data: bytes) -> int:  # type: ignore[type-arg]
        if state["full"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(files_module.os, "write", write)
    return state


def _append(storage: DiskStorage, topic: str, records: int = 3) -> int:
    batch, header = make_batch(values_of(records, 50))
    return storage.log(topic, 0).append(batch, header, append_time_ms=0)


def test_metadata_changes_on_a_full_disk_change_nothing(tmp_path: Path, enospc: dict[str, bool]) -> None:
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("kept", 1, {"retention.ms": "1000"})
    _append(storage, "kept")
    enospc["full"] = True
    with pytest.raises(DiskFull) as raised:
        storage.create_topic("new", 2, {})
    assert raised.value.code == ErrorCode.KAFKA_STORAGE_ERROR and "No space left" in raised.value.message
    assert storage.topic("new") is None
    assert not (data_dir / "new-0").exists() and not (data_dir / "new-1").exists()
    assert not list(data_dir.glob("*.tmp")), "a half-written temporary holds on to space"
    with pytest.raises(KafkaError):
        storage.create_partitions("kept", 3)
    assert storage.topic("kept").partitions == 1 and not (data_dir / "kept-1").exists()
    with pytest.raises(KafkaError):
        storage.alter_topic_configs("kept", {"retention.ms": "5000"})
    assert storage.topic("kept").configs["retention.ms"] == "1000"
    assert _append(storage, "kept") == 3  # the partition still takes writes (the segment had room)
    enospc["full"] = False
    storage.close()
    storage = DiskStorage(data_dir)
    assert [m.name for m in storage.topics()] == ["kept"]
    assert storage.topic("kept").configs["retention.ms"] == "1000"
    assert storage.log("kept", 0).log_end_offset == 6
    storage.create_topic("new", 2, {})  # and it works once there is room
    assert storage.log("new", 1).log_end_offset == 0
    storage.close()


def test_deleting_a_topic_works_when_not_even_the_metadata_file_fits(
    tmp_path: Path, enospc: dict[str, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a topic is how an operator frees space: its data goes first, then the metadata write is
    tried again (and here succeeds, as the freed space allows)."""
    import sluice.storage.disk as disk_module

    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("big", 1, {})
    storage.create_topic("other", 1, {})
    _append(storage, "big")
    _append(storage, "other")
    removed: list[str] = []
    real_remove = disk_module.DiskStorage._remove_partition_data

    def remove_frees_space(self: DiskStorage, topic: str, partition: int) -> None:
        real_remove(self, topic, partition)
        removed.append(topic)
        enospc["full"] = False  # the topic's data was what filled the disk

    monkeypatch.setattr(disk_module.DiskStorage, "_remove_partition_data", remove_frees_space)
    enospc["full"] = True
    storage.delete_topic("big")
    assert removed == ["big"] and storage.topic("big") is None and not (data_dir / "big-0").exists()
    storage.close()
    storage = DiskStorage(data_dir)
    assert [m.name for m in storage.topics()] == ["other"]
    assert storage.log("other", 0).log_end_offset == 3
    storage.close()


def test_a_topic_delete_that_cannot_be_written_at_all_leaves_the_topic_usable(
    tmp_path: Path, enospc: dict[str, bool]
) -> None:
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("stuck", 1, {})
    _append(storage, "stuck")
    enospc["full"] = True
    with pytest.raises(DiskFull):
        storage.delete_topic("stuck")
    # Its data went to make room, but the topic is still there, empty and writable, in memory and on disk.
    assert storage.topic("stuck") is not None
    log = storage.log("stuck", 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert _append(storage, "stuck") == 0
    enospc["full"] = False
    storage.close()
    storage = DiskStorage(data_dir)
    assert storage.log("stuck", 0).log_end_offset == 3
    storage.delete_topic("stuck")
    assert storage.topics() == []
    storage.close()
