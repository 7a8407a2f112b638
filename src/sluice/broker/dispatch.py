"""THE request pipeline (Kafka's KafkaApis.handle): every request from a client passes here, in this order:

    lookup -> version check -> decode -> authorize -> handle -> finish parked replies -> request-time quota

The server (sluice.server) only frames bytes and routes the outcome this returns (send now, after fsync,
after new data, later, or never). The broker is state plus log operations; the authorizer and the quota
manager plug in here through the two small interfaces below, each consulted at exactly one place:
`RequestAuthorizer.authorize` before the handler, `RequestQuota.request_time_throttle` after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.api import (
    HANDLERS,
    Handler,
    NoResponse,
    Outcome,
    Parked,
    RequestContext,
    Respond,
    RespondWhenData,
    RespondWhenDurable,
)
from sluice.broker.broker import ReadyReply
from sluice.broker.fetch_sessions import FINAL_EPOCH
from sluice.broker.handlers.metadata import api_versions_body
from sluice.broker.handlers.produce import produce_one
from sluice.errors import ErrorCode, KafkaError, ProtocolError
from sluice.protocol.codec import VersionCodec
from sluice.protocol.fetch_shape import FetchShape, fetch_shape
from sluice.protocol.headers import API_VERSIONS_KEY, HEADER_FIXED, read_header_tail
from sluice.protocol.messages import request_codec
from sluice.protocol.primitives import DecodeError
from sluice.protocol.produce_request import FIRST_FLEXIBLE, LAST_BY_NAME, read_one_partition

if TYPE_CHECKING:
    from sluice.broker.broker import Broker
    from sluice.broker.quotas import ClientQuotas
    from sluice.security.acl import Authorizer

log = logging.getLogger("sluice.kafka")

PRODUCE_KEY = 0
FETCH_KEY = 1
# A sessionless Fetch with a body this large or larger is not kept for comparison with the next one.
MAX_REPEATED = 4 << 20

# Completes a handler's response (the authorizer puts the items it took out of the request back in).
Finish = Callable[[Any], Any]


class RequestAuthorizer(Protocol):
    """Decides, before the handler runs, what of a request the principal may do (sluice.broker.authz)."""

    def authorize(self, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
        """(the response to send instead of running the handler, or None; how to complete the handler's
        response, or None). It may take denied items out of `request`."""
        ...


class RequestQuota(Protocol):
    """Counts the broker's time spent on a request against the client's quota (sluice.broker.quotas)."""

    # Empty while no quota is set: the pipeline then neither times nor counts requests.
    configs: Any

    def request_time_throttle(self, ctx: RequestContext, seconds: float) -> int:
        """How long to stop reading from the client (ms), 0 when within its quota."""
        ...


class RequestOrigin(Protocol):
    """The connection a request came through (sluice.server.connection.KafkaConnection)."""

    listener: str
    session: Any
    peer_host: str

    def admits(self, api_key: int) -> bool:
        """The SASL gate: may this API be served now? When not, the connection has closed itself."""
        ...

    def open_reply(self, api_key: int, api_version: int, correlation_id: int) -> Hashable:
        """Take the request's place in the response order; the token names it when its answer comes."""
        ...

    # The connection's last sessionless Fetch: (version, what it asks, the decoded request).
    repeated_fetch: tuple[int, FetchShape, Any] | None


@dataclass(slots=True)
class Dispatched:
    reply: Any  # the token origin.open_reply gave
    outcome: Outcome
    throttle_ms: int = 0  # request_percentage quota: stop reading from the client this long (KIP-219)


@dataclass(frozen=True, slots=True)
class Route:
    """How requests of one API version are served: found once, then reused for every such request."""

    handle: Handler
    codec: VersionCodec


@dataclass(slots=True)
class Close:
    """Close the connection without an answer (None: the origin already closed itself)."""

    reason: str | None


class Dispatcher:
    def __init__(
        self,
        broker: Broker,
        authorizer: RequestAuthorizer | None = None,
        quotas: ClientQuotas | None = None,
        acl: Authorizer | None = None,
    ) -> None:
        self.broker = broker
        self.authorizer = authorizer
        # The ACLs' decisions, handed to handlers that report authorized operations (KIP-430).
        self.acl = acl
        # Handed to handlers in the request context (byte rates, mutation rates, the quota APIs).
        self.quotas = quotas
        self.request_quota: RequestQuota | None = quotas
        # Parked requests whose response the authorizer completes when it comes, by reply token.
        self.reply_finishers: dict[Hashable, Finish] = {}
        # API key * 65536 + version (an int: cheaper to hash than a pair) -> Route, for the versions some
        # handler serves.
        self.routes: dict[int, Route] = {}

    # ----- the pipeline -----

    def dispatch(self, body: memoryview, origin: RequestOrigin, now_ms: int) -> Dispatched | Close:
        try:
            if len(body) < HEADER_FIXED.size:
                raise DecodeError(f"request of {len(body)} bytes is shorter than a header")
            api_key, api_version, correlation_id = HEADER_FIXED.unpack_from(body)
            if not origin.admits(api_key):
                return Close(None)
            route = self.routes.get(api_key * 65536 + api_version)
            if route is None:
                refused = self._refuse(api_key, api_version, correlation_id, origin)
                if refused is not None:
                    return refused
                route = self.routes[api_key * 65536 + api_version] = Route(
                    HANDLERS.handlers[api_key].handle, request_codec(api_key, api_version)
                )
            if (
                api_key == PRODUCE_KEY
                and FIRST_FLEXIBLE <= api_version <= LAST_BY_NAME
                and self.authorizer is None
                and (self.quotas is None or not self.quotas.configs)
                and (one := read_one_partition(body)) is not None
            ):
                # The common Produce (one partition per request) with no quota or ACL: no request, context
                # or response objects (sluice.protocol.produce_request).
                return self._produce_one(one, origin, api_version, correlation_id, now_ms)
            codec = route.codec
            client_id, pos = read_header_tail(body, api_key, api_version, codec.flexible)
            if api_key == FETCH_KEY and self.authorizer is None:
                request = _decode_fetch(codec, body, pos, origin)
            else:
                request, _ = codec.decode(body, pos)
        except ProtocolError as exc:
            return Close(f"malformed request: {exc}")
        ctx = RequestContext(
            api_key,
            api_version,
            correlation_id,
            client_id,
            origin.peer_host,
            now_ms,
            None,
            origin.listener,
            origin.session,
            self.quotas,
            self.acl,
        )
        quota = self.request_quota
        if quota is not None and not quota.configs:
            quota = None
        started = perf_counter() if quota is not None else 0.0
        try:
            reply = ctx.reply_token = origin.open_reply(api_key, api_version, correlation_id)
            if self.authorizer is None:
                outcome = route.handle(self.broker, ctx, request)
            else:
                outcome = self.handle(ctx, request)
            throttle_ms = 0
            if quota is not None:
                throttle_ms = quota.request_time_throttle(ctx, perf_counter() - started)
        except KafkaError as exc:  # a request refused as a whole (e.g. a group write on a full disk)
            log.error("closing connection from %s: %s", origin.peer_host, exc.message)
            return Close(exc.message)
        except Exception:
            log.exception("handler for API %d v%d failed", api_key, api_version)
            return Close("internal error")
        return Dispatched(reply, outcome, throttle_ms)

    def _produce_one(
        self, request: Any, origin: RequestOrigin, api_version: int, correlation_id: int, now_ms: int
    ) -> Dispatched | Close:
        try:
            reply = origin.open_reply(PRODUCE_KEY, api_version, correlation_id)
            return Dispatched(reply, produce_one(self.broker, request, now_ms))
        except KafkaError as exc:
            log.error("closing connection from %s: %s", origin.peer_host, exc.message)
            return Close(exc.message)
        except Exception:
            log.exception("handler for API %d v%d failed", PRODUCE_KEY, api_version)
            return Close("internal error")

    def _refuse(
        self, api_key: int, api_version: int, correlation_id: int, origin: RequestOrigin
    ) -> Dispatched | Close | None:
        """The answer to a request no handler serves (an unknown API or version), else None."""
        spec = HANDLERS.handlers.get(api_key)
        if spec is None:
            return Close(f"unknown API key {api_key}")
        if api_version in spec.versions:
            return None
        if api_key == API_VERSIONS_KEY:
            # Kafka answers an ApiVersions it cannot parse in v0, so the client can pick a version.
            reply = origin.open_reply(api_key, 0, correlation_id)
            return Dispatched(reply, Respond(api_versions_body(ErrorCode.UNSUPPORTED_VERSION)))
        return Close(f"unsupported version {api_version} of API {api_key}")

    def handle(self, ctx: RequestContext, request: Any) -> Outcome:
        """A decoded request: authorize, run its handler, and complete what the authorizer took out."""
        handler = HANDLERS.handlers[ctx.api_key].handle
        if self.authorizer is None:
            return handler(self.broker, ctx, request)
        immediate, finish = self.authorizer.authorize(ctx, request)
        if immediate is not None:
            return immediate if isinstance(immediate, NoResponse) else Respond(immediate)
        outcome = handler(self.broker, ctx, request)
        if finish is not None:
            self._finish_later(ctx, outcome, finish)
        return outcome

    def _finish_later(self, ctx: RequestContext, outcome: Outcome, finish: Finish) -> None:
        """Make `finish` apply to the response however it comes: now, after fsync, after a long poll, or
        parked (then take_ready_replies applies it)."""
        if isinstance(outcome, Respond | RespondWhenDurable):
            outcome.response = finish(outcome.response)
        elif isinstance(outcome, RespondWhenData):
            retry = outcome.retry

            def finishing_retry(now_ms: int, final: bool) -> Any:
                response = retry(now_ms, final)
                return None if response is None else finish(response)

            outcome.retry = finishing_retry
        elif isinstance(outcome, Parked):
            self.reply_finishers[ctx.reply_token] = finish

    def take_ready_replies(self) -> list[ReadyReply]:
        """Answers to parked requests that became ready: (reply token, response, partition to be durable)."""
        ready = self.broker.take_ready_replies()
        finishers = self.reply_finishers
        if finishers:
            ready = [
                (token, finish(response) if (finish := finishers.pop(token, None)) else response, after)
                for token, response, after in ready
            ]
        return ready


def _decode_fetch(codec: VersionCodec, body: memoryview, pos: int, origin: RequestOrigin) -> Any:
    """A sessionless Fetch that asks what the connection's last one asked (librdkafka's idle consumer, twice
    a second, naming every partition, its list started one partition further on) is that request again:
    not decoded a second time, and handed to the handler as the same object, so its kept answer
    (sluice.broker.fetch_repeat) can be found. Without an authorizer nothing takes items out of a request,
    so it is never changed once decoded."""
    last = origin.repeated_fetch
    shape = _shape(codec, body, pos) if last is not None and last[0] == codec.version else None
    if shape is not None and last is not None and last[1] == shape:
        return last[2]
    request, _ = codec.decode(body, pos)
    if request.session_epoch != FINAL_EPOCH:  # a session's fetch: never kept, and its shape never read
        origin.repeated_fetch = None
        return request
    if shape is None:
        shape = _shape(codec, body, pos)
    origin.repeated_fetch = (codec.version, shape, request) if shape is not None else None
    return request


def _shape(codec: VersionCodec, body: memoryview, pos: int) -> FetchShape | None:
    return fetch_shape(bytes(body[pos:]), codec.version) if len(body) - pos <= MAX_REPEATED else None


def build_dispatcher(broker: Broker) -> Dispatcher:
    """The pipeline for `broker` as its config asks: the ACL authorizer when `authorizer: acl`, and the
    client quotas kept beside the logs."""
    from sluice.broker.authz import AclRequestAuthorizer
    from sluice.broker.quotas import ClientQuotas

    if broker.config.authorizer != "acl":
        return Dispatcher(broker, None, ClientQuotas.open(broker.storage.data_dir))
    authorizer = AclRequestAuthorizer.for_broker(broker)
    return Dispatcher(broker, authorizer, ClientQuotas.open(broker.storage.data_dir), authorizer.authorizer)
