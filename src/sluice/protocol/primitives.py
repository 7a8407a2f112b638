"""Kafka's wire primitives: the readers and writers the generated codecs call.

Readers take a buffer (bytes or memoryview) and a position and return `(value, new_position)`; they never
read past the buffer (a short buffer raises IndexError/struct.error, which the codec turns into a
DecodeError). Writers append bytes to a list of parts, so large payloads (record batches) are never copied
until the frame is sent.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from sluice.errors import ProtocolError

Buffer = bytes | bytearray | memoryview

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)

# struct format letter of every fixed-width type: consecutive fixed fields are packed in one call.
FIXED_FORMATS = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
}


class DecodeError(ProtocolError):
    """The bytes do not form the message they claim to be."""


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    pos += 1
    if byte < 0x80:
        return byte, pos
    result = byte & 0x7F
    shift = 7
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes")


def write_uvarint(out: list[Any], value: int) -> None:
    out.append(uvarint_bytes(value))


# The one-byte varints, made once: lengths and counts below 128 are nearly every varint written.
_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def uvarint_bytes(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    parts = bytearray()
    while value >= 0x80:
        parts.append((value & 0x7F) | 0x80)
        value >>= 7
    parts.append(value)
    return bytes(parts)


def _check_end(buf: Buffer, end: int) -> None:
    if end > len(buf):
        raise DecodeError(f"length runs past the end of the message ({end} > {len(buf)})")


def read_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    (length,) = INT16.unpack_from(buf, pos)
    pos += 2
    if length < 0:
        if length != -1:
            raise DecodeError(f"negative string length {length}")
        return None, pos
    end = pos + length
    _check_end(buf, end)
    return str(buf[pos:end], "utf-8"), end


def read_compact_string(buf: Buffer, pos: int) -> tuple[str | None, int]:
    length, pos = read_uvarint(buf, pos)
    if length == 0:
        return None, pos
    end = pos + length - 1
    _check_end(buf, end)
    return str(buf[pos:end], "utf-8"), end


def read_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    (length,) = INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        if length != -1:
            raise DecodeError(f"negative bytes length {length}")
        return None, pos
    end = pos + length
    _check_end(buf, end)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Buffer, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_uvarint(buf, pos)
    if length == 0:
        return None, pos
    end = pos + length - 1
    _check_end(buf, end)
    return bytes(buf[pos:end]), end


def read_records(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    """Record batches stay a view into the request: the broker stores them without decoding."""
    (length,) = INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        if length != -1:
            raise DecodeError(f"negative records length {length}")
        return None, pos
    end = pos + length
    _check_end(buf, end)
    return memoryview(buf)[pos:end], end


def read_compact_records(buf: Buffer, pos: int) -> tuple[memoryview | None, int]:
    length, pos = read_uvarint(buf, pos)
    if length == 0:
        return None, pos
    end = pos + length - 1
    _check_end(buf, end)
    return memoryview(buf)[pos:end], end


def read_uuid(buf: Buffer, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    _check_end(buf, end)
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def read_array_length(buf: Buffer, pos: int) -> tuple[int, int]:
    (count,) = INT32.unpack_from(buf, pos)
    pos += 4
    if count < -1:
        raise DecodeError(f"negative array length {count}")
    return count, pos


def read_compact_array_length(buf: Buffer, pos: int) -> tuple[int, int]:
    count, pos = read_uvarint(buf, pos)
    return count - 1, pos


def check_array_count(buf: Buffer, pos: int, count: int) -> None:
    # Every element takes at least one byte: a count beyond what is left is a lie, reject it before looping.
    if count > len(buf) - pos:
        raise DecodeError(f"array of {count} elements cannot fit in {len(buf) - pos} bytes")


def skip_tagged_field(buf: Buffer, pos: int) -> int:
    size, pos = read_uvarint(buf, pos)
    end = pos + size
    _check_end(buf, end)
    return end


def write_string(out: list[Any], value: str | None) -> None:
    if value is None:
        out.append(b"\xff\xff")
        return
    data = value.encode()
    out.append(INT16.pack(len(data)))
    out.append(data)


def write_compact_string(out: list[Any], value: str | None) -> None:
    if value is None:
        out.append(b"\x00")
        return
    data = value.encode()
    out.append(uvarint_bytes(len(data) + 1))
    out.append(data)


def write_bytes(out: list[Any], value: Buffer | None) -> None:
    if value is None:
        out.append(b"\xff\xff\xff\xff")
        return
    out.append(INT32.pack(len(value)))
    out.append(value)


def write_compact_bytes(out: list[Any], value: Buffer | None) -> None:
    if value is None:
        out.append(b"\x00")
        return
    out.append(uvarint_bytes(len(value) + 1))
    out.append(value)


def write_uuid(out: list[Any], value: uuid.UUID | None) -> None:
    out.append((value or ZERO_UUID).bytes)


def write_array_length(out: list[Any], value: list[Any] | None) -> None:
    out.append(b"\xff\xff\xff\xff" if value is None else INT32.pack(len(value)))


def write_compact_array_length(out: list[Any], value: list[Any] | None) -> None:
    out.append(b"\x00" if value is None else uvarint_bytes(len(value) + 1))
