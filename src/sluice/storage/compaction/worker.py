"""The worker process a cleaner thread hands the heavy part of a pass to (`rewrite.prepare_cleaning`)."""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool

from sluice.storage.compaction.cleaner import CleaningAborted
from sluice.storage.compaction.rewrite import CleaningJob, Prepared, prepare_cleaning


def _worker_init(nice: int) -> None:
    if nice:
        os.nice(nice)


class CleanerWorker:
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
