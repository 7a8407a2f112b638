"""The log cleaner's threads and per-partition state (Kafka's LogCleaner and LogCleanerManager): which
compacted partition to clean next, handing the heavy part of each pass to a worker process, and giving up
on a partition whose data turns out corrupt. One pass over one partition is `cleaner.clean_partition`.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.errors import CorruptRecordError
from sluice.storage.api import CompactableLog
from sluice.storage.compaction.checkpoint import PartitionCleanerState
from sluice.storage.compaction.cleaner import CleanerStats, CleaningAborted, clean_partition
from sluice.storage.compaction.offset_map import NO_FACTS, TxnFacts
from sluice.storage.compaction.plan import Plan, plan_cleaning
from sluice.storage.compaction.rewrite import Prepare, prepare_cleaning
from sluice.storage.compaction.swap import RunOnOwner
from sluice.storage.compaction.worker import CleanerWorker
from sluice.storage.config import TopicConfig

_log = logging.getLogger("sluice.cleaner")


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """Kafka's broker settings for the cleaner (log.cleaner.*)."""

    enable: bool = True
    threads: int = 1
    io_max_bytes_per_second: float = 1.7976931348623157e308
    dedupe_buffer_size: int = 128 * 1024 * 1024
    backoff_ms: int = 15_000
    # Rewrite in worker processes at this nice level: CPU-bound Python in a thread of the broker would
    # hold the GIL the event loop needs, and every produce would wait for it.
    worker_processes: bool = True
    worker_nice: int = 10


CompactedLogs = Callable[[], list[tuple[str, int, TopicConfig, CompactableLog]]]


class LogCleanerManager:
    """Kafka's LogCleaner and LogCleanerManager in one: `threads` cleaner threads, and the per-partition
    cleaner state they share (checkpoint, dirty ratio, uncleanable). Each thread repeatedly picks the
    dirtiest due partition nobody else is cleaning (LogCleanerManager.grabFilthiestCompactedLog), cleans it,
    and backs off when none is due. With `worker_processes` each thread hands the reading and writing to a
    process of its own.

    `logs` lists the compacted partitions and runs on the owner thread (through `run_on_owner`), so the
    broker's tables are only ever read there; topics whose cleanup.policy changes live appear or drop out
    at the next look.
    """

    def __init__(
        self,
        settings: CleanerSettings,
        logs: CompactedLogs,
        run_on_owner: RunOnOwner[Any],
        clock_ms: Callable[[], int],
        *,
        crash_point: Callable[[str], None] = lambda step: None,
        facts: Callable[[str, int], TxnFacts] = lambda topic, partition: NO_FACTS,
    ) -> None:
        self.settings = settings
        self._facts = facts
        self._logs = logs
        self._run_on_owner = run_on_owner
        self._clock_ms = clock_ms
        self._crash_point = crash_point
        self.stats = CleanerStats()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._in_progress: set[tuple[str, int]] = set()
        self._threads: list[threading.Thread] = []
        self._workers: list[CleanerWorker] = []
        # Per log object, so a topic deleted and created again starts from its (new) directory's checkpoint.
        self._states: weakref.WeakKeyDictionary[CompactableLog, PartitionCleanerState] = (
            weakref.WeakKeyDictionary()
        )

    def state_of(self, log: CompactableLog) -> PartitionCleanerState:
        """The partition's cleaner state, read from its `cleaner.checkpoint` the first time it is asked."""
        with self._lock:
            state = self._states.get(log)
            if state is None:
                state = self._states[log] = PartitionCleanerState.read(log.directory)
            return state

    def dirty_ratio(self, log: CompactableLog) -> float:
        """The partition's dirty ratio at the cleaner's last look (0 before its first)."""
        with self._lock:
            state = self._states.get(log)
        return state.dirty_ratio if state is not None else 0.0

    def start(self) -> None:
        if not self.settings.enable:
            return
        for n in range(max(1, self.settings.threads)):
            thread = threading.Thread(target=self._run, name=f"sluice-cleaner-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()  # a pass in progress is abandoned; its files in .cleaning are discarded later
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    def _run(self) -> None:
        prepare = self._pool_prepare() if self.settings.worker_processes else prepare_cleaning
        while not self._stop.is_set():
            try:
                cleaned = self.clean_once(prepare)
            except Exception:
                if self._stop.is_set():
                    return
                self.stats.failures += 1
                _log.exception("cleaner pass failed")
                cleaned = False
            if not cleaned:
                self._wake.wait(self.settings.backoff_ms / 1000)
                self._wake.clear()

    def _pool_prepare(self) -> Prepare:
        worker = CleanerWorker(self.settings.worker_nice, self._stop)
        with self._lock:
            self._workers.append(worker)
        return worker.run

    def clean_once(self, prepare: Prepare = prepare_cleaning) -> bool:
        """Clean the dirtiest due partition, if any; True when one was cleaned."""
        now_ms = self._clock_ms()
        candidates = self._run_on_owner(self._logs)
        best: tuple[float, str, int, TopicConfig, CompactableLog, Plan, PartitionCleanerState] | None = None
        max_ratio, max_delay = 0.0, 0
        for topic, partition, config, log in candidates:
            try:
                state = self.state_of(log)
                if state.uncleanable:
                    continue
                plan = plan_cleaning(log, config, now_ms, state.checkpoint)
            except OSError:
                continue  # the log is going away (topic deleted); the next look will not see it
            state.dirty_ratio = plan.dirty_ratio
            max_ratio = max(max_ratio, plan.dirty_ratio)
            if plan.must_clean:
                max_delay = max(max_delay, now_ms - state.checkpoint.last_cleaned_ms)
            with self._lock:
                busy = (topic, partition) in self._in_progress
            if busy or not plan.worth_cleaning(config):
                continue
            score = 2.0 if plan.must_clean else plan.dirty_ratio
            if best is None or score > best[0]:
                best = (score, topic, partition, config, log, plan, state)
        self.stats.max_dirty_ratio, self.stats.max_compaction_delay_ms = max_ratio, max_delay
        if best is None:
            return False
        _, topic, partition, config, log, plan, state = best
        with self._lock:
            if (topic, partition) in self._in_progress:
                return False
            self._in_progress.add((topic, partition))
        try:
            facts = self._run_on_owner(lambda: self._facts(topic, partition))
            ran = clean_partition(
                log,
                config,
                now_ms,
                dedupe_buffer_size=self.settings.dedupe_buffer_size // max(1, self.settings.threads),
                io_max_bytes_per_second=self.settings.io_max_bytes_per_second,
                run_on_owner=self._run_on_owner,
                crash_point=self._crash_point,
                stats=self.stats,
                plan=plan,
                prepare=prepare,
                facts=facts,
                state=state,
            )
            if ran:
                state.dirty_ratio = plan_cleaning(log, config, self._clock_ms(), state.checkpoint).dirty_ratio
                _log.info("cleaned %s-%d", topic, partition)
            return ran
        except CleaningAborted as aborted:
            _log.info("cleaning of %s-%d aborted: %s", topic, partition, aborted)
            return False
        except CorruptRecordError as corrupt:
            # Kafka's "uncleanable partition": a batch fails its CRC in a segment the start-up scan trusted.
            # Nothing was changed; the partition is left alone until the broker restarts, and reads report
            # the damage as they meet it.
            state.uncleanable = str(corrupt)
            self.stats.uncleanable_partitions += 1
            _log.error("%s-%d is uncleanable until restart: %s", topic, partition, corrupt)
            return False
        finally:
            with self._lock:
                self._in_progress.discard((topic, partition))


def compaction_status(
    log: CompactableLog, config: TopicConfig, now_ms: int, manager: LogCleanerManager | None
) -> tuple[float, int]:
    """(dirty ratio now, when it was last cleaned or -1) of a compacted partition, for DescribeConfigs."""
    state = manager.state_of(log) if manager is not None else PartitionCleanerState.read(log.directory)
    return plan_cleaning(log, config, now_ms, state.checkpoint).dirty_ratio, state.checkpoint.last_cleaned_ms
