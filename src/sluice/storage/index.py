"""Sparse per-segment indexes: offset -> file position and timestamp -> offset (Kafka's formats).

Both live in a bytearray while the segment is open and are written to their files in bulk: a sealed
segment's indexes when it becomes durable, the active segment's on clean close. A file may therefore lag
its log after a crash; the loader rescans every segment from the recovery point and rebuilds indexes
that are missing, torn or inconsistent, so the files are hints for speed, never the source of truth.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _read_entries(path: Path, entry_size: int) -> bytearray | None:
    """The file's entries without trailing all-zero ones (preallocated or zero-filled space);
    None when the file is missing or its size is not a whole number of entries (torn write).
    """
    try:
        data = bytearray(path.read_bytes())
    except FileNotFoundError:
        return None
    if len(data) % entry_size:
        return None
    end = len(data)
    zero = bytes(entry_size)
    while end and data[end - entry_size : end] == zero:
        end -= entry_size
    del data[end:]
    return data


def _write_file(path: Path, data: bytes | bytearray, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


class OffsetIndex:
    """Sparse offset index of one segment, file `<base offset>.index`.

    Entries are 8 bytes, big-endian: relative offset int32 (a batch's baseOffset minus the segment's
    base offset) and position int32 (that batch's byte position in the `.log` file). Both strictly
    increase. The first batch never gets an entry (position 0 is implied); a batch gets one when more
    than index.interval.bytes were appended since the previous entry, as in Kafka's LogSegment. Unlike
    Kafka, which indexes a batch's last offset, the entry names the batch's base offset, so a lookup lands
    on the batch boundary at or before the target.
    """

    ENTRY_SIZE = _OFFSET_ENTRY.size

    def __init__(self, base_offset: int, entries: bytearray | None = None) -> None:
        self.base_offset = base_offset
        self._entries = entries if entries is not None else bytearray()

    @classmethod
    def load(cls, path: Path, base_offset: int) -> OffsetIndex | None:
        entries = _read_entries(path, cls.ENTRY_SIZE)
        return None if entries is None else cls(base_offset, entries)

    def __len__(self) -> int:
        return len(self._entries) // self.ENTRY_SIZE

    def entry(self, n: int) -> tuple[int, int]:
        relative, position = _OFFSET_ENTRY.unpack_from(self._entries, n * self.ENTRY_SIZE)
        return self.base_offset + relative, position

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or the segment start when there are none."""
        return self.entry(len(self) - 1) if self._entries else (self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        self._entries += _OFFSET_ENTRY.pack(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= `offset`, else the segment start."""
        low, high = 0, len(self)
        while low < high:
            middle = (low + high) // 2
            if self.entry(middle)[0] <= offset:
                low = middle + 1
            else:
                high = middle
        return self.entry(low - 1) if low else (self.base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before byte `position`, else the segment start."""
        low, high = 0, len(self)
        while low < high:
            middle = (low + high) // 2
            if self.entry(middle)[1] <= position:
                low = middle + 1
            else:
                high = middle
        return self.entry(low - 1) if low else (self.base_offset, 0)

    def problem(self, log_size: int) -> str | None:
        """Why the entries cannot describe a log of `log_size` bytes, or None if they can."""
        previous_relative, previous_position = -1, 0
        for n in range(len(self)):
            relative, position = _OFFSET_ENTRY.unpack_from(self._entries, n * self.ENTRY_SIZE)
            if relative <= previous_relative or position <= previous_position:
                return f"entry {n} does not increase"
            if position >= log_size:
                return f"entry {n} points past the log ({position} >= {log_size})"
            previous_relative, previous_position = relative, position
        return None

    def write(self, path: Path, *, sync: bool) -> None:
        _write_file(path, self._entries, sync=sync)


class TimeIndex:
    """Sparse time index of one segment, file `<base offset>.timeindex`.

    Entries are 12 bytes, big-endian: timestamp int64 (the segment's largest batch maxTimestamp so far)
    and relative offset int32 (the base offset of the first batch that reached that timestamp, minus the
    segment's base offset). Timestamps strictly increase: an entry is added next to each offset-index
    entry only when the largest timestamp grew, plus one final entry when the segment is sealed or closed,
    so the last entry is the segment's largest timestamp. Every batch before an entry's offset has a
    smaller maxTimestamp, so a search for T may start at the last entry whose timestamp is <= T.
    """

    ENTRY_SIZE = _TIME_ENTRY.size

    def __init__(self, base_offset: int, entries: bytearray | None = None) -> None:
        self.base_offset = base_offset
        self._entries = entries if entries is not None else bytearray()

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TimeIndex | None:
        entries = _read_entries(path, cls.ENTRY_SIZE)
        return None if entries is None else cls(base_offset, entries)

    def __len__(self) -> int:
        return len(self._entries) // self.ENTRY_SIZE

    def entry(self, n: int) -> tuple[int, int]:
        timestamp, relative = _TIME_ENTRY.unpack_from(self._entries, n * self.ENTRY_SIZE)
        return timestamp, self.base_offset + relative

    def last_entry(self) -> tuple[int, int] | None:
        return self.entry(len(self) - 1) if self._entries else None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        last = self.last_entry()
        if last is None or timestamp > last[0]:
            self._entries += _TIME_ENTRY.pack(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset to start searching for the first batch with maxTimestamp >= `timestamp`."""
        low, high = 0, len(self)
        while low < high:
            middle = (low + high) // 2
            if self.entry(middle)[0] <= timestamp:
                low = middle + 1
            else:
                high = middle
        return self.entry(low - 1)[1] if low else self.base_offset

    def problem(self, next_offset: int) -> str | None:
        """Why the entries cannot describe a segment ending before `next_offset`, or None if they can."""
        previous_timestamp, previous_relative = None, 0
        for n in range(len(self)):
            timestamp, relative = _TIME_ENTRY.unpack_from(self._entries, n * self.ENTRY_SIZE)
            if previous_timestamp is not None and timestamp <= previous_timestamp:
                return f"entry {n} timestamp does not increase"
            if relative < previous_relative or self.base_offset + relative >= next_offset:
                return f"entry {n} offset out of order or past the segment"
            previous_timestamp, previous_relative = timestamp, relative
        return None

    def write(self, path: Path, *, sync: bool) -> None:
        _write_file(path, self._entries, sync=sync)
