"""v3 produce: POST /v3/clusters/{cluster}/topics/{topic}/records, and .../records:batch.

A body holding one JSON record gets one answer whose HTTP status is the outcome. A chunked body (or one holding
several concatenated records) is the streaming form: each record is produced as soon as it has been read and
its answer — with its own ``error_code`` — is streamed back, one JSON object per line, in order. A client that
goes away halfway keeps what was produced before; nothing after the last complete record is produced.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ..errors import GatewayError
from ..service import failure_of
from .context import MAX_BODY_BYTES, RestContext, context_of
from .errors import INVALID_PAYLOAD, V3_JSON, RestError, bad_request, from_gateway_error, json_response
from .v3_common import body_object, cluster_id
from .v3_schema_data import SCHEMA_FIELDS, needs_schema

log = logging.getLogger(__name__)

_DECODER = json.JSONDecoder()
# Records of one stream being produced at once (their answers wait for the earliest).
STREAM_WINDOW = 1000
# Records one records:batch request may carry (Confluent's api.v3.produce.batch.maximum.entries default), and
# the code Confluent's answer names when a batch is refused whole.
BATCH_ENTRIES = 10
BATCH_REFUSED = 42208
Record = tuple[bytes | None, bytes | None, int | None, list[tuple[str, bytes]]]


def _data(document: Any, where: str) -> tuple[bytes | None, str, int]:
    """A key or value object {"type": BINARY|JSON|STRING, "data": ...}: its bytes, type and size."""
    if document is None:
        return None, "", 0
    if not isinstance(document, dict):
        raise RestError(400, 400, f"{where} must be an object with type and data")
    kind = str(document.get("type") or "JSON").upper()
    if document.get("type") is not None and (
        named := [f for f in SCHEMA_FIELDS if document.get(f) is not None]
    ):
        raise RestError(400, 400, f"{where}.type {kind} takes no schema: {', '.join(named)} not allowed")
    data = document.get("data")
    if data is None:
        return None, kind, 0
    if kind == "BINARY":
        if not isinstance(data, str):
            raise RestError(400, 400, f"{where}.data: BINARY data must be a base64 string")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise RestError(400, 400, f"{where}.data: not valid base64") from None
    elif kind == "STRING":
        if not isinstance(data, str):
            raise RestError(400, 400, f"{where}.data: STRING data must be a string")
        raw = data.encode()
    elif kind == "JSON":
        raw = json.dumps(data, separators=(",", ":")).encode()
    else:
        raise RestError(
            400,
            400,
            f"{where}.type {kind} is not served: BINARY, JSON and STRING are, and AVRO, JSONSCHEMA and PROTOBUF "
            "with a schema registry (--schema-registry)",
        )
    return raw, kind, len(raw)


def parse_record(document: Any) -> tuple[Record, dict[str, Any]]:
    """The record to produce and what its answer reports about key and value."""
    if not isinstance(document, dict):
        raise RestError(400, 400, "a record must be a JSON object")
    partition = document.get("partition_id")
    if partition is not None and (
        not isinstance(partition, int) or isinstance(partition, bool) or partition < 0
    ):
        raise RestError(400, 400, "partition_id must be a non-negative integer")
    headers: list[tuple[str, bytes]] = []
    for index, header in enumerate(document.get("headers") or []):
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise RestError(400, 400, f"headers[{index}] needs a name")
        value, _, _ = _data({"type": "BINARY", "data": header.get("value")}, f"headers[{index}].value")
        headers.append((header["name"], value or b""))
    key, key_type, key_size = _data(document.get("key"), "key")
    value, value_type, value_size = _data(document.get("value"), "value")
    described = {
        "key": {"type": key_type, "size": key_size} if key_type else None,
        "value": {"type": value_type, "size": value_size} if value_type else None,
    }
    return (key, value, partition, headers), described


def _failed(error: RestError) -> tuple[int, dict[str, Any]]:
    return error.status, {"error_code": error.v3_error_code, "message": error.message}


def _settled(answer: tuple[int, dict[str, Any]]) -> asyncio.Future[tuple[int, dict[str, Any]]]:
    future: asyncio.Future[tuple[int, dict[str, Any]]] = asyncio.get_running_loop().create_future()
    future.set_result(answer)
    return future


async def start_record(
    context: RestContext, cluster: str, topic: str, document: Any
) -> asyncio.Future[tuple[int, dict[str, Any]]]:
    """Check one record and hand it to the producer: records started one after another keep their order.
    The future is its answer: HTTP status and body."""
    if isinstance(document, RestError):
        return _settled(_failed(document))
    try:
        schema_described: dict[str, Any] = {}
        if needs_schema(document):
            if context.schema_data is None:  # as Confluent's: 422 with 42206
                raise RestError(
                    422,
                    INVALID_PAYLOAD,
                    "a key or value names a schema: Schema Registry must be configured when using schemas "
                    "(--schema-registry)",
                    INVALID_PAYLOAD,
                )
            document, schema_described = await context.schema_data.encode(topic, document)
        record, described = parse_record(document)
        described.update(schema_described)
        if record[2] is not None:
            await context.admin.partition(topic, record[2])
        delivered = context.producer.enqueue_many(
            topic, [record], await context.producer.partition_count(topic)
        )
    except RestError as error:
        return _settled(_failed(error))
    except Exception as exc:  # the producer's own failures
        return _settled(_failed(from_gateway_error(failure_of(exc))))
    return asyncio.ensure_future(_answer(delivered, cluster, topic, described))


async def _answer(
    delivered: asyncio.Future[list[tuple[int, int] | GatewayError]],
    cluster: str,
    topic: str,
    described: dict[str, Any],
) -> tuple[int, dict[str, Any]]:
    (result,) = await delivered
    if isinstance(result, GatewayError):
        return _failed(from_gateway_error(result))
    partition, offset = result
    return 200, {
        "error_code": 200,
        "cluster_id": cluster,
        "topic_name": topic,
        "partition_id": partition,
        "offset": offset,
        **described,
    }


async def _documents(request: web.Request) -> AsyncIterator[Any]:
    limit = request.app[MAX_BODY_BYTES]
    """Each complete JSON value of the body as it arrives; a malformed one is yielded as a RestError."""
    pending = ""
    # Incremental: a character split between two chunks is decoded once both have come.
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    async for chunk in request.content.iter_any():
        text = decoder.decode(chunk)
        pending += text
        if "}" not in text and len(pending) <= limit:
            continue  # a record is an object: none can have ended in this chunk (and no re-parse of a long one)
        while True:
            pending = pending.lstrip()
            if not pending:
                break
            try:
                document, end = _DECODER.raw_decode(pending)
            except ValueError:
                if len(pending) > limit:
                    yield RestError(413, 413, f"a record exceeds {limit} bytes")
                    return
                break  # incomplete: wait for more
            pending = pending[end:]
            yield document
    if pending.strip():
        yield RestError(400, 400, "the body ends inside a record (malformed JSON)")


async def produce_records(request: web.Request) -> web.StreamResponse:
    cluster = await cluster_id(request)
    context = context_of(request)
    topic = request.match_info["topic"]
    await context.admin.topic(topic)
    content_type = request.content_type.lower()
    if request.body_exists and content_type not in ("application/json", "application/octet-stream"):
        raise RestError(415, 415, f"unsupported Content-Type {content_type!r}: expected application/json")
    streaming = request.content_length is None
    # The body is read here, not by aiohttp's read(): its size limit is checked here too.
    limit = request.app[MAX_BODY_BYTES]
    if request.content_length is not None and request.content_length > limit:
        raise RestError(413, 413, f"request body of {request.content_length} bytes exceeds {limit}")
    if not streaming:
        documents = [d async for d in _documents(request)]
        if not documents:
            raise RestError(400, 400, "the body holds no record")
        if len(documents) == 1:
            if isinstance(documents[0], RestError):
                raise documents[0]
            status, body = await (await start_record(context, cluster, topic, documents[0]))
            return web.Response(
                body=json.dumps(body, separators=(",", ":")).encode(), status=status, content_type=V3_JSON
            )
    response = web.StreamResponse(status=200)
    response.content_type = V3_JSON
    await response.prepare(request)
    # Records are produced as they arrive, up to STREAM_WINDOW at a time; a writer sends each answer back, in
    # order, as soon as its record is settled.
    pending: asyncio.Queue[asyncio.Future[tuple[int, dict[str, Any]]] | None] = asyncio.Queue(STREAM_WINDOW)
    started: list[asyncio.Future[tuple[int, dict[str, Any]]]] = []

    async def write_answers() -> None:
        while (task := await pending.get()) is not None:
            _, body = await task
            await response.write(json.dumps(body, separators=(",", ":")).encode() + b"\n")

    writer = asyncio.ensure_future(write_answers())
    try:
        source = _documents(request) if streaming else _iterate(documents)
        async for document in source:
            if writer.done():
                break  # the answers cannot be sent any more: the caller is gone
            started.append(await start_record(context, cluster, topic, document))
            await pending.put(started[-1])
        await pending.put(None)
        await writer
        await response.write_eof()
    except (ConnectionError, web.HTTPException) as exc:
        log.info("records stream to %s ended early: %s", topic, exc)
    except Exception as exc:  # aiohttp's ClientPayloadError when the client aborts its chunked body
        log.info("records stream to %s ended early: %s: %s", topic, type(exc).__name__, exc)
    finally:
        writer.cancel()
        # Records already handed to the producer are written whether or not their answer can still be sent.
        await asyncio.gather(writer, *started, return_exceptions=True)
    return response


async def produce_batch(request: web.Request) -> web.StreamResponse:
    """POST .../records:batch {"entries": [{"id", ...record}]}: up to BATCH_ENTRIES records with distinct ids,
    each produced as one of .../records; 207 with their `successes` and `failures` (by id), as Confluent's."""
    cluster = await cluster_id(request)
    context = context_of(request)
    topic = request.match_info["topic"]
    body = await body_object(request)
    await context.admin.topic(topic)
    entries = body.get("entries")
    if not isinstance(entries, list):
        raise bad_request("entries must be a list of records, each with an id")
    ids: list[str] = []
    for index, entry in enumerate(entries):
        entry_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(entry_id, str) or not 1 <= len(entry_id) <= 80:
            raise _batch_refused(f"entries[{index}].id: Batch entry identifier is not a valid string.")
        ids.append(entry_id)
    if len(set(ids)) != len(ids):
        raise _batch_refused("Batch entry IDs are not distinct.")
    if not entries:
        raise _batch_refused("Empty batch.")
    if len(entries) > BATCH_ENTRIES:
        raise _batch_refused(f"Too many entries in batch (at most {BATCH_ENTRIES}).")
    started = [
        await start_record(context, cluster, topic, {k: v for k, v in entry.items() if k != "id"})
        for entry in entries
    ]
    successes, failures = [], []
    for entry_id, (status, answered) in zip(ids, await asyncio.gather(*started), strict=True):
        if status == 200:
            successes.append({"id": entry_id, **{k: v for k, v in answered.items() if k != "error_code"}})
        else:
            failures.append({"id": entry_id, **answered})
    return json_response({"successes": successes, "failures": failures}, 207, V3_JSON)


def _batch_refused(message: str) -> RestError:
    """Confluent's answer to a batch it will not take apart: 422, `Error: 42208 : ...`."""
    return RestError(422, 422, f"Error: {BATCH_REFUSED} : {message}")


async def _iterate(documents: list[Any]) -> AsyncIterator[Any]:
    for document in documents:
        yield document


ROUTES = [
    ("POST", "/v3/clusters/{cluster}/topics/{topic}/records", produce_records),
    ("POST", "/v3/clusters/{cluster}/topics/{topic}/records:batch", produce_batch),
]
