"""Confluent's Schema Registry framing of Kafka keys and values, shared by the console and the pipeline.

Magic byte 0, the schema id as 4 big-endian bytes, then the payload; a Protobuf payload starts
with the message-index array (zigzag varints: its length, then the indexes; one 0 byte means
``[0]``, the file's first message). Pure.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from sluice.errors import CorruptRecordError
from sluice.protocol.records import decode_varint, encode_varlong

__all__ = [
    "MAGIC",
    "UndecodableRecordError",
    "decode_message_index",
    "encode_message_index",
    "frame",
    "is_framed",
    "split_frame",
    "zigzag",
]

MAGIC = 0
_HEADER = struct.Struct(">bI")


class UndecodableRecordError(ValueError):
    """A key or value is not registry-framed data of the expected format."""


def is_framed(data: bytes | None) -> bool:
    """Whether ``data`` could be registry-framed (magic byte and room for an id)."""
    return data is not None and len(data) >= _HEADER.size and data[0] == MAGIC


def frame(schema_id: int, payload: bytes, message_index: Sequence[int] | None = None) -> bytes:
    """Magic byte, schema id, (Protobuf: message indexes,) payload."""
    prefix = _HEADER.pack(MAGIC, schema_id)
    if message_index is not None:
        prefix += encode_message_index(message_index)
    return prefix + payload


def split_frame(data: bytes) -> tuple[int, memoryview]:
    """(schema id, payload) of a framed value; raises UndecodableRecordError when it is not framed."""
    if len(data) < _HEADER.size or data[0] != MAGIC:
        first = f"0x{data[0]:02x}" if data else "nothing"
        raise UndecodableRecordError(
            f"not registry-framed: starts with {first}, expected magic byte 0 and a 4-byte schema id"
        )
    return int.from_bytes(data[1:5], "big"), memoryview(data)[5:]


def zigzag(value: int) -> bytes:
    """A zigzag varint, as Avro (block counts) and Confluent's message indexes write them."""
    return encode_varlong(value)


def _read_zigzag(data: memoryview, at: int) -> tuple[int, int]:
    try:
        return decode_varint(data, at)
    except CorruptRecordError:
        raise UndecodableRecordError("the Protobuf message-index array is cut short or malformed") from None


def encode_message_index(indexes: Sequence[int]) -> bytes:
    if list(indexes) == [0]:
        return b"\x00"
    return zigzag(len(indexes)) + b"".join(zigzag(i) for i in indexes)


def decode_message_index(payload: memoryview) -> tuple[tuple[int, ...], memoryview]:
    count, at = _read_zigzag(payload, 0)
    if count == 0:
        return (0,), payload[at:]
    if count < 0 or count > 100:
        raise UndecodableRecordError(f"the Protobuf message-index array claims {count} entries")
    indexes = []
    for _ in range(count):
        index, at = _read_zigzag(payload, at)
        indexes.append(index)
    return tuple(indexes), payload[at:]
