"""Embedded formats: how a v2 record's key and value travel in JSON.

binary: base64 text; json: any JSON value (written as its UTF-8 JSON text). The schema formats (avro,
jsonschema, protobuf; `schemas.py`) need a schema registry; without one configured they are refused with a
clear 415/406.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from .errors import SCHEMA_FORMATS, RestError, UndecodableRecord, bad_record

PLAIN_FORMATS = ("binary", "json")


def schema_formats_unavailable(fmt: str, status: int) -> RestError:
    return RestError(
        status,
        status * 100 + 1 if status == 406 else 415,
        f"embedded format {fmt!r} needs a schema registry, and this gateway has none configured "
        "(only binary and json are served)",
    )


def check_supported(fmt: str, status: int, with_registry: bool = False) -> None:
    if fmt in SCHEMA_FORMATS:
        if not with_registry:
            raise schema_formats_unavailable(fmt, status)
        return
    if fmt not in PLAIN_FORMATS:
        raise RestError(
            status, status * 100 + 1 if status == 406 else 415, f"unknown embedded format {fmt!r}"
        )


def encode_field(fmt: str, value: Any, index: int, what: str) -> bytes | None:
    """A record's key or value as bytes; None stays None (a null key or tombstone)."""
    if value is None:
        return None
    if fmt == "binary":
        if not isinstance(value, str):
            raise bad_record(f"records[{index}].{what}: binary data must be a base64 string")
        try:
            # strict_mode: only the base64 alphabet and right padding, as b64decode(validate=True) but cheaper.
            return binascii.a2b_base64(value, strict_mode=True)
        except (binascii.Error, ValueError):
            raise bad_record(f"records[{index}].{what}: not valid base64") from None
    return json.dumps(value, separators=(",", ":")).encode()


def decode_field(fmt: str, field: str, data: bytes | None) -> Any:
    """A consumed key or value: binary as base64 text, json parsed. Bytes that are not JSON are not a record of
    the json format (Confluent's proxy fails the read, as its JSON deserializer does, rather than hand over
    text a caller could not tell from a JSON string)."""
    if data is None:
        return None
    if fmt == "binary":
        return base64.b64encode(data).decode("ascii")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UndecodableRecord(f"{field} deserialization error for format {fmt}: {exc}") from None
