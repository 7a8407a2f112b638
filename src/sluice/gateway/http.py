"""HTTP+JSON API with kafka-pixy's paths, parameters, bodies and status codes.

Every topic route exists twice: as is (default cluster) and under
``/clusters/{cluster}``. Record headers travel as ``X-Kafka-<name>`` request
headers with base64 values when producing, and as a ``headers`` list of
``{"key", "value"(base64)}`` when consuming.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .batches import Delivery
from .errors import Failure, GatewayError, invalid
from .kafka import TopicInfo
from .query import bounded_int
from .service import AckRequest, GatewayService, failure_of
from .sparse_acks import sparse_acks_to_str

HTTP_STATUS_OF_FAILURE = {
    Failure.INVALID_ARGUMENT: 400,
    Failure.NOT_FOUND: 404,
    Failure.LONG_POLL_TIMEOUT: 408,
    Failure.TOO_MANY_REQUESTS: 429,
    Failure.UNAVAILABLE: 503,
    Failure.TOO_LARGE: 413,
    Failure.INTERNAL: 500,
    Failure.DATA_LOSS: 500,
}
HEADER_PREFIX = "X-Kafka-"
_SERVICE_KEY = web.AppKey("gateway_service", GatewayService)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body, indent=2), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _single_param(request: web.Request, name: str, optional: bool = False) -> str:
    values = request.query.getall(name, [])
    if len(values) > 1 or (not optional and not values):
        raise invalid(f"one {name} parameter is expected, but {len(values)} provided")
    return values[0] if values else ""


def _int_param(request: web.Request, name: str, upper: int) -> int | None:
    try:
        return bounded_int(request.query, name, upper)
    except ValueError:
        raise invalid(f"bad {name}: {request.query.get(name)}") from None


def _ack_from(request: web.Request, partition_name: str, offset_name: str) -> AckRequest | None:
    partition = _int_param(request, partition_name, 2**31 - 1)
    offset = _int_param(request, offset_name, 2**63 - 1)
    if partition is None and offset is None:
        return None
    if partition is None or offset is None:
        raise invalid(f"{partition_name} and {offset_name} either both should be provided or neither")
    return AckRequest.of(partition, offset)


def _flag(request: web.Request, name: str) -> bool:
    """kafka-pixy style flags: present means on, unless its value says otherwise."""
    if name not in request.query:
        return False
    return request.query[name].lower() not in ("false", "0", "no")


def delivery_to_json(delivery: Delivery) -> dict[str, Any]:
    message = delivery.message
    return {
        "key": _b64(message.key),
        "value": _b64(message.value if message.value is not None else b""),
        "partition": message.partition,
        "offset": message.offset,
        "headers": [{"key": name, "value": _b64(value)} for name, value in message.headers],
    }


def topic_to_json(info: TopicInfo, with_partitions: bool, with_config: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"version": 1}
    if with_config:
        body["config"] = info.config
    if with_partitions:
        body["partitions"] = [
            {"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr)}
            for p in info.partitions
        ]
    return body


def _record_headers(request: web.Request) -> list[tuple[str, bytes]]:
    headers = []
    for name, value in request.headers.items():
        if len(name) > len(HEADER_PREFIX) and name.lower().startswith(HEADER_PREFIX.lower()):
            try:
                headers.append((name[len(HEADER_PREFIX) :], base64.b64decode(value, validate=True)))
            except (binascii.Error, ValueError):
                raise invalid(f"header {name}: value is not base64") from None
    return headers


async def _read_message(request: web.Request) -> bytes:
    content_type = request.content_type
    if content_type in ("text/plain", "application/json", "application/octet-stream"):
        if request.content_length is None and not request.body_exists:
            raise invalid("missing Content-Length header")
        return await request.read()
    if content_type == "application/x-www-form-urlencoded":
        form = await request.post()
        message = form.get("msg")
        if not message:
            raise invalid("empty message")
        return str(message).encode()
    raise invalid(f"unsupported content type {content_type}")


class HttpApi:
    def __init__(self, service: GatewayService) -> None:
        self.service = service
        self._openapi_text = (
            resources.files("sluice.gateway").joinpath("openapi.yaml").read_text(encoding="utf-8")
        )

    def _handler(self, operation: str, work: Handler) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                response = await work(request)
            except web.HTTPRequestEntityTooLarge as exc:
                self.service.metrics.requests.labels("http", operation, "too_large").inc()
                return _error(413, f"request body too large: {exc.text}")
            except Exception as exc:
                error = failure_of(exc)
                self.service.metrics.requests.labels("http", operation, error.failure.name.lower()).inc()
                return _error(HTTP_STATUS_OF_FAILURE[error.failure], error.message)
            self.service.metrics.requests.labels("http", operation, "ok").inc()
            return response

        return handle

    async def produce(self, request: web.Request) -> web.StreamResponse:
        cluster, topic = request.match_info.get("cluster", ""), request.match_info["topic"]
        key_values = request.query.getall("key", [])
        if len(key_values) > 1:
            raise invalid(f"one key parameter is expected, but {len(key_values)} provided")
        # No key parameter at all means a random partition; an empty one is a real key.
        key = key_values[0].encode() if key_values else None
        headers = _record_headers(request)
        message = await _read_message(request)
        sync = "sync" in request.query
        partition, offset = await self.service.produce(cluster, topic, key, message, headers, sync=sync)
        return _json({"partition": partition, "offset": offset} if sync else {})

    async def consume(self, request: web.Request) -> web.StreamResponse:
        cluster, topic = request.match_info.get("cluster", ""), request.match_info["topic"]
        group = _single_param(request, "group")
        explicit = _ack_from(request, "ackPartition", "ackOffset")
        if explicit is not None:
            ack = explicit
        elif "noAck" in request.query:
            ack = AckRequest.none()
        else:
            # kafka-pixy's HTTP consume acknowledges on the way out unless told otherwise.
            ack = AckRequest.automatic()
        delivery = await self.service.consume(cluster, group, topic, ack)
        return _json(delivery_to_json(delivery))

    async def ack(self, request: web.Request) -> web.StreamResponse:
        cluster, topic = request.match_info.get("cluster", ""), request.match_info["topic"]
        group = _single_param(request, "group")
        ack = _ack_from(request, "partition", "offset")
        if ack is None:
            raise invalid("partition and offset are required")
        await self.service.ack(cluster, group, topic, ack.partition, ack.offset)
        return _json({})

    async def get_offsets(self, request: web.Request) -> web.StreamResponse:
        cluster, topic = request.match_info.get("cluster", ""), request.match_info["topic"]
        group = _single_param(request, "group")
        offsets = await self.service.get_offsets(cluster, group, topic)
        views = []
        for o in offsets:
            view: dict[str, Any] = {
                "partition": o.partition,
                "begin": o.begin,
                "end": o.end,
                "count": o.end - o.begin,
                "offset": o.offset,
                "lag": o.lag,
            }
            if o.metadata:
                view["metadata"] = o.metadata
            sparse = sparse_acks_to_str(o.offset, o.metadata)
            if sparse:
                view["sparse_acks"] = sparse
            views.append(view)
        return _json(views)

    async def set_offsets(self, request: web.Request) -> web.StreamResponse:
        cluster, topic = request.match_info.get("cluster", ""), request.match_info["topic"]
        group = _single_param(request, "group")
        body = await request.read()
        offsets = parse_offsets_body(body)
        rewound = await self.service.set_offsets(cluster, group, topic, offsets)
        if rewound is None:
            return _json({})  # kafka-pixy's answer
        # A live rewind on a sluice broker (sluice extension): where each partition was actually set.
        return _json(
            {
                "offsets": [
                    {"partition": p, "requested": asked, "actual": actual} for p, asked, actual in rewound
                ]
            }
        )

    async def consumers(self, request: web.Request) -> web.StreamResponse:
        cluster, topic = request.match_info.get("cluster", ""), request.match_info["topic"]
        group = _single_param(request, "group", optional=True)
        return _json(await self.service.list_consumers(cluster, topic, group))

    async def list_topics(self, request: web.Request) -> web.StreamResponse:
        cluster = request.match_info.get("cluster", "")
        with_partitions, with_config = _flag(request, "withPartitions"), _flag(request, "withConfig")
        topics = await self.service.list_topics(cluster, with_config)
        if not (with_partitions or with_config):
            return _json(sorted(topics))
        return _json(
            {name: topic_to_json(info, with_partitions, with_config) for name, info in topics.items()}
        )

    async def topic(self, request: web.Request) -> web.StreamResponse:
        cluster, topic = request.match_info.get("cluster", ""), request.match_info["topic"]
        with_partitions, with_config = _flag(request, "withPartitions"), _flag(request, "withConfig")
        info = await self.service.topic_metadata(cluster, topic, with_config)
        return _json(topic_to_json(info, with_partitions, with_config))

    async def ping(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="pong")

    async def health(self, request: web.Request) -> web.StreamResponse:
        if self.service.closing:
            return _json({"status": "shutting down"}, 503)
        return _json({"status": "ok", "clusters": sorted(self.service.config.clusters)})

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        body = generate_latest(self.service.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=self._openapi_text, content_type="application/yaml")


def parse_offsets_body(body: bytes) -> list[tuple[int, int, str]]:
    """The POST /offsets body: a JSON list of {"partition", "offset", "metadata"?}."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"Failed to parse the request: err=({exc})") from None
    if not isinstance(document, list) or not document:
        raise invalid("Failed to parse the request: a non-empty JSON list of partition offsets is expected")
    offsets = []
    for index, entry in enumerate(document):
        if not isinstance(entry, dict):
            raise invalid(f"Failed to parse the request: entry {index} is not an object")
        partition, offset = entry.get("partition"), entry.get("offset")
        metadata = entry.get("metadata", "")
        for name, value in (("partition", partition), ("offset", offset)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise invalid(
                    f"Failed to parse the request: entry {index}: {name} must be a non-negative integer"
                )
        if not isinstance(metadata, str):
            raise invalid(f"Failed to parse the request: entry {index}: metadata must be a string")
        offsets.append((int(partition), int(offset), metadata))  # type: ignore[arg-type]
    return offsets


def create_http_app(service: GatewayService, max_body_bytes: int) -> web.Application:
    app = web.Application(client_max_size=max_body_bytes)
    app[_SERVICE_KEY] = service
    api = HttpApi(service)
    topic_routes: list[tuple[str, str, str, Handler]] = [
        ("POST", "/topics/{topic}/messages", "produce", api.produce),
        ("GET", "/topics/{topic}/messages", "consume", api.consume),
        ("POST", "/topics/{topic}/acks", "ack", api.ack),
        ("GET", "/topics/{topic}/offsets", "get_offsets", api.get_offsets),
        ("POST", "/topics/{topic}/offsets", "set_offsets", api.set_offsets),
        ("GET", "/topics/{topic}/consumers", "list_consumers", api.consumers),
        ("GET", "/topics/{topic}", "get_topic_metadata", api.topic),
        ("GET", "/topics", "list_topics", api.list_topics),
    ]
    for method, path, operation, handler in topic_routes:
        wrapped = api._handler(operation, handler)
        app.router.add_route(method, path, wrapped)
        app.router.add_route(method, "/clusters/{cluster}" + path, wrapped)
    app.router.add_get("/_ping", api.ping)
    app.router.add_get("/_health", api.health)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/openapi.yaml", api.openapi)
    return app


__all__ = ["GatewayError", "create_http_app", "parse_offsets_body"]
