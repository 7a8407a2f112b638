"""kill -9 in the middle of a cleaner swap: the broker comes back with either the old or the cleaned
segments, and no acknowledged record is lost, moved or duplicated."""

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
