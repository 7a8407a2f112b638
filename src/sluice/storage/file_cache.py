"""A bounded cache of open segment-file descriptors, closed least recently used first.

A broker with tens of thousands of partitions cannot keep a descriptor open per segment: the open-file
limit (RLIMIT_NOFILE), not memory, would cap the partition count. Each segment log file is a `CachedFile`;
every read, write, truncate or fsync pins it for the duration of the call through `FileCache.use`, and
only unpinned files are ever closed, so no read or fsync runs on a descriptor closed under it.

Closing and reopening a file loses nothing: written bytes live in the page cache of the inode, and an
fsync through any later descriptor covers them. Linux reports a writeback error that nobody saw yet to a
descriptor opened after it happened (errseq_t), so the fsync that follows a reopen still fails when an
earlier background write did.

Threading: one lock guards the whole cache; the event-loop thread and the fsync thread both use it. The
lock is held for dictionary work and `open`/`close` (no I/O on data), never for the pread/pwrite/fsync.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path

from sluice.errors import ErrorCode, KafkaError

_log = logging.getLogger("sluice.storage")
MIN_CAPACITY = 1
# However many client connections there are, the cache may keep this many segment files open: the broker's
# share of the open-file limit that connections never take (sluice.server.admission).
MIN_SEGMENT_FILES = 64


class TooManyOpenFiles(KafkaError):
    """No descriptor could be had for a segment file. Nothing was written or changed: the request fails
    with KAFKA_STORAGE_ERROR (retriable) and the partition stays online."""

    def __init__(self, path: Path) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot open {path}: {open_file_limit_hint()}")


def open_file_limit_hint() -> str:
    """What an EMFILE means here and what to change, naming the current limits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"too many open files (the open-file limit RLIMIT_NOFILE is {soft}, hard limit {hard}); raise the "
        "limit (`ulimit -n`, systemd LimitNOFILE=), or lower open_segment_files or max_connections in the "
        "broker config"
    )


class CachedFile:
    """One file the cache opens on demand. `fd` is -1 while closed; `pins` counts calls using it."""

    __slots__ = ("create", "fd", "path", "pins")

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = path
        self.fd = -1
        self.pins = 0
        self.create = create  # the first open creates the file and fails if it exists


class FileCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = max(MIN_CAPACITY, capacity)
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, None] = OrderedDict()
        self.opens = 0  # how many times a descriptor was opened (tests and metrics)

    def __len__(self) -> int:
        return len(self._open)

    def acquire(self, file: CachedFile) -> int:
        """The file's descriptor, opened if needed, pinned until `release(file)`."""
        with self._lock:
            if file.fd >= 0:
                self._open.move_to_end(file)
                file.pins += 1
                return file.fd
            self._close_unpinned(len(self._open) + 1 - self.capacity)
            file.fd = self._open_file(file)
            file.pins = 1
            self._open[file] = None
            return file.fd

    def release(self, file: CachedFile) -> None:
        with self._lock:
            file.pins -= 1
            if len(self._open) > self.capacity and not file.pins:
                self._close_unpinned(len(self._open) - self.capacity)

    def pwrite(self, file: CachedFile, data: bytes | memoryview, position: int) -> int:
        """`os.pwrite` at `position` with the file pinned for the call: what `use` does, in one call for
        the append path, which runs once per produced batch."""
        lock = self._lock
        with lock:  # acquire's common case, an open file, without the call
            fd = file.fd
            if fd >= 0:
                self._open.move_to_end(file)
                file.pins += 1
        if fd < 0:
            fd = self.acquire(file)
        try:
            return os.pwrite(fd, data, position)
        finally:
            with lock:  # release, without the call
                file.pins -= 1
                if not file.pins and len(self._open) > self.capacity:
                    self._close_unpinned(len(self._open) - self.capacity)

    def use(self, file: CachedFile) -> Pinned:
        """`with cache.use(file) as fd:` the descriptor, pinned for the block."""
        return Pinned(self, file)

    def close(self, file: CachedFile) -> None:
        """Close the file's descriptor for good (the segment is closed or deleted; nothing pins it)."""
        with self._lock:
            if file.fd >= 0:
                self._open.pop(file, None)
                fd, file.fd = file.fd, -1
                os.close(fd)

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(MIN_CAPACITY, capacity)
            self._close_unpinned(len(self._open) - self.capacity)

    # --- under the lock -----------------------------------------------------------------------------

    def _open_file(self, file: CachedFile) -> int:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if file.create else 0)
        while True:
            try:
                fd = os.open(file.path, flags, 0o644)
            except OSError as error:
                if error.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                # Other descriptors (connections, index files) used up the limit: give one of ours back.
                if not self._close_unpinned(1):
                    _log.error("out of file descriptors opening %s", file.path)
                    raise TooManyOpenFiles(file.path) from error
                continue
            file.create = False
            self.opens += 1
            return fd

    def _close_unpinned(self, count: int) -> int:
        """Close up to `count` least recently used descriptors that nothing pins; returns how many."""
        if count <= 0:
            return 0
        victims = []
        for candidate in self._open:  # oldest first; stops early, so no walk over every open file
            if len(victims) >= count:
                break
            if not candidate.pins:
                victims.append(candidate)
        for victim in victims:
            del self._open[victim]
            fd, victim.fd = victim.fd, -1
            os.close(fd)
        return len(victims)


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (logged); returns (soft, hard) afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            _log.info(
                "raised the open-file limit (RLIMIT_NOFILE) from %d to %d, the hard limit", soft, target
            )
            soft = target
        except (ValueError, OSError) as error:
            _log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, error)
    return soft, hard


def reserved_for(soft_limit: int, reserved: int) -> int:
    """The descriptors kept free of segment files and client connections: `reserved` (the broker's
    reserved_descriptors), but at most a quarter of a small limit, so the rest still gets three quarters."""
    return min(reserved, soft_limit // 4)


def default_capacity(soft_limit: int, reserved: int, connections: int = 0) -> int:
    """What the open-file limit leaves for segment files after the reserve and the client connections."""
    return max(MIN_SEGMENT_FILES, soft_limit - reserved_for(soft_limit, reserved) - connections)


# One cache per process: the limit it shares is per process too. Sized at start (sluice.server.app) and
# as client connections come and go (sluice.server.admission).
SEGMENT_FILES = FileCache(default_capacity(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024))


class Pinned:
    """FileCache.use's context manager: a plain class, since every append and read goes through one (a
    generator-based one costs several times as much)."""

    __slots__ = ("cache", "file")

    def __init__(self, cache: FileCache, file: CachedFile) -> None:
        self.cache = cache
        self.file = file

    def __enter__(self) -> int:
        return self.cache.acquire(self.file)

    def __exit__(self, *exc_info: object) -> None:
        self.cache.release(self.file)
