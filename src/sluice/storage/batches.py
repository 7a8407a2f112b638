"""What storage needs to know about batch bytes: is a stored batch intact, and (for ListOffsets) which
record inside one uncompressed batch carries a timestamp.

Nothing here is on the append or fetch path; recovery and timestamp lookups use it.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from sluice.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_LOG_APPEND,
    BatchHeader,
    parse_batch_header,
)

BASE_OFFSET = struct.Struct(">q")
_BATCH_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
MAGIC_V2 = 2


def batch_length_at(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The batchLength field of the batch at `pos` (the caller has LOG_OVERHEAD bytes there)."""
    return _BATCH_LENGTH.unpack_from(buf, pos + 8)[0]


def plausible_length(batch_length: int) -> bool:
    return batch_length >= _MIN_BATCH_LENGTH


def intact_batch_header(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader | None:
    """The header of the complete, CRC-valid v2 batch at `pos` in `buf`, or None if it is not one.

    `buf` must hold the whole batch; a batch running past the end of `buf` is reported as None.
    """
    if len(buf) - pos < BATCH_HEADER_SIZE:
        return None
    batch_length = batch_length_at(buf, pos)
    if not plausible_length(batch_length) or pos + LOG_OVERHEAD + batch_length > len(buf):
        return None
    if buf[pos + MAGIC_OFFSET] != MAGIC_V2:
        return None
    header = parse_batch_header(buf, pos)
    if header.last_offset_delta < 0:
        return None
    end = pos + LOG_OVERHEAD + batch_length
    stored_crc = _CRC.unpack_from(buf, pos + CRC_OFFSET)[0]
    if crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]) != stored_crc:
        return None
    return header


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at `pos`: (value, position after it)."""
    shift = 0
    raw = 0
    while True:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def first_record_at_or_after(
    batch: bytes, header: BatchHeader, timestamp_ms: int, min_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record in `batch` with offset >= `min_offset` and timestamp >=
    `timestamp_ms`.

    Compressed batches are not decoded: the answer is the first eligible offset with the batch's
    maxTimestamp, which is never later than the exact record. With LogAppendTime every record carries
    maxTimestamp, so that answer is exact.
    """
    if header.max_timestamp < timestamp_ms:
        return None
    first_eligible = max(header.base_offset, min_offset)
    if header.compression or header.attributes & TIMESTAMP_TYPE_LOG_APPEND:
        return first_eligible, header.max_timestamp
    try:
        for offset, record_timestamp in _record_timestamps(batch, header):
            if offset >= min_offset and record_timestamp >= timestamp_ms:
                return offset, record_timestamp
    except (ValueError, IndexError):
        pass
    # Malformed records: fall back to the batch-level answer rather than failing a ListOffsets.
    return first_eligible, header.max_timestamp


def _record_timestamps(batch: bytes, header: BatchHeader) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of an uncompressed batch."""
    out: list[tuple[int, int]] = []
    pos = BATCH_HEADER_SIZE
    for _ in range(header.record_count):
        length, pos = _varint(batch, pos)
        record_end = pos + length
        attributes_end = pos + 1
        timestamp_delta, after = _varint(batch, attributes_end)
        offset_delta, _ = _varint(batch, after)
        out.append((header.base_offset + offset_delta, header.base_timestamp + timestamp_delta))
        pos = record_end
    return out
