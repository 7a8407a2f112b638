"""How storage writes a file: whole, and durable when asked (fsync of the file, then of its directory when a
name was created or replaced). Every file of the data directory is written through here (docs/storage.md)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    _libc.syncfs  # noqa: B018 - present on Linux only
except (OSError, AttributeError):
    _libc = None


def write_file(path: Path, data: bytes | bytearray | memoryview, mode: int = 0o644, *, sync: bool) -> None:
    """Write `data` as the whole content of `path` (created with `mode` if missing); fsync it with `sync`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content. Without `sync`
    the caller makes it durable later (`sync_filesystem`), and until then a crash may leave either."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        write_file(temporary, data, mode, sync=sync)
        os.replace(temporary, path)
    except BaseException:
        # A half-written temporary (ENOSPC) would hold on to the space an operator is trying to free.
        temporary.unlink(missing_ok=True)
        raise
    if sync:
        sync_directory(path.parent)


def sync_filesystem(directory: Path) -> None:
    """Make everything written to the file system holding `directory` durable: one syncfs(2) instead of
    an fsync per file (a clean stop of tens of thousands of partitions). Raises OSError when writeback
    failed (Linux 5.8+ reports it)."""
    if _libc is None:
        os.sync()
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _libc.syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(directory))
    finally:
        os.close(fd)


def sync_directory(directory: Path) -> None:
    """Make created, renamed or removed names in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
