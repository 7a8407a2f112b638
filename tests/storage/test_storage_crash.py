"""A writer killed with SIGKILL mid-append and mid-flush loses nothing a returned flush() covered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from storage_batches import make_batch, values_of

from sluice.protocol.records import parse_batch_header
from sluice.storage import DiskStorage

NOW = 1_700_000_000_000
WRITER = Path(__file__).with_name("storage_crash_writer.py")


def expected_batch(n: int, offset: int) -> bytes:
    batch, _ = make_batch(values_of(3, 60, prefix=f"batch{n}-"), [NOW + n] * 3)
    return offset.to_bytes(8, "big") + batch[8:]


def run_writer_and_kill(data_dir: Path, flushed_batches: int) -> list[tuple[int, int]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WRITER.parent), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    flushed: list[tuple[int, int]] = []
    deadline = time.monotonic() + 20
    try:
        while len(flushed) < flushed_batches and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line.endswith("\n"):
                break  # end of output; a line without its newline was torn by the kill
            n, offset = line.split()
            flushed.append((int(n), int(offset)))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Lines already written to the pipe before the kill were flushed too; the kill may tear the last one.
    for line in child.stdout.read().split("\n")[:-1]:
        n, offset = line.split()
        flushed.append((int(n), int(offset)))
    return flushed


def test_every_flushed_batch_survives_sigkill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    total: list[tuple[int, int]] = []
    for _ in range(2):
        flushed = run_writer_and_kill(data_dir, 1500)
        assert len(flushed) > 100, "the writer flushed too little to test anything"
        storage = DiskStorage(data_dir)
        assert not storage.was_clean_shutdown
        log = storage.log("crash", 0)
        # A second round numbers its batches from 0 again; offsets continue after the survivors.
        for n, offset in flushed:
            data = log.read(offset, 1)
            header = parse_batch_header(data)
            assert header.base_offset == offset
            assert data == expected_batch(n, offset), f"batch {n} at {offset} differs after recovery"
        # Everything that survived is a sequence of intact, contiguous batches.
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            header = parse_batch_header(log.read(offset, 1))
            assert header.base_offset == offset
            offset = header.last_offset + 1
        total += flushed
        storage.close(clean=False)
    assert len(total) > 200
