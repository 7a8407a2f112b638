"""v2 produce: POST /topics/{topic} and /topics/{topic}/partitions/{partition}.

The body is ``{"records": [{"key"?, "value", "partition"?}, ...]}`` in the embedded format the Content-Type
names; the answer lists, per record in order, its partition and offset or its error_code and error.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from ..errors import GatewayError
from ..service import failure_of
from .context import context_of
from .errors import (
    PARTITION_NOT_FOUND,
    SCHEMA_FORMATS,
    V2_JSON,
    RestError,
    check_accept,
    error_code_of,
    from_gateway_error,
    not_found,
    produce_format,
    read_json,
    require_object,
    unprocessable,
)
from .formats import check_supported, encode_field

MAX_RECORDS_PER_REQUEST = 100_000


Record = tuple[bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes]]]
_NO_HEADERS: tuple[tuple[str, bytes], ...] = ()


def parse_records(
    document: Any, fmt: str, fixed_partition: int | None, *, encode: bool = True
) -> list[Record]:
    body = require_object(document)
    records = body.get("records")
    if not isinstance(records, list) or not records:
        raise unprocessable("records must be a non-empty list")
    if len(records) > MAX_RECORDS_PER_REQUEST:
        raise RestError(413, 413, f"at most {MAX_RECORDS_PER_REQUEST} records per request")
    if fmt == "binary" and encode:
        try:
            parsed = _binary_records(records, fixed_partition)
        except (AttributeError, TypeError, ValueError):
            pass  # some record is malformed: the checks below name it
        else:
            if all(_valid_partition(p) for p in {p for _, _, p, _ in parsed}):
                return parsed
    parsed = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise unprocessable(f"records[{index}] must be an object")
        partition = record.get("partition", fixed_partition) if fixed_partition is None else fixed_partition
        if not _valid_partition(partition):
            raise unprocessable(f"records[{index}].partition must be a non-negative integer")
        # Schema formats are encoded later, all at once, by the registry's serializers.
        key = encode_field(fmt, record.get("key"), index, "key") if encode else None
        value = encode_field(fmt, record.get("value"), index, "value") if encode else None
        parsed.append((key, value, partition, _NO_HEADERS))
    return parsed


def _binary_records(records: list[Any], fixed_partition: int | None) -> list[Record]:
    """The binary format's records, in one pass with no per-record checks of its own (the hot path of a
    producer): whatever is malformed raises, and `parse_records` then finds and names it."""
    a2b = binascii.a2b_base64
    return [
        (
            None if (key := record.get("key")) is None else a2b(key, strict_mode=True),
            None if (value := record.get("value")) is None else a2b(value, strict_mode=True),
            record.get("partition") if fixed_partition is None else fixed_partition,
            _NO_HEADERS,
        )
        for record in records
    ]


def _valid_partition(partition: Any) -> bool:
    return partition is None or (type(partition) is int and partition >= 0)


async def produce(request: web.Request) -> web.StreamResponse:
    context = context_of(request)
    topic = request.match_info["topic"]
    raw_partition = request.match_info.get("partition")
    fixed_partition = int(raw_partition) if raw_partition is not None else None
    fmt = produce_format(request)
    check_accept(request)
    check_supported(fmt, 415, context.schemas is not None)
    # The binary format's numbers are partitions: orjson may read them (a huge one becomes a float, refused).
    document = await read_json(request, fast=fmt == "binary")
    key_schema_id = value_schema_id = None
    if fmt in SCHEMA_FORMATS:
        assert context.schemas is not None
        records = parse_records(document, "binary", fixed_partition, encode=False)
        await context.admin.topic(topic)
        encoded, key_schema_id, value_schema_id = await context.schemas.encode(
            fmt, topic, document, document["records"]
        )
        records = [(k, v, p, h) for (k, v), (_, _, p, h) in zip(encoded, records, strict=True)]
    else:
        records = parse_records(document, fmt, fixed_partition)
    count = len((await context.admin.topic(topic)).partitions)
    if any(p is not None and p >= count for p in {p for _, _, p, _ in records}):
        index, partition = next(
            (i, r[2]) for i, r in enumerate(records) if r[2] is not None and r[2] >= count
        )
        raise not_found(PARTITION_NOT_FOUND, f"records[{index}]: partition {partition} of {topic} not found.")
    try:
        results = await context.producer.enqueue_many(topic, records, count)
    except Exception as exc:
        raise from_gateway_error(failure_of(exc)) from None
    return web.Response(body=produce_answer(key_schema_id, value_schema_id, results), content_type=V2_JSON)


def produce_answer(
    key_schema_id: int | None, value_schema_id: int | None, results: list[tuple[int, int] | GatewayError]
) -> bytes:
    """The answer, one entry per record in order; written directly, as it is on every produce's path."""
    entries = []
    for result in results:
        if isinstance(result, tuple):
            entries.append(b'{"partition":%d,"offset":%d,"error_code":null,"error":null}' % result)
        else:
            failed = {
                "partition": None,
                "offset": None,
                "error_code": error_code_of(result),
                "error": result.message,
            }
            entries.append(json.dumps(failed, separators=(",", ":")).encode())
    ids = json.dumps(
        {"key_schema_id": key_schema_id, "value_schema_id": value_schema_id}, separators=(",", ":")
    )
    return ids[:-1].encode() + b',"offsets":[' + b",".join(entries) + b"]}"
