"""The broker's admin listener (HTTP, loopback by default, like Redpanda's admin API on 9644).

    GET  /metrics                     Prometheus text (sluice.server.metrics)
    GET  /v1/groups                   groups with their sluice settings
    POST /v1/groups                   create a group before any member joins (sluice extension)
    DELETE /v1/groups/{name}[?force=true]
    POST /v1/groups/{name}/rewind     set committed offsets, live or only on an inactive group
    GET  /v1/share-groups[/{name}]    share groups' share-partitions: records acquired, acknowledged,
                                      archived (what Kafka's protocol does not tell)

With `admin_auth` every request (/metrics included: Prometheus sends basic or bearer credentials) must carry
one of the configured credentials, and with `admin_tls` the listener speaks HTTPS with the broker's
certificate: what it takes for the listener to leave loopback when the Kafka listeners are secured.

Kafka's protocol has no "create group" and no way to move a running group's offsets; rather than
invent Kafka API keys that no client knows (and that a future Kafka could reuse), the extensions are
plain JSON over HTTP next to /metrics: any tool can call them, and the Kafka listener stays pure
Kafka. Handlers run on the broker's event loop, so they read and change broker state like a request.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sluice.coordinator.share.partition import RecordState, SharePartition
from sluice.errors import ErrorCode, KafkaError
from sluice.security.http_auth import http_middleware
from sluice.server.clock import now_ms
from sluice.server.metrics import broker_registry, share_partitions
from sluice.server.tls import TlsContext

if TYPE_CHECKING:
    from sluice.server.kafka import KafkaServer

log = logging.getLogger("sluice.admin")

MAX_BODY_BYTES = 1 << 20
MAX_REWIND_PARTITIONS = 100_000
GROUP_NAME_MAX = 255

# Kafka error -> HTTP status, for the admin API's JSON errors.
_STATUS = {
    ErrorCode.GROUP_ID_NOT_FOUND: 404,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.NON_EMPTY_GROUP: 409,
    ErrorCode.INVALID_GROUP_ID: 400,
    ErrorCode.INVALID_SESSION_TIMEOUT: 400,
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: 503,
}
GROUP_ALREADY_EXISTS = "GROUP_ALREADY_EXISTS"


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


def _kafka_error(exc: KafkaError) -> web.Response:
    return _error(_STATUS.get(exc.code, 400), exc.code.name, exc.message or exc.code.name)


async def _json_body(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"body over {MAX_BODY_BYTES} bytes")
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"body over {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "body must be a JSON object")
    return body


class AdminApp:
    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.registry = broker_registry(server)
        config = server.broker.config
        credentials = config.admin_credentials()
        self.app = web.Application(
            client_max_size=MAX_BODY_BYTES, middlewares=[http_middleware(credentials)] if credentials else []
        )
        if config.admin_tls and server.tls is None:
            server.tls = TlsContext.from_config(config)  # so SIGHUP reloads the admin certificate too
        self.tls = server.tls if config.admin_tls else None
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/v1/groups", self.list_groups)
        self.app.router.add_post("/v1/groups", self.create_group)
        self.app.router.add_delete("/v1/groups/{name}", self.delete_group)
        self.app.router.add_post("/v1/groups/{name}/rewind", self.rewind)
        self.app.router.add_get("/v1/share-groups", self.share_groups)
        self.app.router.add_get("/v1/share-groups/{name}", self.share_group)
        self.runner: web.AppRunner | None = None
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(
            self.runner, host, port, reuse_address=True, ssl_context=self.tls.context if self.tls else None
        )
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        bound = sockets[0].getsockname()[:2] if sockets else (host, port)
        self.address = (str(bound[0]), int(bound[1]))
        return self.address

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # ----- metrics -----

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # ----- groups -----

    def _groups(self) -> Any:
        service = self.server.broker.groups
        if service is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "this broker runs no group coordinator")
        return service

    async def _durable(self) -> None:
        """Wait until what the last admin call appended to __consumer_offsets is on disk."""
        self.server.deliver_ready_replies()
        commit = self.server.group_commit
        commit.kick()
        await commit.drain()

    async def list_groups(self, request: web.Request) -> web.Response:
        try:
            service = self._groups()
        except KafkaError as exc:
            return _kafka_error(exc)
        return web.json_response({"groups": service.coordinator.group_overview()})

    async def create_group(self, request: web.Request) -> web.Response:
        try:
            body = await _json_body(request)
            name = body.get("name")
            if not isinstance(name, str) or not name or len(name) > GROUP_NAME_MAX:
                raise KafkaError(ErrorCode.INVALID_GROUP_ID, f"name must be 1 to {GROUP_NAME_MAX} characters")
            timeout = body.get("session_timeout_ms")
            if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool)):
                raise KafkaError(ErrorCode.INVALID_SESSION_TIMEOUT, "session_timeout_ms must be an integer")
            ephemeral = body.get("ephemeral", False)
            if not isinstance(ephemeral, bool):
                raise KafkaError(ErrorCode.INVALID_REQUEST, "ephemeral must be true or false")
            service = self._groups()
            created = service.create_group(name, timeout, ephemeral, now_ms())
        except KafkaError as exc:
            return _kafka_error(exc)
        if created is None:
            return _error(409, GROUP_ALREADY_EXISTS, f"group {name!r} already exists")
        await self._durable()
        host, port = self.server.broker.config.advertised
        return web.json_response(
            {
                **created,
                "coordinator": {"node_id": self.server.broker.config.node_id, "host": host, "port": port},
            },
            status=201,
        )

    async def delete_group(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        force = request.query.get("force", "false").lower() in {"1", "true", "yes"}
        try:
            self._groups().delete_group(name, force, now_ms())
        except KafkaError as exc:
            return _kafka_error(exc)
        await self._durable()
        return web.json_response({"group": name, "deleted": True})

    async def rewind(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            body = await _json_body(request)
            live = body.get("live", False)
            if not isinstance(live, bool):
                raise KafkaError(ErrorCode.INVALID_REQUEST, "live must be true or false")
            asked = _parse_offsets(body.get("offsets"))
            actual = {key: self._clamp(key, offset) for key, offset in asked.items()}
            self._groups().rewind(name, actual, live, now_ms())
        except KafkaError as exc:
            return _kafka_error(exc)
        await self._durable()
        return web.json_response(
            {
                "group": name,
                "live": live,
                "offsets": [
                    {"topic": t, "partition": p, "requested": asked[(t, p)], "actual": actual[(t, p)]}
                    for t, p in sorted(asked)
                ],
            }
        )

    # ----- share groups -----

    async def share_groups(self, request: web.Request) -> web.Response:
        by_group: dict[str, list[dict[str, Any]]] = {}
        for group, *row in share_partitions(self.server.broker):
            by_group.setdefault(group, []).append(self._share_partition(*row))
        for group in self._share_group_ids():
            by_group.setdefault(group, [])
        return web.json_response(
            {"groups": [{"group": g, "partitions": rows} for g, rows in sorted(by_group.items())]}
        )

    async def share_group(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        rows = [self._share_partition(*row) for _, *row in share_partitions(self.server.broker, name)]
        if not rows and name not in self._share_group_ids():
            return _error(404, ErrorCode.GROUP_ID_NOT_FOUND.name, f"no share group {name!r}")
        return web.json_response({"group": name, "partitions": rows})

    def _share_group_ids(self) -> list[str]:
        service = self.server.broker.groups
        return [] if service is None else list(service.coordinator.share.groups)

    def _share_partition(self, topic: str, index: int, partition: SharePartition) -> dict[str, Any]:
        state = self.server.broker.partitions.get((topic, index))
        return {
            "topic": topic,
            "partition": index,
            "start_offset": partition.start_offset,
            "in_flight": partition.in_flight,
            **{kind.name.lower(): partition.count(kind) for kind in RecordState},
            "lag": None if state is None else partition.lag(state.high_watermark),
        }

    def _clamp(self, key: tuple[str, int], offset: int) -> int:
        state = self.server.broker.partitions.get(key)
        if state is None or key[0].startswith("__"):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {key[0]}-{key[1]}")
        return min(max(offset, state.log.log_start_offset), state.high_watermark)


def _parse_offsets(raw: Any) -> dict[tuple[str, int], int]:
    if not isinstance(raw, list) or not raw:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "offsets must be a non-empty list")
    if len(raw) > MAX_REWIND_PARTITIONS:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"at most {MAX_REWIND_PARTITIONS} partitions")
    out: dict[tuple[str, int], int] = {}
    for item in raw:
        if not isinstance(item, dict):
            raise KafkaError(ErrorCode.INVALID_REQUEST, "each offset is {topic, partition, offset}")
        topic, partition, offset = item.get("topic"), item.get("partition"), item.get("offset")
        if not isinstance(topic, str) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (partition, offset)
        ):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"bad offset entry {item!r}")
        assert isinstance(partition, int) and isinstance(offset, int)
        out[(topic, partition)] = offset
    return out
