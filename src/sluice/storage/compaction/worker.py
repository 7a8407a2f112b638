"""The worker process a cleaner thread hands the heavy part of a pass to (`rewrite.prepare_cleaning`).

A worker never outlives its broker, however the broker ends (kill -9 included): the kernel sends it SIGKILL
when the thread that started it ends (Linux's PR_SET_PDEATHSIG), and a thread in the worker also ends it
once its parent is gone (re-parented: `os.getppid()` changed), which covers systems without prctl. With
the worker gone, multiprocessing's resource tracker sees the last write end of its pipe close and exits too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool

from sluice.storage.compaction.cleaner import CleaningAborted
from sluice.storage.compaction.rewrite import CleaningJob, Prepared, prepare_cleaning

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# How often a worker looks whether its parent is still there (where the kernel does not tell it).
PARENT_CHECK_SECONDS = 0.5


def exit_with_parent(parent_pid: int) -> None:
    """End this process when `parent_pid` (the process that started it) ends, in any way."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect: then this process was re-parented already.
    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(1)


def _worker_init(nice: int, parent_pid: int) -> None:
    exit_with_parent(parent_pid)
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
            self._executor = ProcessPoolExecutor(1, context, _worker_init, (self._nice, os.getpid()))
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
