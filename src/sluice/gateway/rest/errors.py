"""Confluent REST Proxy errors, content types and JSON bodies.

v2 answers errors as ``{"error_code": <5-digit code>, "message": ...}`` where the code is the HTTP status
times 100 plus a sub-code (40401 unknown topic, 40403 unknown consumer instance, ...); v3 answers
``{"error_code": <HTTP status>, "message": ...}``, except for the errors Confluent's v3 answers with its own
five-digit code (`v3_code`: 422xx for schemas and records that cannot be serialized). Every failure the
handlers raise is a `RestError`; the middleware in `app.py` turns anything else into a 500 with a message, never a traceback.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from aiohttp import web

from ..errors import Failure, GatewayError

V2_JSON = "application/vnd.kafka.v2+json"
V3_JSON = "application/json"
# Embedded formats a v2 request or answer names in its content type: application/vnd.kafka.<format>.v2+json.
EMBEDDED_FORMATS = ("binary", "json", "avro", "protobuf", "jsonschema")
SCHEMA_FORMATS = frozenset({"avro", "protobuf", "jsonschema"})

# Sub-codes (HTTP status * 100 + n), as Confluent's REST Proxy documents them.
TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
CONSUMER_INSTANCE_NOT_FOUND = 40403
NOT_ACCEPTABLE = 40601
# A consumed record that cannot be deserialized in the instance's format: Confluent's proxy maps Kafka's
# SerializationException to 408 with this code (KafkaRestExceptionMapper), whatever its cause.
RECORD_DESERIALIZATION_FAILED = 40801
CONSUMER_ALREADY_SUBSCRIBED = 40901
CONSUMER_ALREADY_EXISTS = 40902
KEY_SCHEMA_MISSING = 42201
VALUE_SCHEMA_MISSING = 42202
INVALID_CONSUMER_CONFIG = 42204
INVALID_PAYLOAD = 42206
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003


class RestError(Exception):
    """An answer other than 2xx: its HTTP status, Confluent error code and message."""

    def __init__(self, status: int, code: int, message: str, v3_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.v3_code = v3_code

    @property
    def v3_error_code(self) -> int:
        return self.v3_code or self.status


class UndecodableRecord(ValueError):
    """A consumed key or value that is not a record of the consumer instance's format."""


def unprocessable(message: str, code: int = 422) -> RestError:
    return RestError(422, code, message)


def bad_request(message: str) -> RestError:
    return RestError(400, 400, message)


def bad_record(message: str) -> RestError:
    """A record Confluent's serializers refuse (binary data that is not base64, a value its schema does not
    take): its BadRequestException, 400 with `error_code` 400, "Bad Request: <detail>" (V2ExceptionMapper)."""
    return RestError(400, 400, f"Bad Request: {message}")


def not_found(code: int, message: str) -> RestError:
    return RestError(404, code, message)


def kafka_error(message: str) -> RestError:
    return RestError(500, KAFKA_ERROR, message)


_STATUS_OF_FAILURE = {
    Failure.INVALID_ARGUMENT: (400, 400),
    Failure.NOT_FOUND: (404, TOPIC_NOT_FOUND),
    Failure.LONG_POLL_TIMEOUT: (408, 408),
    Failure.TOO_MANY_REQUESTS: (429, 429),
    Failure.UNAVAILABLE: (503, KAFKA_RETRIABLE_ERROR),
    Failure.TOO_LARGE: (413, 413),
    Failure.INTERNAL: (500, KAFKA_ERROR),
    Failure.DATA_LOSS: (500, KAFKA_ERROR),
}


def from_gateway_error(error: GatewayError) -> RestError:
    status, code = _STATUS_OF_FAILURE[error.failure]
    return RestError(status, code, error.message)


def error_code_of(error: GatewayError) -> int:
    """The per-record error_code of a produce answer."""
    return _STATUS_OF_FAILURE[error.failure][1]


def json_response(body: Any, status: int = 200, content_type: str = V2_JSON) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), status=status, content_type=content_type
    )


def error_body(error: RestError, v3: bool = False) -> bytes:
    """Confluent's error body: `{"error_code": ..., "message": ...}` (v3's code is the HTTP status)."""
    code = error.v3_error_code if v3 else error.code
    return json.dumps({"error_code": code, "message": error.message}, separators=(",", ":")).encode()


def error_response(error: RestError, v3: bool) -> web.Response:
    return web.Response(
        body=error_body(error, v3), status=error.status, content_type=V3_JSON if v3 else V2_JSON
    )


async def read_json(request: web.Request, *, required: bool = True) -> Any:
    """The request's JSON body; a missing one is 422, a malformed one 400."""
    raw = await request.read()
    if not raw and not required:
        return None
    return parse_body(raw)


def parse_body(raw: bytes) -> Any:
    """A JSON request body as Python's json module reads it. A missing one is 422; a malformed one is 400, as
    Confluent's JsonParseExceptionMapper answers it (v2 and v3 alike)."""
    if not raw:
        raise unprocessable("request body is missing")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"malformed JSON body: {exc}") from None


def require_object(document: Any, what: str = "request body") -> dict[str, Any]:
    # JSON of another shape than the entity is Jackson's JsonMappingException: Confluent answers 400.
    if not isinstance(document, dict):
        raise bad_request(f"{what} must be a JSON object")
    return document


def int_field(document: dict[str, Any], name: str, *, default: int | None = None, minimum: int = 0) -> int:
    value = document.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise unprocessable(f"{name} must be an integer >= {minimum}")
    return value


def str_field(document: dict[str, Any], name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise unprocessable(f"{name} must be a non-empty string")
    return value


@functools.lru_cache(maxsize=256)  # a client sends the same Accept header with every request
def _media_types(header: str) -> frozenset[str]:
    return frozenset(part.split(";")[0].strip().lower() for part in header.split(",") if part.strip())


def embedded_format_of(content_type: str) -> str | None:
    """'binary' for application/vnd.kafka.binary.v2+json; None for a type naming no embedded format."""
    if not content_type.startswith("application/vnd.kafka.") or not content_type.endswith("+json"):
        return None
    middle = content_type[len("application/vnd.kafka.") : -len("+json")]
    parts = middle.split(".")
    if len(parts) == 2 and parts[1] in ("v2", "v1"):
        return parts[0]
    return None


def produce_format(request: web.Request) -> str:
    """The embedded format a v2 produce request's Content-Type names (415 if it names none we know)."""
    content_type = request.content_type.lower()
    found = embedded_format_of(content_type)
    if found is None or found not in EMBEDDED_FORMATS:
        raise RestError(
            415,
            415,
            f"unsupported Content-Type {content_type!r}: expected application/vnd.kafka."
            "{binary,json,avro,protobuf,jsonschema}.v2+json",
        )
    return found


# Confluent's consumer resource takes and answers every embedded format's type besides the plain v2 one
# (its @Consumes/@Produces), so a client may send one content type with all its calls.
EMBEDDED_TYPES = frozenset(f"application/vnd.kafka.{fmt}.v2+json" for fmt in EMBEDDED_FORMATS)
ANY_EMBEDDED = "*"
_V2_BODY_TYPES = frozenset(
    {V2_JSON, "application/vnd.kafka+json", "application/json", "application/octet-stream"}
)


def check_v2_content_type(request: web.Request, *, embedded: bool = False) -> None:
    """Bodies of the consumer and metadata calls are application/vnd.kafka.v2+json (or plain JSON); the
    consumer calls (`embedded`) also take application/vnd.kafka.<format>.v2+json, as Confluent's do."""
    if not request.body_exists:
        return
    content_type = request.content_type.lower()
    if content_type not in _V2_BODY_TYPES and not (embedded and content_type in EMBEDDED_TYPES):
        raise RestError(415, 415, f"unsupported Content-Type {content_type!r}: expected {V2_JSON}")


_ALWAYS_ACCEPTABLE = frozenset(
    {V2_JSON, "application/vnd.kafka+json", "application/json", "*/*", "application/*"}
)


def acceptable(header: str, embedded: str | None = None) -> bool:
    """Whether an Accept header allows the answer (a v2 JSON type, or the embedded one asked for; any
    embedded format's for ANY_EMBEDDED)."""
    types = _media_types(header)
    if not types.isdisjoint(_ALWAYS_ACCEPTABLE):
        return True
    if embedded == ANY_EMBEDDED:
        return not types.isdisjoint(EMBEDDED_TYPES)
    return embedded is not None and f"application/vnd.kafka.{embedded}.v2+json" in types


def check_accept(request: web.Request, embedded: str | None = None) -> None:
    """406/40601 unless the Accept header allows the answer (a v2 JSON type, or the embedded one asked for)."""
    header = request.headers.get("Accept", "")
    if not header or acceptable(header, embedded):
        return
    raise RestError(406, NOT_ACCEPTABLE, f"none of the accepted types {header!r} can be served here")
