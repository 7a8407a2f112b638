"""A producer's record batch written straight from (key, value, headers) tuples.

`records.encode_batch` takes `Record` objects, each with offset and timestamp deltas of its own; a producer
that sends what it is handed would build those only to have them read back. This writes the same v2 batch
(the layout is in `records`' module docstring) from the tuples themselves: record i gets offset delta i and
timestamp delta 0 (the batch's one create time), no producer id or sequence, and the varints of small
numbers are looked up rather than encoded. tests/protocol/test_plain_batch.py reads what it writes back
with `decode_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crc32c import crc32c

from sluice.protocol.compression import Codec, compress
from sluice.protocol.records import (
    BEFORE_CRC,
    CRC_COVERED_HEADER,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    encode_varint,
)

Header = tuple[str, bytes | None]
# Key, value, and headers last: anything between them (the partition a caller chose) is not read, so callers
# hand over the tuples they hold rather than copies.
PlainRecord = tuple[Any, ...]

# Zigzag varints of 0..16383 (lengths and offset deltas of all but the largest records): 16k small bytes
# objects, looked up in one step instead of three Python calls each.
_SMALL_VARINTS = tuple(encode_varint(i) for i in range(1 << 14))
_NULL = encode_varint(-1)
# Values shorter than this make records whose own length is still in `_SMALL_VARINTS`.
_SHORT = len(_SMALL_VARINTS) - 32
# A record's attributes (0) and timestamp delta (0).
_RECORD_HEAD = b"\x00\x00"
_NO_HEADERS = encode_varint(0)
# Per offset delta: attributes, timestamp delta, the delta and a null key, the head of every keyless record.
_KEYLESS_HEADS = tuple(_RECORD_HEAD + delta + _NULL for delta in _SMALL_VARINTS)
PARTS_PER_RECORD = 5
_UINT32_SIZE = 4


def _varint(value: int) -> bytes:
    return _SMALL_VARINTS[value] if value < len(_SMALL_VARINTS) else encode_varint(value)


def _nullable(data: bytes | None) -> bytes:
    return _NULL if data is None else _varint(len(data)) + data


def _headers(headers: Sequence[Header]) -> bytes:
    if not headers:
        return _NO_HEADERS
    parts = [_varint(len(headers))]
    for key, value in headers:
        parts.append(_nullable(key.encode("utf-8")))
        parts.append(_nullable(value))
    return b"".join(parts)


def encode_records(records: Sequence[PlainRecord], first: int = 0) -> list[bytes]:
    """The records as they go in a batch, record i with offset delta `first` + i: `PARTS_PER_RECORD` parts
    each (its length, its head up to the key, then two parts of key and value, then its headers), to be joined
    once (after the parts of the `first` records before them, if any)."""
    small, limit, parts = _SMALL_VARINTS, len(_SMALL_VARINTS), []
    extend = parts.extend
    for index, record in enumerate(records, first):
        key, value, headers = record[0], record[1], record[-1]
        if (
            key is None
            and not headers
            and value is not None
            and index < limit
            and (count := len(value)) < _SHORT
        ):
            # The common record (a value, no key, no headers), its length worked out rather than measured.
            head, length = _KEYLESS_HEADS[index], small[count]
            extend((small[len(head) + len(length) + count + 1], head, length, value, _NO_HEADERS))
            continue
        head = _RECORD_HEAD + (small[index] if index < limit else encode_varint(index))
        key_part, value_part = _nullable(key), _nullable(value)
        header_part = _headers(headers) if headers else _NO_HEADERS
        size = len(head) + len(key_part) + len(value_part) + len(header_part)
        extend((_varint(size), head, key_part, value_part, header_part))
    return parts


def encode_values(values: Sequence[bytes], first: int = 0) -> list[bytes]:
    """`encode_records` of records that are a value alone (no key, no headers, not null), read from the values
    themselves: the common produce, without a tuple per record."""
    if first + len(values) > len(_KEYLESS_HEADS) or max(map(len, values), default=0) >= _SHORT:
        return encode_records([(None, value, ()) for value in values], first)
    small, heads, parts = _SMALL_VARINTS, _KEYLESS_HEADS, []
    extend = parts.extend
    for index, value in enumerate(values, first):
        head, length = heads[index], small[len(value)]
        extend((small[len(head) + len(length) + len(value) + 1], head, length, value, _NO_HEADERS))
    return parts


def batch_of(payload: bytes, count: int, timestamp_ms: int, compression: int = Codec.NONE) -> bytes:
    """One v2 batch of the `count` records (at least one) that `encode_records` wrote and that `payload` joins,
    all created at `timestamp_ms`, its base offset 0 for the broker to assign."""
    if count < 1:
        raise ValueError("a batch needs at least one record")
    if compression != Codec.NONE:
        payload = compress(compression, payload)
    covered = CRC_COVERED_HEADER.pack(
        compression, count - 1, timestamp_ms, timestamp_ms, NO_PRODUCER_ID, -1, NO_SEQUENCE, count
    )
    crc = crc32c(payload, crc32c(covered))
    prefix = BEFORE_CRC.pack(0, MIN_BATCH_LENGTH + len(payload), -1, MAGIC_V2)
    return b"".join((prefix, crc.to_bytes(_UINT32_SIZE, "big"), covered, payload))


def encode_plain_batch(
    records: Sequence[PlainRecord], timestamp_ms: int, compression: int = Codec.NONE
) -> bytes:
    """`records` as one batch."""
    return batch_of(b"".join(encode_records(records)), len(records), timestamp_ms, compression)
