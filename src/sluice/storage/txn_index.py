"""The aborted-transaction index of one partition (Kafka's TransactionIndex), one file per segment.

`<20-digit base offset>.txnindex` holds fixed 34-byte entries, one per transaction aborted by a marker in
that segment, in marker order:

    version int16 (0) | producer id int64 | first offset int64 | last offset int64 | last stable offset int64

`first offset` is the transaction's first batch in this partition, `last offset` its ABORT marker's offset
and `last stable offset` the LSO when the marker was written. A read_committed fetch answers every entry
whose range overlaps the data it returns, so the consumer can drop those producers' records up to the
marker.

Entries are appended (write, no fsync) when the marker is appended; the marker itself is what a crash
must not lose, and the index is rebuilt from markers found by the start-up scan of the recent log
(`add_if_missing`). Files of segments that no longer exist are removed at load.

Listed with the other files of the data directory in docs/storage.md.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
_FILE = re.compile(r"^(\d{20})\.txnindex$")
ENTRY_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.entries: list[AbortedTxn] = []  # sorted by last_offset
        self._lasts: list[int] = []
        self._known: set[tuple[int, int]] = set()

    def load(self, first_segment_base: int) -> None:
        """Read every segment's file; drop files of segments below `first_segment_base` (deleted)."""
        if self.directory is None or not self.directory.is_dir():
            return
        found: list[AbortedTxn] = []
        for path in sorted(self.directory.iterdir()):
            match = _FILE.match(path.name)
            if not match:
                continue
            if int(match.group(1)) < first_segment_base:
                path.unlink(missing_ok=True)
                continue
            data = path.read_bytes()
            whole = len(data) - len(data) % _ENTRY.size  # a torn last entry is dropped
            for pos in range(0, whole, _ENTRY.size):
                version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
                if version == ENTRY_VERSION:
                    found.append(AbortedTxn(pid, first, last, lso))
        for entry in sorted(found, key=lambda e: e.last_offset):
            self._insert(entry)

    def _insert(self, entry: AbortedTxn) -> bool:
        key = (entry.producer_id, entry.last_offset)
        if key in self._known:
            return False
        self._known.add(key)
        at = bisect.bisect_right(self._lasts, entry.last_offset)
        self.entries.insert(at, entry)
        self._lasts.insert(at, entry.last_offset)
        return True

    def append(self, entry: AbortedTxn, segment_base: int) -> None:
        if self._insert(entry):
            self._write(entry, segment_base)

    def add_if_missing(self, entry: AbortedTxn, segment_base: int) -> None:
        """Rebuild: an abort marker found in the log whose entry a crash or a deleted file lost."""
        self.append(entry, segment_base)

    def _write(self, entry: AbortedTxn, segment_base: int) -> None:
        if self.directory is None:
            return
        path = self.directory / f"{segment_base:020d}{TXN_INDEX_SUFFIX}"
        record = _ENTRY.pack(
            ENTRY_VERSION, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            # A torn entry from a crash mid-write would shift every later one: pad the file to whole entries.
            size = os.fstat(fd).st_size
            if size % _ENTRY.size:
                os.ftruncate(fd, size - size % _ENTRY.size)
            os.write(fd, record)
        finally:
            os.close(fd)

    def collect(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_offset)."""
        start = bisect.bisect_left(self._lasts, fetch_offset)
        return [e for e in self.entries[start:] if e.first_offset < upper_offset]
