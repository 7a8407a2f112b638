"""The shell's wall clock: the broker and coordinators never read it, they are handed `now_ms`."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
