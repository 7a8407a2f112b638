"""v2 produce: POST /topics/{topic} and /topics/{topic}/partitions/{partition}.

The body is ``{"records": [{"key"?, "value", "partition"?}, ...]}`` in the embedded format the Content-Type
names; the answer lists, per record in order, its partition and offset or its error_code and error.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
from aiohttp import web

from ..batch_writer import Record, Written
from ..errors import GatewayError
from ..service import failure_of
from .context import RestContext, context_of
from .errors import (
    PARTITION_NOT_FOUND,
    SCHEMA_FORMATS,
    V2_JSON,
    RestError,
    bad_request,
    check_accept,
    error_code_of,
    from_gateway_error,
    not_found,
    parse_body,
    produce_format,
    require_object,
    unprocessable,
)
from .formats import check_supported, encode_field

MAX_RECORDS_PER_REQUEST = 100_000
# Kafka's partition ids are int32s: a larger one is malformed input, not a partition that does not exist.
MAX_PARTITION = 2**31 - 1


_NO_HEADERS: tuple[tuple[str, bytes], ...] = ()


# The fields of Confluent's ProduceRequest and of its records: any other is refused by name (422, as Jackson's
# unrecognized property is there), never read as a record without a key or value.
BODY_FIELDS = frozenset({"records", "key_schema", "key_schema_id", "value_schema", "value_schema_id"})
RECORD_FIELDS = frozenset({"key", "value", "partition"})


def check_fields(document: dict[str, Any], known: frozenset[str]) -> None:
    for name in document:
        if name not in known:
            raise unprocessable(f"Unrecognized field: {name}")


def parse_records(
    document: Any, fmt: str, fixed_partition: int | None, *, encode: bool = True
) -> list[Record]:
    body = require_object(document)
    check_fields(body, BODY_FIELDS)
    records = body.get("records")
    if records is not None and not isinstance(records, list):
        raise bad_request("records must be a list")  # Jackson's mapping error (400); an empty list is a 422
    if not records:
        raise unprocessable("records must be a non-empty list")
    if len(records) > MAX_RECORDS_PER_REQUEST:
        raise RestError(413, 413, f"at most {MAX_RECORDS_PER_REQUEST} records per request")
    parsed = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise bad_request(f"records[{index}] must be an object")
        check_fields(record, RECORD_FIELDS)
        partition = record.get("partition", fixed_partition) if fixed_partition is None else fixed_partition
        if not _valid_partition(partition):
            raise unprocessable(f"records[{index}].partition must be an integer from 0 to {MAX_PARTITION}")
        # Schema formats are encoded later, all at once, by the registry's serializers.
        key = encode_field(fmt, record.get("key"), index, "key") if encode else None
        value = encode_field(fmt, record.get("value"), index, "value") if encode else None
        parsed.append((key, value, partition, _NO_HEADERS))
    return parsed


class _BinaryRecord(msgspec.Struct, forbid_unknown_fields=True):
    key: bytes | None = None
    value: bytes | None = None
    partition: Annotated[int, msgspec.Meta(ge=0, le=MAX_PARTITION)] | None = None


class _BinaryBody(msgspec.Struct, forbid_unknown_fields=True):
    records: list[_BinaryRecord]


# msgspec decodes base64 strings into bytes as strictly as binascii's strict mode (padding required, no
# whitespace or other alphabets), and refuses a partition that is not a non-negative integer (true, 1.0).
_read_binary_body = msgspec.json.Decoder(_BinaryBody).decode


class _BinaryValue(msgspec.Struct, forbid_unknown_fields=True):
    """A record that is a value and nothing else: no key, no partition (the decode stops at the first field
    that is not its value)."""

    value: bytes


class _BinaryValuesBody(msgspec.Struct, forbid_unknown_fields=True):
    records: list[_BinaryValue]


_read_binary_values = msgspec.json.Decoder(_BinaryValuesBody).decode


def binary_values(raw: bytes) -> list[bytes] | None:
    """The values of a binary body whose records are each a value alone (not null), or None."""
    try:
        records = _read_binary_values(raw).records
    except msgspec.DecodeError:
        return None
    if not records or len(records) > MAX_RECORDS_PER_REQUEST:
        return None
    return [record.value for record in records]


def binary_records(raw: bytes, fixed_partition: int | None) -> list[Record] | None:
    """The binary format's records, read, decoded and checked in one pass in C (the hot path of a producer),
    or None for any body that is not well-formed and within the limits: `parse_records` then reads it as
    every format is read, and names what is wrong."""
    try:
        records = _read_binary_body(raw).records
    except msgspec.DecodeError:  # malformed JSON, or a field of the wrong type (ValidationError)
        return None
    if not records or len(records) > MAX_RECORDS_PER_REQUEST:
        return None
    if fixed_partition is not None:
        return [(r.key, r.value, fixed_partition, _NO_HEADERS) for r in records]
    return [(r.key, r.value, r.partition, _NO_HEADERS) for r in records]


def _valid_partition(partition: Any) -> bool:
    return partition is None or (type(partition) is int and 0 <= partition <= MAX_PARTITION)


async def produce(request: web.Request) -> web.StreamResponse:
    context = context_of(request)
    topic = request.match_info["topic"]
    raw_partition = request.match_info.get("partition")
    fixed_partition = int(raw_partition) if raw_partition is not None else None
    fmt = produce_format(request)
    check_accept(request)
    check_supported(fmt, 415, context.schemas is not None)
    key_schema_id = value_schema_id = None
    raw = await request.read()
    if fmt == "binary" and context.writer is not None and (values := binary_values(raw)) is not None:
        return await _produce_values(context, topic, fixed_partition, values)
    fast = binary_records(raw, fixed_partition) if fmt == "binary" else None
    if fast is not None:
        records = fast
    elif fmt in SCHEMA_FORMATS:
        document = parse_body(raw)
        assert context.schemas is not None
        records = parse_records(document, "binary", fixed_partition, encode=False)
        await context.admin.topic(topic)
        encoded, key_schema_id, value_schema_id = await context.schemas.encode(
            fmt, topic, document, document["records"]
        )
        records = [(k, v, p, h) for (k, v), (_, _, p, h) in zip(encoded, records, strict=True)]
    else:
        records = parse_records(parse_body(raw), fmt, fixed_partition)
    count = await _partition_count(context, topic)
    if any(p is not None and p >= count for p in {p for _, _, p, _ in records}):
        index, partition = next(
            (i, r[2]) for i, r in enumerate(records) if r[2] is not None and r[2] >= count
        )
        raise not_found(PARTITION_NOT_FOUND, f"records[{index}]: partition {partition} of {topic} not found.")
    results: Written | list[tuple[int, int] | GatewayError]
    try:
        if context.writer is not None:
            results = await context.writer.write(topic, records, count)
        else:
            results = await context.producer.enqueue_many(topic, records, count)
    except Exception as exc:
        raise from_gateway_error(failure_of(exc)) from None
    return web.Response(body=produce_answer(key_schema_id, value_schema_id, results), content_type=V2_JSON)


async def _produce_values(
    context: RestContext, topic: str, fixed_partition: int | None, values: list[bytes]
) -> web.StreamResponse:
    """`produce` of a binary body whose records are each a value alone, through the batch writer."""
    assert context.writer is not None
    count = await _partition_count(context, topic)
    if fixed_partition is not None and fixed_partition >= count:
        raise not_found(PARTITION_NOT_FOUND, f"records[0]: partition {fixed_partition} of {topic} not found.")
    return web.Response(
        body=await write_values(context, topic, fixed_partition, values, count), content_type=V2_JSON
    )


async def write_values(
    context: RestContext, topic: str, partition: int | None, values: list[bytes], count: int
) -> bytes:
    """The answer to a produce of values alone, written through the batch writer (the handler's and the
    produce front's); a failure of the whole call is a RestError, as the REST middleware answers it."""
    assert context.writer is not None
    try:
        results = await context.writer.write_values(topic, values, partition, count)
    except Exception as exc:
        raise from_gateway_error(failure_of(exc)) from None
    return produce_answer(None, None, results)


async def _partition_count(context: RestContext, topic: str) -> int:
    return len((await context.admin.topic(topic)).partitions)


_SCHEMALESS_HEAD = b'{"key_schema_id":null,"value_schema_id":null,"offsets":['


def produce_answer(
    key_schema_id: int | None,
    value_schema_id: int | None,
    results: Written | list[tuple[int, int] | GatewayError],
) -> bytes:
    """The answer, one entry per record in order; written directly, as it is on every produce's path."""
    if key_schema_id is None and value_schema_id is None:
        head = _SCHEMALESS_HEAD
    else:
        ids = {"key_schema_id": key_schema_id, "value_schema_id": value_schema_id}
        head = json.dumps(ids, separators=(",", ":"))[:-1].encode() + b',"offsets":['
    if isinstance(results, Written):
        # One partition's offsets: the entries differ only in their offset, joined in one C call.
        entry = f'{{"partition":{results.partition},"offset":'
        between = ',"error_code":null,"error":null},' + entry
        offsets = between.join(map(str, results.offsets))
        return head + (entry + offsets + ',"error_code":null,"error":null}]}').encode()
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
    return head + b",".join(entries) + b"]}"
