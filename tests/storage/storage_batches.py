"""A minimal record batch v2 builder for storage tests (storage itself never encodes records)."""

from __future__ import annotations

import struct

from crc32c import crc32c

from sluice.protocol.records import BatchHeader, parse_batch_header

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")


def _zigzag_varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, value: bytes) -> bytes:
    body = (
        b"\x00"
        + _zigzag_varint(timestamp_delta)
        + _zigzag_varint(offset_delta)
        + _zigzag_varint(-1)
        + _zigzag_varint(len(value))
        + value
        + _zigzag_varint(0)
    )
    return _zigzag_varint(len(body)) + body


def make_batch(
    values: list[bytes],
    timestamps: list[int] | None = None,
    *,
    base_offset: int = 0,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> tuple[bytes, BatchHeader]:
    """A valid v2 batch (CRC-32C correct) and its parsed header. Records are never compressed, even when
    `attributes` claims a codec: storage must not look inside, which is what such tests check."""
    if timestamps is None:
        timestamps = [1_700_000_000_000 + n for n in range(len(values))]
    base_timestamp = min(timestamps)
    records = b"".join(
        _record(n, timestamp - base_timestamp, value)
        for n, (value, timestamp) in enumerate(zip(values, timestamps, strict=True))
    )
    after_crc = (
        _HEADER_AFTER_CRC.pack(
            attributes,
            len(values) - 1,
            base_timestamp,
            max(timestamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(values),
        )
        + records
    )
    batch_length = 4 + 1 + 4 + len(after_crc)
    batch = (
        struct.pack(">qiib", base_offset, batch_length, 0, 2)
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )
    return batch, parse_batch_header(batch)


def values_of(count: int, size: int = 10, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{n}".encode().ljust(size, b".") for n in range(count)]
