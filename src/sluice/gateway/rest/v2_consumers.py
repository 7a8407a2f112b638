"""v2 consumer instance API: /consumers/{group}[/instances/{instance}/...]."""

from __future__ import annotations

import asyncio
import binascii
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..query import bounded_int
from .context import context_of
from .errors import (
    ANY_EMBEDDED,
    NOT_ACCEPTABLE,
    RECORD_DESERIALIZATION_FAILED,
    V2_JSON,
    RestError,
    UndecodableRecord,
    check_accept,
    check_v2_content_type,
    int_field,
    json_response,
    read_json,
    require_object,
    unprocessable,
)
from .formats import PLAIN_FORMATS, check_supported, decode_field
from .instances import OFFSET_BEGINNING, OFFSET_END, ConsumerInstance, settings_from

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_NO_CONTENT = 204


def _no_content() -> web.Response:
    return web.Response(status=_NO_CONTENT)


def _check_accept(request: web.Request) -> None:
    check_accept(request, ANY_EMBEDDED)


async def _body(request: web.Request, *, required: bool = True) -> dict[str, Any] | None:
    check_v2_content_type(request, embedded=True)
    _check_accept(request)
    document = await read_json(request, required=required)
    return None if document is None else require_object(document)


def _instance(request: web.Request) -> ConsumerInstance:
    return context_of(request).instances.get(request.match_info["group"], request.match_info["instance"])


def _topic_partitions(body: dict[str, Any], key: str = "partitions") -> list[tuple[str, int]]:
    entries = body.get(key)
    if not isinstance(entries, list) or not entries:
        raise unprocessable(f"{key} must be a non-empty list of {{topic, partition}}")
    found = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or not entry["topic"]:
            raise unprocessable(f"{key}[{index}] needs a topic")
        found.append((entry["topic"], int_field(entry, "partition")))
    return found


def _offsets(body: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    entries = body.get("offsets")
    if not isinstance(entries, list) or not entries:
        raise unprocessable("offsets must be a non-empty list of {topic, partition, offset}")
    found = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or not entry["topic"]:
            raise unprocessable(f"offsets[{index}] needs a topic")
        metadata = entry.get("metadata") or ""
        if not isinstance(metadata, str):
            raise unprocessable(f"offsets[{index}].metadata must be a string")
        found.append((entry["topic"], int_field(entry, "partition"), int_field(entry, "offset"), metadata))
    return found


async def create(request: web.Request) -> web.StreamResponse:
    body = await _body(request, required=False) or {}
    group = request.match_info["group"]
    settings = settings_from(body, ("binary", "json", "avro", "protobuf", "jsonschema"))
    check_supported(settings.fmt, 406, context_of(request).schemas is not None)
    name = body.get("name", body.get("id"))
    if name is not None and not isinstance(name, str):
        raise unprocessable("name must be a string")
    instance = await context_of(request).instances.create(group, name, settings)
    scheme = request.headers.get("X-Forwarded-Proto", request.scheme)
    host = request.headers.get("X-Forwarded-Host", request.host)
    base_uri = f"{scheme}://{host}/consumers/{group}/instances/{instance.name}"
    return json_response({"instance_id": instance.name, "base_uri": base_uri})


async def delete(request: web.Request) -> web.StreamResponse:
    _check_accept(request)
    await context_of(request).instances.delete(request.match_info["group"], request.match_info["instance"])
    return _no_content()


async def subscribe(request: web.Request) -> web.StreamResponse:
    instance = _instance(request)
    body = await _body(request)
    assert body is not None
    topics, pattern = body.get("topics"), body.get("topic_pattern")
    if topics is None and pattern is None:
        raise unprocessable("give topics or topic_pattern")
    if topics is not None:
        pattern = None  # as Confluent's KafkaConsumerState: topics, when given, are what is subscribed
    if topics is not None and (
        not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics)
    ):
        raise unprocessable("topics must be a non-empty list of topic names")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise unprocessable("topic_pattern must be a non-empty string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise unprocessable(f"topic_pattern is not a valid regular expression: {exc}") from None
    await context_of(request).instances.subscribe(instance, topics or [], pattern or "")
    return _no_content()


async def subscription(request: web.Request) -> web.StreamResponse:
    _check_accept(request)
    topics = await context_of(request).instances.subscription(_instance(request))
    return json_response({"topics": topics})


async def unsubscribe(request: web.Request) -> web.StreamResponse:
    _check_accept(request)
    await context_of(request).instances.unsubscribe(_instance(request))
    return _no_content()


async def assign(request: web.Request) -> web.StreamResponse:
    instance = _instance(request)
    body = await _body(request)
    assert body is not None
    await context_of(request).instances.assign(instance, _topic_partitions(body))
    return _no_content()


async def assignments(request: web.Request) -> web.StreamResponse:
    _check_accept(request)
    held = await context_of(request).instances.assignment(_instance(request))
    return json_response({"partitions": [{"topic": t, "partition": p} for t, p in held]})


async def seek(request: web.Request) -> web.StreamResponse:
    instance = _instance(request)
    body = await _body(request)
    assert body is not None
    positions = [(t, p, o) for t, p, o, _ in _offsets(body)]
    await context_of(request).instances.seek(instance, positions)
    return _no_content()


async def seek_to(request: web.Request, where: int) -> web.StreamResponse:
    instance = _instance(request)
    body = await _body(request)
    assert body is not None
    positions = [(t, p, where) for t, p in _topic_partitions(body)]
    await context_of(request).instances.seek(instance, positions)
    return _no_content()


async def seek_beginning(request: web.Request) -> web.StreamResponse:
    return await seek_to(request, OFFSET_BEGINNING)


async def seek_end(request: web.Request) -> web.StreamResponse:
    return await seek_to(request, OFFSET_END)


def _query_int(request: web.Request, name: str, upper: int) -> int | None:
    try:
        return bounded_int(request.query, name, upper)
    except ValueError:
        raise unprocessable(f"{name} must be an integer between 0 and {upper}") from None


async def records(request: web.Request) -> web.StreamResponse:
    instance = _instance(request)
    fmt = instance.settings.fmt
    accept = request.headers.get("Accept", "")
    content_type = f"application/vnd.kafka.{fmt}.v2+json"
    if accept:
        wanted = [part.split(";")[0].strip().lower() for part in accept.split(",")]
        generic = {"*/*", "application/*", "application/json", V2_JSON, "application/vnd.kafka+json"}
        if content_type not in wanted and not generic.intersection(wanted):
            raise RestError(
                406,
                NOT_ACCEPTABLE,
                f"the consumer instance's format is {fmt}: the Accept header must allow {content_type}",
            )
    timeout = _query_int(request, "timeout", 300_000)
    max_bytes = _query_int(request, "max_bytes", DEFAULT_MAX_BYTES) or DEFAULT_MAX_BYTES
    instances = context_of(request).instances
    messages, generation = await instances.records(instance, timeout, max_bytes)
    response = web.Response(content_type=content_type)
    try:
        response.body, positions, delivered = await _records_json(request, fmt, messages)
        await response.prepare(request)
        await response.write_eof()
    except BaseException as exc:
        # The caller never got them (it went away, or they could not be encoded): they are handed out again.
        await instances.give_back(instance, messages, generation)
        if isinstance(exc, ConnectionError):
            log.info("records for %s/%s not delivered: %s", instance.group, instance.name, exc)
            return response
        raise
    # Records from the first undecodable one on are the next read's: it fails on that record, as the Java
    # consumer hands over the records before a bad one and raises on it at the next poll.
    await instances.give_back(instance, messages[delivered:], generation)
    await instances.confirm(instance, messages[:delivered], positions)
    return response


async def _records_json(
    request: web.Request, fmt: str, messages: list[Any]
) -> tuple[bytes, dict[tuple[str, int], int] | None, int]:
    """The answer; the last offset of each partition in it where the encoder saw them on its way; how many of
    `messages` it holds (those before the first that cannot be decoded in the instance's format)."""
    if fmt == "binary":
        return (*binary_records_json(messages), len(messages))
    if fmt in PLAIN_FORMATS:
        decoded = _decode_records(messages, lambda _message, field, data: decode_field(fmt, field, data))
    else:
        schemas = context_of(request).schemas
        assert schemas is not None
        decoded = await asyncio.to_thread(
            _decode_records,
            messages,
            lambda message, field, data: schemas.decode(fmt, message.topic(), field, data),
        )
    body = [
        {"topic": m.topic(), "key": key, "value": value, "partition": m.partition(), "offset": m.offset()}
        for m, (key, value) in zip(messages[: len(decoded)], decoded, strict=True)
    ]
    return json.dumps(body, separators=(",", ":"), default=_bytes_as_text).encode(), None, len(decoded)


def _decode_records(
    messages: list[Any], decode: Callable[[Any, str, bytes | None], Any]
) -> list[tuple[Any, Any]]:
    """Each record's decoded key and value, up to the first that cannot be decoded. That one, when it is the
    first, fails the read: 408 with error_code 40801, as Confluent's proxy answers a SerializationException,
    naming the partition and offset so that the caller can seek past it."""
    decoded: list[tuple[Any, Any]] = []
    for m in messages:
        try:
            decoded.append((decode(m, "key", m.key()), decode(m, "value", m.value())))
        except UndecodableRecord as exc:
            if decoded:
                break
            raise RestError(
                408,
                RECORD_DESERIALIZATION_FAILED,
                f"the record at offset {m.offset()} of partition {m.partition()} of {m.topic()} cannot be read: "
                f"{exc}",
            ) from None
    return decoded


def binary_records_json(messages: list[Any]) -> tuple[bytes, dict[tuple[str, int], int]]:
    """The binary-format answer, written directly: the hot path of a consumer, with no dict per record. One
    set of templates per run of records from the same partition, one for each way key and value may be null,
    so that a record is one formatting of its base64 text (which needs no JSON escaping) and offset. Also the
    last offset of each partition, noted where a run ends (what storing the consumed offsets needs)."""
    b2a = binascii.b2a_base64
    parts: list[bytes] = []
    append = parts.append
    last: dict[tuple[str, int], int] = {}
    # The run's topic and partition compared one by one (no tuple per record): a quarter of the cost.
    run_topic: str | None = None
    run_partition = offset = -1
    both = key_only = value_only = neither = b""
    for m in messages:
        topic, partition = m.topic(), m.partition()
        if partition != run_partition or topic != run_topic:
            if run_topic is not None:
                last[(run_topic, run_partition)] = offset
            run_topic, run_partition = topic, partition
            quoted = json.dumps(topic).encode().replace(b"%", b"%%")
            head, tail = b'{"topic":%s,"key":' % quoted, b',"partition":%d,"offset":%%d}' % partition
            both = head + b'"%s","value":"%s"' + tail
            key_only = head + b'"%s","value":null' + tail
            value_only = head + b'null,"value":"%s"' + tail
            neither = head + b'null,"value":null' + tail
        offset, key, value = m.offset(), m.key(), m.value()
        if key is None:
            if value is None:
                append(neither % offset)
            else:
                append(value_only % (b2a(value, newline=False), offset))
        elif value is None:
            append(key_only % (b2a(key, newline=False), offset))
        else:
            append(both % (b2a(key, newline=False), b2a(value, newline=False), offset))
    if run_topic is not None:
        last[(run_topic, run_partition)] = offset
    return _json_array(parts), last


def _json_array(parts: list[bytes]) -> bytes:
    """`[part,part,...]` in one allocation of the answer's size: adding the brackets to a joined megabyte
    copied it twice more (a third of the encoder's time in a micro-benchmark, where each copy went to fresh
    pages; in the gateway, which reuses freed answers' memory, consume CPU per record fell about 3%)."""
    if not parts:
        return b"[]"
    parts[0] = b"[" + parts[0]
    parts[-1] += b"]"
    return b",".join(parts)


def _bytes_as_text(value: Any) -> Any:
    """Avro bytes and fixed values, as Avro's JSON encoding writes them (one code point per byte)."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


async def commit(request: web.Request) -> web.StreamResponse:
    instance = _instance(request)
    body = await _body(request, required=False)
    offsets = _offsets(body) if body else None
    await context_of(request).instances.commit(instance, offsets)
    # Confluent's answer: its CommitOffsetsResponse, a list it never fills.
    return json_response([])


async def committed(request: web.Request) -> web.StreamResponse:
    instance = _instance(request)
    body = await _body(request)
    assert body is not None
    found = await context_of(request).instances.committed(instance, _topic_partitions(body))
    return json_response(
        {
            "offsets": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": tp.offset,
                    "metadata": tp.metadata or "",
                }
                for tp in found
            ]
        }
    )
