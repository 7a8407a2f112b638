"""kill -9 in the middle of a cleaner swap: the broker comes back with either the old or the cleaned
segments, and no acknowledged record is lost, moved or duplicated. A killed worker fails only its pass, and
a killed broker leaves none of its processes behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from compaction_helpers import (
    check_compacted,
    cleaner_status,
    create_compacted,
    produce_updates,
    read_all,
    updates,
    wait_cleaned,
    wait_for,
    write_config,
)

from sluice.testing import BrokerProcess

# Every step of the swap protocol the cleaner announces (storage/compaction/swap.py, DiskPartitionLog.swap_cleaned).
STEPS = ["cleaned-written", "manifest-prepared", "committed", "old-removed", "swapped"]


@pytest.mark.parametrize("step", STEPS)
def test_kill_during_cleaning_loses_and_duplicates_nothing(
    tmp_path: Path, topic_name: str, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written with the cleaner off, so the first pass happens in the run that is told to crash.
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    proc = BrokerProcess(tmp_path / "data", config=write_config(quiet, "log_cleaner_enable: false\n")).start()
    try:
        create_compacted(proc.bootstrap, topic_name)
        written = produce_updates(proc.bootstrap, topic_name, updates(10, 30))
        before = read_all(proc.bootstrap, topic_name)
        assert len(before) == len(written)
        proc.kill()

        monkeypatch.setenv("SLUICE_CLEANER_CRASH_AT", step)
        proc.config = write_config(tmp_path)
        proc.start()
        assert proc.proc is not None
        proc.proc.wait(30)  # the cleaner ends the process at the step (exit code 137, as after SIGKILL)
        assert proc.proc.returncode == 137, "".join(proc.output)
        monkeypatch.delenv("SLUICE_CLEANER_CRASH_AT")

        proc.start()
        after = read_all(proc.bootstrap, topic_name)
        check_compacted(after, written)
        assert set(after) <= set(before)
        # Cleaning finishes after the restart, and a further restart reads the same log.
        proc.stop()
        proc.start()
        again = read_all(proc.bootstrap, topic_name)
        check_compacted(again, written)
    finally:
        proc.stop()


def worker_pids(broker_pid: int) -> list[int]:
    """The cleaner's worker processes among the broker's children (multiprocessing's spawn_main)."""
    found = []
    for task in Path(f"/proc/{broker_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
    return found


def test_a_killed_cleaner_worker_fails_that_pass_only(tmp_path: Path, topic_name: str) -> None:
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    proc = BrokerProcess(tmp_path / "data", config=write_config(quiet, "log_cleaner_enable: false\n")).start()
    try:
        create_compacted(proc.bootstrap, topic_name)
        written = produce_updates(proc.bootstrap, topic_name, updates(10, 60, size=400))
        proc.stop()
        # Throttled so that the pass is still running when its worker is killed.
        proc.config = write_config(tmp_path, "log_cleaner_io_max_bytes_per_second: 40000\n")
        proc.start()
        assert proc.proc is not None
        wait_for(lambda: bool(worker_pids(proc.proc.pid)), 30, "the cleaner's worker process")
        time.sleep(1)
        assert cleaner_status(proc.bootstrap, topic_name)[1] == -1, "the first pass is still running"
        for pid in worker_pids(proc.proc.pid):
            os.kill(pid, signal.SIGKILL)
        # The broker keeps serving, a new worker takes the next pass, and it completes.
        wait_cleaned(proc.bootstrap, topic_name, timeout=90)
        check_compacted(read_all(proc.bootstrap, topic_name), written)
        assert proc.proc.poll() is None
        assert "worker process died" in "".join(proc.output)
    finally:
        proc.stop()


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (its children, theirs...), from /proc's per-thread children lists."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent's wait is missing


def test_a_killed_broker_leaves_none_of_its_processes_behind(tmp_path: Path, topic_name: str) -> None:
    """Issue #42: after kill -9 of a broker whose cleaner ran, its worker and multiprocessing's resource
    tracker exit within seconds instead of living on under init."""
    proc = BrokerProcess(tmp_path / "data", config=write_config(tmp_path)).start()
    try:
        create_compacted(proc.bootstrap, topic_name)
        produce_updates(proc.bootstrap, topic_name, updates(10, 30))
        wait_cleaned(proc.bootstrap, topic_name)
        assert proc.proc is not None
        started = descendants(proc.proc.pid)
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in started]
        assert any(b"spawn_main" in c for c in commands), commands
        assert any(b"resource_tracker" in c for c in commands), commands
        proc.kill()
        deadline = time.monotonic() + 5
        while (left := [pid for pid in started if running(pid)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left]
    finally:
        proc.stop()
