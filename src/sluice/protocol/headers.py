"""Request and response headers, and which header version each API version uses.

Request header v1 adds the (always non-compact, nullable) client id; v2 adds tagged fields and is used by
every flexible API version. Response header v1 adds tagged fields, except that ApiVersions responses always
use v0 so that a client can parse the answer before it knows what the broker supports.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sluice.protocol.primitives import DecodeError, read_string, read_uvarint, skip_tagged_field

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
# api_key, api_version, correlation_id: the part of a request header every version has.
HEADER_FIXED = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")
# A response's size prefix and header in one: size, correlation id (and no tagged fields, when flexible).
_FRAME_HEAD = struct.Struct(">ii")
_FLEXIBLE_FRAME_HEAD = struct.Struct(">iiB")
# A body up to this size is joined with its head (a copy costs less than one more part to write).
_JOIN_BODY_BYTES = 4 * 1024
_INT16 = struct.Struct(">h")


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_request_header(frame: bytes | memoryview) -> RequestHeader:
    """The fixed part of the header, readable whatever the API: enough to answer 'unsupported'."""
    if len(frame) < HEADER_FIXED.size:
        raise DecodeError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id = HEADER_FIXED.unpack_from(frame)
    return RequestHeader(api_key, api_version, correlation_id, None)


def parse_request_header(frame: bytes | memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    """Parse a whole request header; returns it and where the body starts."""
    header = peek_request_header(frame)
    header.client_id, pos = read_header_tail(frame, header.api_key, header.api_version, flexible)
    return header, pos


def read_header_tail(
    frame: bytes | memoryview, api_key: int, api_version: int, flexible: bool
) -> tuple[str | None, int]:
    """What follows the fixed part of a request header (see peek_request_header): the client id, and
    where the body starts."""
    pos = HEADER_FIXED.size
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return None, pos
    try:
        # read_string, inline for the common client id (every request passes here)
        (length,) = _INT16.unpack_from(frame, pos)
        end = pos + 2 + length
        if length >= 0 and end <= len(frame):
            client_id, pos = str(frame[pos + 2 : end], "utf-8"), end
        else:
            client_id, pos = read_string(frame, pos)
        if flexible:
            if frame[pos] == 0:  # no tagged fields, as nearly always
                return client_id, pos + 1
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _, pos = read_uvarint(frame, pos)
                pos = skip_tagged_field(frame, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed request header: {exc}") from exc
    return client_id, pos


def response_header(correlation_id: int, api_key: int, flexible: bool) -> bytes:
    if flexible and api_key != API_VERSIONS_KEY:
        return _CORRELATION.pack(correlation_id) + b"\x00"
    return _CORRELATION.pack(correlation_id)


def framed_response(correlation_id: int, api_key: int, flexible: bool, body: bytes) -> list[bytes]:
    """An encoded response body with its header and size prefix, ready for `transport.writelines`: what
    `framing.frame([response_header(...), body])` gives, in one struct call."""
    if flexible and api_key != API_VERSIONS_KEY:
        head = _FLEXIBLE_FRAME_HEAD.pack(len(body) + 5, correlation_id, 0)
    else:
        head = _FRAME_HEAD.pack(len(body) + 4, correlation_id)
    return [head + body] if len(body) <= _JOIN_BODY_BYTES else [head, body]


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    parts = [HEADER_FIXED.pack(api_key, api_version, correlation_id)]
    if client_id is None:
        parts.append(b"\xff\xff")
    else:
        data = client_id.encode()
        parts.append(len(data).to_bytes(2, "big") + data)
    if flexible:
        parts.append(b"\x00")
    return b"".join(parts)
