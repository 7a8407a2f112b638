"""The space an active segment reserves ahead of its last batch, and telling it from torn data.

An active segment's `.log` file is extended RESERVE_BYTES at a time, sparse (sluice.storage.segment), so its
size is a multiple of RESERVE_BYTES and it ends in a hole, or, after a crash on some file systems, in zeros.
Neither holds a batch: scans stop where the hole starts, and recovery counts trailing zeros as reserved
space, not as torn data (docs/storage.md).
"""

from __future__ import annotations

import errno
import os

# The active segment's file size runs ahead of its last batch by up to this much, in multiples of it.
RESERVE_BYTES = 1 << 20
_ZERO_SCAN_CHUNK = 64 * 1024


def trailing_hole(fd: int, start: int, file_size: int) -> int:
    """Where the hole the file ends in begins, at or after `start` (never-written space reads as zeros and
    holds no batch, so scans stop there): `file_size` when the file ends in data, or when the file system
    cannot tell (no SEEK_HOLE)."""
    try:
        hole = os.lseek(fd, start, os.SEEK_HOLE)
        while hole < file_size:
            try:
                data = os.lseek(fd, hole, os.SEEK_DATA)
            except OSError as error:
                return hole if error.errno == errno.ENXIO else file_size  # ENXIO: no data after it
            hole = os.lseek(fd, data, os.SEEK_HOLE)
    except OSError:
        pass
    return file_size


def scan_limit(fd: int, start: int, file_size: int) -> int:
    """Where a scan of a `.log` file from `start` may stop: the start of a reserving file's trailing hole
    (a size that is a multiple of RESERVE_BYTES), else the file's end."""
    return trailing_hole(fd, start, file_size) if file_size % RESERVE_BYTES == 0 else file_size


def reserved_tail(fd: int, start: int, file_size: int) -> int:
    """How many bytes at the end of the file, after `start`, are space an active segment reserved: a
    file whose size is a multiple of RESERVE_BYTES ending in zeros. The bytes before them are torn data.
    Only the written part before the trailing hole is read (a crash leaves the reserve a hole)."""
    if file_size % RESERVE_BYTES or file_size <= start:
        return 0
    end = trailing_hole(fd, start, file_size)
    while end > start:
        size = min(_ZERO_SCAN_CHUNK, end - start)
        chunk = os.pread(fd, size, end - size)
        if len(chunk) < size:
            return 0  # the file shrank while read (verify beside a running broker): no tail to speak of
        stripped = chunk.rstrip(b"\0")
        if stripped:
            return file_size - (end - size + len(stripped))
        end -= size
    return file_size - start
