"""Every way of stopping, with compacted data (issue #15): a hypothesis state machine appends keyed records
to a `cleanup.policy=compact` log, rolls it, runs cleaner passes, flushes, closes cleanly, kills and
simulates power loss (unsynced `.log` bytes cut off), and checks after every reopen against a model:

- every record still in the log is one that was appended, at the offset it was given (nothing moved);
- for every key, its latest acknowledged value is there at its offset (compaction may drop only records
  a later acknowledged record of the same key supersedes).

tests/storage/test_cleaner.py covers a crash at each step of the cleaner's swap; here a pass is atomic.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

from cleaner_helpers import BASE_TS, all_records, append_keyed, compacted_log
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from sluice.storage import DiskStorage
from sluice.storage.compaction.cleaner import clean_partition
from sluice.storage.disk import DiskPartitionLog

KEYS = [f"k{n}".encode() for n in range(6)]


def records(log: DiskPartitionLog) -> dict[int, tuple[bytes | None, bytes | None]]:
    """offset -> (key, value) of every record a consumer reads (damaged ranges stepped over)."""
    return {offset: (key, value) for offset, _, key, value, _ in all_records(log)}


class CompactedRestarts(RuleBasedStateMachine):
    @initialize()
    def open_fresh(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sluice-compacted-restarts-"))
        self.data_dir = self.root / "data"
        self.storage = DiskStorage(self.data_dir)
        compacted_log(self.storage, segment_bytes="600", index_interval_bytes="100")
        self.now = BASE_TS
        self.serial = 0
        self.appended: dict[int, tuple[bytes, bytes]] = {}  # offset -> (key, value), acknowledged or not
        self.acked: set[int] = set()
        self.pending: set[int] = set()
        self.durable_sizes: dict[str, int] = {}
        self._mark_durable()

    def teardown(self) -> None:
        if hasattr(self, "storage"):
            self.storage.close(clean=False)
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def log(self) -> DiskPartitionLog:
        return self.storage.log("table", 0)

    @property
    def partition(self) -> Path:
        return self.data_dir / "table-0"

    def _mark_durable(self) -> None:
        self.durable_sizes = {p.name: p.stat().st_size for p in self.partition.glob("*.log")}

    @rule(batches=st.lists(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4), min_size=1, max_size=4))
    def append(self, batches: list[list[bytes]]) -> None:
        for keys in batches:
            self.serial += 1
            self.now += 10
            items = [(key, f"v{self.serial}-{n}".encode().ljust(40, b".")) for n, key in enumerate(keys)]
            base = append_keyed(self.log, items, timestamp=self.now, now_ms=self.now)  # type: ignore[arg-type]
            for n, (key, value) in enumerate(items):
                assert base + n not in self.appended
                self.appended[base + n] = (key, value)
                self.pending.add(base + n)

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.acked |= self.pending
        self.pending.clear()
        self._mark_durable()

    @rule()
    def clean(self) -> None:
        self.flush()  # the cleaner takes only sealed segments that are durable
        log = self.log
        clean_partition(log, log.config, self.now)
        # A pass fsyncs what it swaps in; what it read was only what was already in the log.
        self._mark_durable()

    @rule()
    def clean_restart(self) -> None:
        self.storage.close(clean=True)
        self.acked |= self.pending
        self.pending.clear()
        self._reopen()

    @rule()
    def kill_and_restart(self) -> None:
        self.storage.close(clean=False)
        self._reopen()

    @rule(seed=st.integers(0, 2**32 - 1))
    def power_loss_and_restart(self, seed: int) -> None:
        self.storage.close(clean=False)
        rng = random.Random(seed)
        for path in sorted(self.partition.glob("*.log")):
            durable = self.durable_sizes.get(path.name, 0)
            size = path.stat().st_size
            if size > durable:
                with path.open("r+b") as file:
                    file.truncate(rng.randint(durable, size))
                for suffix in (".index", ".timeindex"):
                    path.with_suffix(suffix).unlink(missing_ok=True)
        self._reopen()

    def _reopen(self) -> None:
        self.storage = DiskStorage(self.data_dir)
        # Unacknowledged records that survived are promised to no one, but they are in the log now: the next
        # flush makes them durable, and the cleaner may use them to supersede older records.
        self.pending.clear()
        self._check()
        self.pending = set(records(self.log)) - self.acked
        self._mark_durable()

    def _check(self) -> None:
        present = records(self.log)
        for offset, record in present.items():
            assert self.appended.get(offset) == record, (
                f"offset {offset} holds {record}, never appended there"
            )
        latest: dict[bytes, int] = {}
        for offset in sorted(self.acked):
            latest[self.appended[offset][0]] = offset
        for key, offset in latest.items():
            assert offset in present, f"the latest acknowledged value of {key!r} (offset {offset}) is gone"
        # Offsets present but not acknowledged may survive a crash; they are acknowledged from now on
        # only if a later flush covers them, so drop them from `appended` when absent.
        for offset in [o for o in self.appended if o not in present and o not in self.acked]:
            del self.appended[offset]

    @precondition(lambda self: hasattr(self, "storage"))
    @rule()
    def check_now(self) -> None:
        self._check()


TestCompactedRestarts = CompactedRestarts.TestCase
TestCompactedRestarts.settings = settings(
    max_examples=int(os.environ.get("SLUICE_RESTART_EXAMPLES", "60")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
