"""Request and response headers: which header version each API version uses, and the request header a client
writes. The broker reads a request's header and frames its answers with the codec of that API version
(sluice.protocol.codec: VersionCodec.read_header, VersionCodec.frame), which applies these rules.

Request header v1 adds the (always non-compact, nullable) client id; v2 adds tagged fields and is used by
every flexible API version, except ControlledShutdown v0 (header v0). Response header v1 adds tagged fields,
except that ApiVersions responses always use v0 so that a client can parse the answer before it knows what the
broker supports.
"""

from __future__ import annotations

import struct

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
# api_key, api_version, correlation_id: the part of a request header every version has.
HEADER_FIXED = struct.Struct(">hhi")


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    """A client's request header, v1 (v2 when `flexible`)."""
    parts = [HEADER_FIXED.pack(api_key, api_version, correlation_id)]
    if client_id is None:
        parts.append(b"\xff\xff")
    else:
        data = client_id.encode()
        parts.append(len(data).to_bytes(2, "big") + data)
    if flexible:
        parts.append(b"\x00")
    return b"".join(parts)
