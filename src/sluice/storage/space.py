"""Free space of the data directory: refuse writes before the disk is full (Redpanda's
storage_min_free_bytes), and after it was found full, until space comes back.

Time is passed in. statvfs costs a few microseconds, so it is asked again every tenth of a second, after
every 256 KiB written, and at once when the bytes written since could have used up the margin measured
last time. The byte bound limits what a busy producer writes past the floor once something else (another
program, a growing file) took the margin: probing only once a second, a producer at 10 MB/s wrote
megabytes below the floor, down to a full disk. A clock that steps back counts as time passed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

DEFAULT_MIN_FREE_BYTES = 1 << 30
DEFAULT_MIN_FREE_FRACTION = 0.05
# Re-measure at least this often while writes are allowed, and this often while they are refused.
_PROBE_INTERVAL_MS = 100
_REFUSING_PROBE_INTERVAL_MS = 200
_PROBE_EVERY_BYTES = 256 << 10
_LOG_INTERVAL_MS = 10_000
_log = logging.getLogger("sluice.storage")


def statvfs_probe(directory: Path) -> Callable[[], tuple[int, int]]:
    def probe() -> tuple[int, int]:
        stats = os.statvfs(directory)
        return stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize

    return probe


class FreeSpaceGuard:
    """Says whether a write of N bytes may go ahead; `min_free_bytes` None means the default,
    max(1 GiB, 5% of the filesystem)."""

    def __init__(
        self, directory: Path, min_free_bytes: int | None, probe: Callable[[], tuple[int, int]] | None = None
    ) -> None:
        self.directory = directory
        self._probe = probe or statvfs_probe(directory)
        self._configured = min_free_bytes
        self.min_free_bytes = min_free_bytes if min_free_bytes is not None else DEFAULT_MIN_FREE_BYTES
        self.free_bytes = -1
        self._probed_ms: int | None = None
        self._written_since = 0
        self._full = False  # a write hit ENOSPC: refuse until a probe shows room again
        self._logged_ms: int | None = None

    @property
    def refusing(self) -> bool:
        return self._full or self.free_bytes < self.min_free_bytes

    def refusal(self, now_ms: int, size: int) -> str | None:
        """None when a write of `size` bytes may go ahead, else why not (also logged, rate-limited)."""
        # Once per produced partition: the common case (probed lately, room to spare) decides without a call.
        probed = self._probed_ms
        refusing = self._full or self.free_bytes < self.min_free_bytes
        if (
            probed is None
            # (below 0: the wall clock stepped back)
            or not 0 <= now_ms - probed < (_REFUSING_PROBE_INTERVAL_MS if refusing else _PROBE_INTERVAL_MS)
            or self._written_since >= _PROBE_EVERY_BYTES
            # The bytes written since the last probe may have eaten half the margin it saw.
            or (not refusing and self._written_since * 2 >= self.free_bytes - self.min_free_bytes)
        ):
            self._measure(now_ms)
            refusing = self._full or self.free_bytes < self.min_free_bytes
        self._written_since += size
        if not refusing:
            return None
        reason = (
            f"data dir {self.directory}: {max(self.free_bytes, 0)} bytes free, below min_free_bytes "
            f"{self.min_free_bytes}; refusing writes"
        )
        if self._full and self.free_bytes >= self.min_free_bytes:
            reason = f"data dir {self.directory}: disk full (ENOSPC); refusing writes until space is freed"
        if self._logged_ms is None or now_ms - self._logged_ms >= _LOG_INTERVAL_MS:
            self._logged_ms = now_ms
            _log.error("%s", reason)
        return reason

    def still_full(self) -> bool:
        """After a write hit ENOSPC: measured again now, True until the disk has room again. (A journal
        append can still fit in a file's last page on a full disk; a new partition would not be writable.)"""
        if self._full:
            self._measure(self._probed_ms or 0)
        return self._full

    def disk_full(self, now_ms: int) -> None:
        """A write failed with ENOSPC: refuse at once, and until a later probe finds room."""
        self._full = True
        self._measure(now_ms)
        self._full = True

    def _measure(self, now_ms: int) -> None:
        was_refusing = self._probed_ms is not None and self.refusing
        free, total = self._probe()
        if self._configured is None:
            self.min_free_bytes = max(DEFAULT_MIN_FREE_BYTES, int(total * DEFAULT_MIN_FREE_FRACTION))
        self.free_bytes = free
        self._probed_ms = now_ms
        self._written_since = 0
        # After ENOSPC, wait for a real margin (at least 1 MiB) before trying again.
        if self._full and free >= max(self.min_free_bytes, 1 << 20):
            self._full = False
        if was_refusing and not self.refusing:
            self._logged_ms = None
            _log.warning("data dir %s: %d bytes free again; accepting writes", self.directory, free)
