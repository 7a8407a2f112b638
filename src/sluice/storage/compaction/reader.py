"""Reading a sealed segment's batches off the owner thread, under the cleaner's I/O budget."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sluice.protocol.records import LOG_OVERHEAD, BatchHeader, iter_batches, parse_batch_header

_READ_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """What the rewrite needs of a segment, as plain data so it can go to a worker process."""

    base_offset: int
    next_offset: int
    size_bytes: int
    log_path: str


class Throttler:
    """Keeps the cleaner's I/O under `bytes_per_second` (log.cleaner.io.max.bytes.per.second); the
    sleep and clock are passed in so the pure parts never sleep on their own.
    """

    def __init__(
        self,
        bytes_per_second: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock, self._sleep = clock, sleep
        self._start = clock()
        self._bytes = 0

    def account(self, size: int) -> None:
        if self.bytes_per_second <= 0 or self.bytes_per_second >= 1e300:
            return
        self._bytes += size
        elapsed = self._clock() - self._start
        wanted = self._bytes / self.bytes_per_second
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
        if elapsed > 1.0:  # a fresh window now and then, so an idle spell is not credited forever
            self._start, self._bytes = self._clock(), 0


def iter_segment_batches(
    segment: SegmentRef, throttler: Throttler
) -> Iterator[tuple[memoryview, BatchHeader]]:
    """(bytes, header) of each batch of a sealed segment, read through a descriptor of our own so that
    the owner closing the segment cannot pull the file out from under this thread.
    """
    fd = os.open(segment.log_path, os.O_RDONLY)
    try:
        end = segment.size_bytes
        position = 0
        while position < end:
            chunk = os.pread(fd, min(_READ_CHUNK, end - position), position)
            throttler.account(len(chunk))
            view = memoryview(chunk)
            consumed = 0
            for pos, header in iter_batches(view):
                yield view[pos : pos + header.size], header
                consumed = pos + header.size
            if consumed == 0:
                if len(chunk) < LOG_OVERHEAD:
                    return
                # One batch larger than the chunk: read it whole.
                size = LOG_OVERHEAD + parse_batch_header(chunk).batch_length
                whole = os.pread(fd, size, position)
                if len(whole) < size:
                    return
                yield memoryview(whole), parse_batch_header(whole)
                consumed = size
            position += consumed
    finally:
        os.close(fd)
