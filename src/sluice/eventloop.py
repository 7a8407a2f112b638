"""Which event loop sluice's servers run on."""

from __future__ import annotations

import asyncio
import os
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
