"""Damaged byte ranges in a segment: finding them (a scan that resynchronises on the next intact batch)
and remembering them (`damaged.json` in the partition directory).

Kafka's recovery truncates a segment at its first bad batch and loses everything after it. sluice keeps
every intact batch at its offset instead: after a batch whose framing or CRC-32C is bad, the scan looks
for the next position where a whole v2 batch checks out (length, magic, CRC) and whose offsets are past
the last good one, and records the bytes in between as damaged. Reads never serve damaged bytes: a fetch
for one of their offsets gets CORRUPT_MESSAGE (or skips them where the broker says so).

Batch offsets must strictly increase but need not be contiguous: compaction leaves holes, and Kafka's
recovery does not require contiguity either.

`damaged.json` layout: docs/storage.md.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import BATCH_HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader
from sluice.storage.batches import MAGIC_V2, batch_length_at, intact_batch_header, plausible_length
from sluice.storage.files import write_atomically

DAMAGE_FILE = "damaged.json"
_CHUNK = 1024 * 1024
# A batch longer than this is not believed during a resync search (a plausible-looking length field in
# garbage would otherwise make the search read huge windows). Scanning intact data has no such cap.
_MAX_RESYNC_BATCH = 64 * 1024 * 1024
_MAGIC = bytes([MAGIC_V2])
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DamagedRange:
    """Bytes [start, end) of a segment's `.log` that are not intact batches, and the offsets
    [first_offset, end_offset) that would have been there (empty when no offsets are missing)."""

    segment: int
    start: int
    end: int
    first_offset: int
    end_offset: int

    def holds(self, offset: int) -> bool:
        return self.first_offset <= offset < self.end_offset

    def describe(self, log_path: Path | str) -> str:
        offsets = (
            f"offsets {self.first_offset}..{self.end_offset - 1}"
            if self.end_offset > self.first_offset
            else "no offsets"
        )
        return (
            f"{log_path}: bytes {self.start}..{self.end} ({self.end - self.start} bytes) damaged, {offsets}"
        )


class DamagedOffsets(KafkaError):
    """A read hit offsets whose bytes are damaged; `resume_offset` is the first offset after them."""

    def __init__(self, damaged: DamagedRange, log_path: Path | str) -> None:
        super().__init__(ErrorCode.CORRUPT_MESSAGE, damaged.describe(log_path))
        self.damaged = damaged
        self.resume_offset = damaged.end_offset


@dataclass(frozen=True, slots=True)
class Intact:
    position: int
    header: BatchHeader


@dataclass(frozen=True, slots=True)
class Damaged:
    start: int
    end: int


class _Reader:
    """pread through a window that is reused while it covers what is asked."""

    def __init__(self, fd: int, end: int) -> None:
        self.fd = fd
        self.end = end  # what is read stops here (past it: a reserved tail, or bytes written since)
        self.buffer = b""
        self.start = 0

    def window(self, at: int, size: int) -> tuple[bytes, int]:
        relative = at - self.start
        if relative < 0 or len(self.buffer) - relative < size:
            self.buffer = os.pread(self.fd, max(size, min(_CHUNK, self.end - at)), at)
            self.start, relative = at, 0
        return self.buffer, relative


def scan_segment(
    fd: int, file_size: int, next_offset: int, offset_limit: int | None = None, start: int = 0
) -> Iterator[Intact | Damaged]:
    """Every intact batch and every damaged stretch of a `.log` file, in file order.

    A batch is intact when its length, magic and CRC check out, its base offset is at least the offset
    after the previous intact batch (`next_offset` before the first), and its last offset is below
    `offset_limit` (the next segment's base, when there is one). A damaged stretch running to the end of
    the file is reported like any other; the caller decides whether it is a torn tail.
    """
    reader = _Reader(fd, file_size)

    def whole_at(at: int, resyncing: bool = False) -> BatchHeader | None:
        """The header of a batch at `at` whose framing and CRC check out, whatever its offsets."""
        if at + BATCH_HEADER_SIZE > file_size:
            return None
        buf, relative = reader.window(at, BATCH_HEADER_SIZE)
        batch_length = batch_length_at(buf, relative)
        if not plausible_length(batch_length) or at + LOG_OVERHEAD + batch_length > file_size:
            return None
        if resyncing and LOG_OVERHEAD + batch_length > _MAX_RESYNC_BATCH:
            return None
        buf, relative = reader.window(at, LOG_OVERHEAD + batch_length)
        return intact_batch_header(buf, relative)

    def intact_at(at: int, resyncing: bool = False) -> BatchHeader | None:
        header = whole_at(at, resyncing)
        if header is None or header.base_offset < next_offset:
            return None
        if offset_limit is not None and header.last_offset >= offset_limit:
            return None
        if header.base_offset > next_offset:
            # A gap. The CRC does not cover baseOffset, so a flipped bit there looks like a gap too; then
            # the next batch's offsets fall inside this one's and the damage is this batch, not its
            # successors.
            following = whole_at(at + header.size)
            if following is not None and next_offset <= following.base_offset <= header.last_offset:
                return None
        return header

    position = start
    while position < file_size:
        header = intact_at(position)
        if header is not None:
            yield Intact(position, header)
            next_offset = header.last_offset + 1
            position += header.size
            continue
        # Resynchronise: candidates are the positions whose magic byte (16 bytes in) is 2.
        candidate = position + 1
        resync = file_size
        while candidate + BATCH_HEADER_SIZE <= file_size:
            span = min(_CHUNK, file_size - candidate)
            buf, relative = reader.window(candidate, span)
            found = buf.find(_MAGIC, relative + MAGIC_OFFSET, relative + span)
            if found < 0:
                candidate += span - MAGIC_OFFSET
                continue
            candidate += found - relative - MAGIC_OFFSET
            if intact_at(candidate, resyncing=True) is not None:
                resync = candidate
                break
            candidate += 1
        yield Damaged(position, resync)
        position = resync


def read_damage(directory: Path) -> list[DamagedRange]:
    """The damaged ranges recorded for a partition (empty when none, or when the file is unreadable:
    recovery then finds the damage again in any segment it scans)."""
    try:
        raw = json.loads((directory / DAMAGE_FILE).read_bytes())
        return [DamagedRange(**entry) for entry in raw["ranges"]]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError):
        _log.error("unreadable %s in %s; ignoring it", DAMAGE_FILE, directory)
        return []


def write_damage(directory: Path, ranges: list[DamagedRange]) -> None:
    path = directory / DAMAGE_FILE
    if not ranges:
        path.unlink(missing_ok=True)
        return
    document = {"ranges": [asdict(r) for r in sorted(ranges, key=lambda r: (r.segment, r.start))]}
    write_atomically(path, json.dumps(document, indent=1).encode())
