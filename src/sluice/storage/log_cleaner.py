"""The log cleaner's threads (Kafka's LogCleaner and LogCleanerManager): which compacted partition to
clean next, handing the heavy part of each pass to a worker process, and giving up on a partition whose
data turns out corrupt. One pass over one partition is `cleaner.clean_partition`.

Also the produce-side rule of compacted topics: every record needs a key (KIP-467 record errors).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.errors import CorruptRecordError, ErrorCode, RecordErrors
from sluice.protocol.records import BatchHeader, decode_batch
from sluice.storage.cleaner import (
    NO_FACTS,
    CleanerStats,
    CleaningAborted,
    CleaningJob,
    Plan,
    Prepare,
    Prepared,
    RunOnOwner,
    TxnFacts,
    clean_partition,
    plan_cleaning,
    prepare_cleaning,
)
from sluice.storage.config import TopicConfig

if TYPE_CHECKING:
    from sluice.storage.disk import DiskPartitionLog

_log = logging.getLogger("sluice.cleaner")


# --- produce-side rule --------------------------------------------------------------------------------


def check_keys_for_compaction(records: bytes | memoryview, headers: list[BatchHeader]) -> None:
    """Refuse a produce to a compacted topic that carries records without a key (KIP-467 errors name
    each one by its position among the partition's records), as Kafka's LogValidator does.
    """
    errors: list[tuple[int, str]] = []
    index = 0
    pos = 0
    view = memoryview(records)
    for header in headers:
        if not header.is_control:
            _, batch_records = decode_batch(view[pos : pos + header.size])
            for record in batch_records:
                if record.key is None:
                    errors.append((index, "compacted topic cannot accept a record without a key"))
                index += 1
        pos += header.size
    if errors:
        raise RecordErrors(
            ErrorCode.INVALID_RECORD,
            f"{len(errors)} record(s) without a key sent to a compacted topic",
            errors,
        )


# --- the threads ---------------------------------------------------------------------------------------


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


CompactedLogs = Callable[[], list[tuple[str, int, TopicConfig, "DiskPartitionLog"]]]


def _worker_init(nice: int) -> None:
    if nice:
        os.nice(nice)


class _Worker:
    """One cleaner thread's worker process. spawn, not fork: the broker has threads (fsync, event loop)
    that a fork would copy mid-flight. A worker that dies (killed, out of memory) fails that pass and is
    replaced for the next one; it never leaves its thread waiting."""

    def __init__(self, nice: int, stop: threading.Event) -> None:
        self._nice = nice
        self._stop = stop
        self._executor: ProcessPoolExecutor | None = None

    def run(self, job: CleaningJob) -> Prepared:
        if self._executor is None:
            context = multiprocessing.get_context("spawn")
            self._executor = ProcessPoolExecutor(1, context, _worker_init, (self._nice,))
        pending = self._executor.submit(prepare_cleaning, job)
        while True:
            if self._stop.is_set():
                raise CleaningAborted("the cleaner is stopping")
            try:
                return pending.result(timeout=0.2)
            except FuturesTimeout:
                continue
            except BrokenProcessPool:
                self.close()
                raise RuntimeError("the cleaner's worker process died during a pass") from None

    def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        for process in list(getattr(executor, "_processes", {}).values()):
            process.kill()
        executor.shutdown(wait=False, cancel_futures=True)


class LogCleaner:
    """`threads` worker threads; each repeatedly picks the dirtiest due partition nobody else is cleaning
    (Kafka's LogCleanerManager.grabFilthiestCompactedLog), cleans it, and backs off when none is due.
    With `worker_processes` each thread hands the reading and writing to a process of its own.

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
        self._workers: list[_Worker] = []

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
        worker = _Worker(self.settings.worker_nice, self._stop)
        with self._lock:
            self._workers.append(worker)
        return worker.run

    def clean_once(self, prepare: Prepare = prepare_cleaning) -> bool:
        """Clean the dirtiest due partition, if any; True when one was cleaned."""
        now_ms = self._clock_ms()
        candidates = self._run_on_owner(self._logs)
        best: tuple[float, str, int, TopicConfig, DiskPartitionLog, Plan] | None = None
        max_ratio, max_delay = 0.0, 0
        for topic, partition, config, log in candidates:
            if log.cleaner_uncleanable:
                continue
            try:
                plan = plan_cleaning(log, config, now_ms)
            except OSError:
                continue  # the log is going away (topic deleted); the next look will not see it
            log.cleaner_dirty_ratio = plan.dirty_ratio
            max_ratio = max(max_ratio, plan.dirty_ratio)
            if plan.must_clean:
                max_delay = max(max_delay, now_ms - log.cleaner_checkpoint.last_cleaned_ms)
            with self._lock:
                busy = (topic, partition) in self._in_progress
            if busy or not plan.worth_cleaning(config):
                continue
            score = 2.0 if plan.must_clean else plan.dirty_ratio
            if best is None or score > best[0]:
                best = (score, topic, partition, config, log, plan)
        self.stats.max_dirty_ratio, self.stats.max_compaction_delay_ms = max_ratio, max_delay
        if best is None:
            return False
        _, topic, partition, config, log, plan = best
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
            )
            if ran:
                log.cleaner_dirty_ratio = plan_cleaning(log, config, self._clock_ms()).dirty_ratio
                _log.info("cleaned %s-%d", topic, partition)
            return ran
        except CleaningAborted as aborted:
            _log.info("cleaning of %s-%d aborted: %s", topic, partition, aborted)
            return False
        except CorruptRecordError as corrupt:
            # Kafka's "uncleanable partition": a batch fails its CRC in a segment the start-up scan trusted.
            # Nothing was changed; the partition is left alone until the broker restarts, and reads report
            # the damage as they meet it.
            log.cleaner_uncleanable = str(corrupt)
            self.stats.uncleanable_partitions += 1
            _log.error("%s-%d is uncleanable until restart: %s", topic, partition, corrupt)
            return False
        finally:
            with self._lock:
                self._in_progress.discard((topic, partition))
