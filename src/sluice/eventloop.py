"""How sluice's server processes run: their event loop, stop signals and garbage collector."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# "asyncio" forces the standard library's loop (for debugging, or where uvloop misbehaves).
EVENT_LOOP_ENV = "SLUICE_EVENT_LOOP"


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a server's main coroutine on uvloop when it is installed, else on asyncio's own loop.

    A produce request costs the broker a few hundred Python-level steps, and about a third of them are the
    event loop's own bookkeeping (callbacks, futures, selector events); uvloop does that in C, which cut the
    broker's CPU per produced message by about a fifth in bench/broker_bench.py's produce scenarios.
    """
    if os.environ.get(EVENT_LOOP_ENV, "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def install_stop_signals(stop: asyncio.Event) -> None:
    """Set `stop` on SIGTERM or SIGINT, so the server shuts down cleanly."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


def freeze_startup_objects() -> None:
    """Keep what startup allocated (modules, codecs, gRPC and protobuf tables) out of every later collection.

    They live as long as the process. Scanning them made each older-generation collection cost the broker
    about 1 ms on the request path, and the gateway full collections of ~20 ms that showed in its p99
    latency. Only for processes that are ours alone: the switch is process-wide.
    """
    gc.collect()
    gc.freeze()
