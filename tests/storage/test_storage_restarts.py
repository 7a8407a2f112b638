"""Every way of stopping, then a start: a hypothesis state machine drives the disk engine through appends,
rolls by size and by time, retention, DeleteRecords, flushes, clean closes and crashes, and checks after
every reopen that each acknowledged (flushed) batch is still there, byte for byte, at its offset.

A crash is either a kill -9 (files keep what was written: the page cache survives) or a power loss,
simulated by cutting every `.log` file back to a random length between what the last flush made durable
and what was written, garbling the cut-off part or not, and dropping or tearing index files that were not
synced. Files created since the last flush may vanish altogether.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from storage_batches import make_batch, values_of

from sluice.protocol.records import parse_batch_header
from sluice.storage import DiskStorage, disk
from sluice.storage.damage import DamagedOffsets
from sluice.storage.disk import DiskPartitionLog

CONFIGS = {"segment.bytes": "3000", "segment.ms": "1000", "index.interval.bytes": "150"}
START_MS = 1_700_000_000_000


class Restarts(RuleBasedStateMachine):
    @initialize()
    def open_fresh(self) -> None:
        # Checkpoint the active segment's durable prefix often, so crashes exercise that path too.
        self.saved_active_checkpoint = disk.ACTIVE_CHECKPOINT_BYTES
        disk.ACTIVE_CHECKPOINT_BYTES = 700
        self.root = Path(tempfile.mkdtemp(prefix="sluice-restarts-"))
        self.data_dir = self.root / "data"
        self.storage = DiskStorage(self.data_dir)
        self.storage.create_topic("t", 1, CONFIGS)
        self.now = START_MS
        self.serial = 0
        # offset -> batch bytes as stored (baseOffset rewritten) of every acknowledged batch.
        self.acked: dict[int, bytes] = {}
        self.pending: dict[int, bytes] = {}
        self.log_start = 0
        self.durable_sizes: dict[str, int] = {}
        self.rng = random.Random(0)
        self._mark_durable()

    def teardown(self) -> None:
        if hasattr(self, "saved_active_checkpoint"):
            disk.ACTIVE_CHECKPOINT_BYTES = self.saved_active_checkpoint
        if hasattr(self, "storage"):
            self.storage.close(clean=False)
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def log(self) -> DiskPartitionLog:
        return self.storage.log("t", 0)

    @property
    def partition(self) -> Path:
        return self.data_dir / "t-0"

    def _mark_durable(self) -> None:
        self.durable_sizes = {p.name: p.stat().st_size for p in self.partition.glob("*.log")}

    # --- writes -------------------------------------------------------------------------------------

    @rule(
        records=st.integers(1, 6),
        size=st.sampled_from([10, 120, 700]),
        later_ms=st.sampled_from([0, 1, 600, 2500]),
    )
    def append(self, records: int, size: int, later_ms: int) -> None:
        self.now += later_ms  # jumps past segment.ms roll by time
        self.serial += 1
        batch, header = make_batch(values_of(records, size, prefix=f"s{self.serial}-"), [self.now] * records)
        base = self.log.append(batch, header, append_time_ms=self.now)
        assert base not in self.acked and base not in self.pending
        self.pending[base] = base.to_bytes(8, "big") + batch[8:]

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.acked.update(self.pending)
        self.pending.clear()
        self._mark_durable()

    @rule(fraction=st.floats(0, 1))
    def delete_records(self, fraction: float) -> None:
        log = self.log
        target = log.log_start_offset + int((log.log_end_offset - log.log_start_offset) * fraction)
        self.log_start = log.delete_records_before(target)
        self._forget_below(self.log_start)

    @rule(by_time=st.booleans(), keep=st.integers(0, 6000))
    def retention(self, by_time: bool, keep: int) -> None:
        log = self.log
        if by_time:
            log.apply_retention(self.now, keep, -1)
        else:
            log.apply_retention(self.now, -1, keep)
        self.log_start = log.log_start_offset
        self._forget_below(self.log_start)

    def _forget_below(self, start: int) -> None:
        for batches in (self.acked, self.pending):
            for base in [b for b, data in batches.items() if parse_batch_header(data).last_offset < start]:
                del batches[base]

    # --- stops and starts ---------------------------------------------------------------------------

    @rule()
    def clean_restart(self) -> None:
        self.storage.close(clean=True)
        self.acked.update(self.pending)  # a clean close flushes
        self.pending.clear()
        self._reopen(expect_clean=True)

    @rule()
    def kill_and_restart(self) -> None:
        self.storage.close(clean=False)
        self._reopen(expect_clean=False)

    @rule(seed=st.integers(0, 2**32 - 1), garble=st.booleans())
    def power_loss_and_restart(self, seed: int, garble: bool) -> None:
        self.storage.close(clean=False)
        rng = random.Random(seed)
        for path in sorted(self.partition.glob("*.log")):
            durable = self.durable_sizes.get(path.name)
            size = path.stat().st_size
            if durable is None and rng.random() < 0.3:
                path.unlink()  # created since the last flush: its directory entry was never synced
                for suffix in (".index", ".timeindex"):
                    path.with_suffix(suffix).unlink(missing_ok=True)
                continue
            durable = durable or 0
            if size > durable:
                cut = rng.randint(durable, size)
                with path.open("r+b") as file:
                    file.truncate(cut)
                    if garble and cut > durable:
                        start = rng.randint(durable, cut - 1)
                        file.seek(start)
                        file.write(bytes(rng.randrange(256) for _ in range(min(cut - start, 64))))
                for suffix in (".index", ".timeindex"):
                    index = path.with_suffix(suffix)
                    if index.exists() and rng.random() < 0.5:
                        with index.open("r+b") as file:
                            file.truncate(rng.randint(0, index.stat().st_size))
        self._reopen(expect_clean=False, start_may_rise=True)

    def _reopen(self, *, expect_clean: bool, start_may_rise: bool = False) -> None:
        self.storage = DiskStorage(self.data_dir)
        assert self.storage.was_clean_shutdown == expect_clean
        self.pending.clear()  # whatever survived of them is not promised to anyone
        if start_may_rise:
            # Segments created since the last flush may vanish with the power: their offsets were never
            # acknowledged, so the log may start at the first segment that survived, never past an
            # acknowledged batch.
            start = self.log.log_start_offset
            assert start >= self.log_start
            assert start == self.log_start or not any(
                base < start and parse_batch_header(data).last_offset >= self.log_start
                for base, data in self.acked.items()
            ), f"the log start rose from {self.log_start} to {start} over acknowledged offsets"
            self.log_start = start
        self._check_everything_acknowledged_is_there()
        self._mark_durable()

    # --- the promise --------------------------------------------------------------------------------

    def _check_everything_acknowledged_is_there(self) -> None:
        log = self.log
        assert log.log_start_offset == self.log_start
        if self.acked:
            assert log.log_end_offset > max(parse_batch_header(d).last_offset for d in self.acked.values())
        for base, data in self.acked.items():
            stored = log.read(max(base, self.log_start), 1)
            header = parse_batch_header(stored)
            assert header.base_offset == base, f"batch at {base} moved to {header.base_offset}"
            assert stored[: header.size] == data, f"batch at {base} changed"

    @invariant()
    def whole_log_reads_without_error(self) -> None:
        if not hasattr(self, "storage"):
            return
        log = self.log
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            try:
                data = log.read(offset, 1 << 16)
            except DamagedOffsets as damaged:  # only ever for offsets nobody was promised
                assert not any(damaged.damaged.holds(b) for b in self.acked)
                offset = damaged.resume_offset
                continue
            if not data:
                # Only a gap at the tail reads empty: no batch at or after `offset` anywhere in the log.
                assert not any(s.size_bytes and s.next_offset > offset for s in log.segments), offset
                break
            position = 0
            while position < len(data):
                header = parse_batch_header(data, position)
                offset = header.last_offset + 1
                position += header.size

    @precondition(lambda self: hasattr(self, "storage"))
    @rule()
    def acknowledged_batches_read_back(self) -> None:
        self._check_everything_acknowledged_is_there()


TestRestarts = Restarts.TestCase
TestRestarts.settings = settings(
    max_examples=int(os.environ.get("SLUICE_RESTART_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
