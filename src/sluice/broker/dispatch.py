"""THE request pipeline (Kafka's KafkaApis.handle): every request from a client passes here, once, through
four stages in this order:

    read    the header's first fields (api key, version, correlation id); the SASL gate; the route, which is
            the handler and the codecs of that API version, found once and then reused
    decode  the rest of the header and the body
    handle  the authorizer, the handler, the request-time quota
    answer  framed for the socket now, or handed back with what to wait for (the group commit's fsync, new
            data, a coordinator, nothing at all)

Each fast path is a case of one stage, beside the general case:
- read: a bare SASL token (after SaslHandshake v0 the tokens come without Kafka headers) takes the route of
  SaslAuthenticate v0; an ApiVersions of a version no handler serves has a route that reads no body and
  answers UNSUPPORTED_VERSION in v0 (the client then picks a version);
- decode: the bare token becomes that SaslAuthenticate's token; the one-partition Produce is read in place
  (sluice.protocol.produce_request); a sessionless Fetch that asks what the connection's last one asked is
  handed over as that same request (sluice.protocol.fetch_shape), so that its kept answer is found
  (sluice.broker.fetch_repeat);
- handle: the one-partition Produce goes to its route's in-place handler, which encodes the answer as it
  makes it (handlers/produce.produce_one);
- answer: a body encoded ahead and a kept answer go out as they are (sluice.protocol.codec frames every
  answer); the bare token's answer goes back bare, a failed login's late, before the connection closes.

The stages are one function, so that a request goes down once (connection -> here -> codec -> handler) and its
answer comes back once (codec -> connection); docs/architecture.md draws the walk. The server (sluice.server)
only frames bytes, keeps each connection's answers in request order (`Reply`), and waits where the outcome
says. The broker is state plus log operations; the authorizer and the quota manager plug in through the two
small interfaces below, each consulted at exactly one place: `RequestAuthorizer.authorize` before the handler,
`RequestQuota.request_time_throttle` after it.
"""

from __future__ import annotations

import logging
import struct
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
    RespondEncoded,
    RespondWhenData,
    RespondWhenDurable,
)
from sluice.broker.broker import ReadyReply
from sluice.broker.handlers.metadata import unsupported_api_versions
from sluice.broker.handlers.produce import produce_one
from sluice.errors import KafkaError, ProtocolError
from sluice.protocol.codec import Part, VersionCodec
from sluice.protocol.fetch_shape import Kept, read_fetch
from sluice.protocol.headers import API_VERSIONS_KEY, HEADER_FIXED
from sluice.protocol.messages import request_codec, response_codec
from sluice.protocol.produce_request import FIRST_FLEXIBLE, LAST_BY_NAME, read_one_partition

if TYPE_CHECKING:
    from sluice.broker.broker import Broker
    from sluice.broker.quotas import ClientQuotas
    from sluice.security.acl import Authorizer

log = logging.getLogger("sluice.kafka")

PRODUCE_KEY = 0
FETCH_KEY = 1
SASL_AUTHENTICATE_KEY = 36
# The decode stage's cases, by route.
GENERAL, PRODUCE_IN_PLACE, FETCH_KEPT, NO_BODY = range(4)
_SIZE = struct.Struct(">i")  # a bare SASL token's size prefix

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
    session: Any  # its sluice.security.session.Session
    peer_host: str
    # A SASL listener's connection: only what its session may send now is served.
    gated: bool
    # The connection's last sessionless Fetch, kept by the decode stage.
    repeated_fetch: Kept | None
    closed: bool

    def answered(self, reply: Reply, throttle_ms: int) -> None:
        """`reply` has its bytes: send it in its turn; then stop reading for `throttle_ms` (KIP-219)."""
        ...


class Reply:
    """A request's place in its connection's answer order, made by the connection before the request enters the
    pipeline, which records how its answer is framed; `parts` are the answer's bytes once it has them. An answer
    that comes later (after the fsync, new data, a coordinator) is framed by `fill`. It is also the request's
    reply token (RequestContext.reply_token): what a parked answer comes back with."""

    __slots__ = ("api_key", "codec", "connection", "correlation_id", "parts", "started", "throttle_ms")

    def __init__(self, connection: RequestOrigin) -> None:
        self.connection = connection
        self.api_key = -1  # set, with the codec and the correlation id, by the pipeline's read stage
        self.codec: VersionCodec | None = None  # frames the answer
        self.correlation_id = 0
        self.parts: list[Part] | None = None
        self.started = perf_counter()
        self.throttle_ms = 0  # from the request_percentage quota, known once the handler returned

    def fill(self, response: Any) -> None:
        assert self.codec is not None
        self.parts, throttle = self.codec.frame(self.correlation_id, response, self.throttle_ms)
        self.connection.answered(self, throttle)


@dataclass(slots=True)
class Dispatched:
    """A request through the pipeline. `answer`: its bytes, framed now, to send in its turn; otherwise `outcome`
    says what to wait for (RespondWhenDurable, RespondWhenData, Parked, NoResponse)."""

    outcome: Outcome | None  # what the handler answered (None: a bare SASL token's step)
    answer: list[Part] | None = None
    throttle_ms: int = 0  # stop reading from the client this long (KIP-219)
    # A failed login: send `answer`, if any, after this many ms, then close the connection.
    close_after_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """How requests of one API version are served: found once, then reused for every such request."""

    handle: Handler
    codec: VersionCodec | None  # reads the request (None: its body is not read)
    answer_codec: VersionCodec  # frames the answer
    case: int  # of the decode stage: GENERAL, PRODUCE_IN_PLACE, FETCH_KEPT or NO_BODY
    # PRODUCE_IN_PLACE: the handler of a request read in place (handlers/produce.produce_one).
    handle_in_place: Callable[[Any, Any, int], Outcome] | None = None


@dataclass(slots=True)
class Close:
    """Close the connection without an answer, saying why."""

    reason: str


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
        # API key * 65536 + version (an int: cheaper to hash than a pair) -> Route, for the versions served.
        self.routes: dict[int, Route] = {}

    # ----- the pipeline -----

    def dispatch(self, body: memoryview, origin: RequestOrigin, reply: Reply, now_ms: int) -> Dispatched | Close:
        """One request (a frame's bytes) through the four stages; `reply` is its place in the answer order."""
        session = origin.session
        # ----- read -----
        bare = session.raw_tokens  # a bare SASL token: SaslAuthenticate's route, no header
        if bare:
            api_key, api_version, correlation_id = SASL_AUTHENTICATE_KEY, 0, -1
        elif len(body) < HEADER_FIXED.size:
            return Close(f"malformed request: {len(body)} bytes are shorter than a header")
        else:
            api_key, api_version, correlation_id = HEADER_FIXED.unpack_from(body)
            if origin.gated and not session.may_send(api_key, now_ms):
                if session.authenticated:
                    return Close("SASL session expired: the client must re-authenticate")
                return Close(f"API {api_key} before authentication finished")
        route = self.routes.get(api_key * 65536 + api_version) or self._route(api_key, api_version)
        if type(route) is Close:
            return route
        reply.api_key, reply.codec, reply.correlation_id = api_key, route.answer_codec, correlation_id
        # ----- decode -----
        client_id = None
        codec = route.codec
        try:
            if bare:
                request: Any = codec.cls(auth_bytes=bytes(body))
            elif codec is None:  # NO_BODY
                request = None
            elif (
                route.case == PRODUCE_IN_PLACE
                and (self.quotas is None or not self.quotas.configs)
                and (one := read_one_partition(body)) is not None
            ):
                request = one  # a tuple: handled in place, without a request context
            else:
                client_id, pos = codec.read_header(body)
                if route.case == FETCH_KEPT:
                    request, origin.repeated_fetch = read_fetch(codec, body, pos, origin.repeated_fetch)
                else:
                    request, _ = codec.decode(body, pos)
        except ProtocolError as exc:
            return Close(f"malformed request: {exc}")
        # ----- handle -----
        throttle_ms = 0
        try:
            if type(request) is tuple:
                outcome = route.handle_in_place(self.broker, request, now_ms)
            else:
                ctx = RequestContext(
                    api_key,
                    api_version,
                    correlation_id,
                    client_id,
                    origin.peer_host,
                    now_ms,
                    reply,
                    origin.listener,
                    session,
                    self.quotas,
                    self.acl,
                )
                quota = self.request_quota
                if quota is not None and not quota.configs:
                    quota = None
                started = perf_counter() if quota is not None else 0.0
                authorizer = self.authorizer
                if authorizer is None:
                    outcome = route.handle(self.broker, ctx, request)
                else:
                    immediate, finish = authorizer.authorize(ctx, request)
                    if immediate is not None:
                        outcome = immediate if isinstance(immediate, NoResponse) else Respond(immediate)
                    else:
                        outcome = route.handle(self.broker, ctx, request)
                        if finish is not None:
                            # `finish` applies to the response however it comes: now, after the fsync, after
                            # a long poll, or parked (take_ready_replies applies it then).
                            if isinstance(outcome, Respond | RespondWhenDurable):
                                outcome.response = finish(outcome.response)
                            elif isinstance(outcome, RespondWhenData):
                                retry = outcome.retry

                                def finishing_retry(now_ms: int, final: bool) -> Any:
                                    response = retry(now_ms, final)
                                    return None if response is None else finish(response)

                                outcome.retry = finishing_retry
                            elif isinstance(outcome, Parked):
                                self.reply_finishers[reply] = finish
                if quota is not None:
                    throttle_ms = reply.throttle_ms = quota.request_time_throttle(ctx, perf_counter() - started)
        except KafkaError as exc:  # a request refused as a whole (e.g. a group write on a full disk)
            log.error("closing connection from %s: %s", origin.peer_host, exc.message)
            return Close(exc.message)
        except Exception:
            log.exception("handler for API %d v%d failed", api_key, api_version)
            return Close("internal error")
        # ----- answer -----
        kind = type(outcome)
        if kind is RespondEncoded:
            return Dispatched(outcome, route.answer_codec.frame_body(correlation_id, outcome.body))
        if kind is not Respond:
            return Dispatched(outcome, None, throttle_ms)
        if bare:  # answered bare, as it came; a failed login not at all
            token = outcome.response.auth_bytes
            answer = None if outcome.response.error_code else [_SIZE.pack(len(token)) + token]
        else:
            answer, throttle_ms = route.answer_codec.frame(correlation_id, outcome.response, throttle_ms)
        if (bare and answer is None) or session.failure_delay_ms is not None:
            # A failed login: answered (a bare one: not) after the delay the login throttle asks, then closed.
            delay, session.failure_delay_ms = session.failure_delay_ms or 0, None
            return Dispatched(outcome, answer, 0, delay)
        return Dispatched(outcome, answer, throttle_ms)

    def _route(self, api_key: int, api_version: int) -> Route | Close:
        """The route of a version not seen before, kept; a Close for an API or version no handler serves."""
        spec = HANDLERS.handlers.get(api_key)
        if spec is None:
            return Close(f"unknown API key {api_key}")
        if api_version not in spec.versions:
            if api_key != API_VERSIONS_KEY:
                return Close(f"unsupported version {api_version} of API {api_key}")
            # Kafka answers an ApiVersions it cannot parse in v0, so the client can pick a version.
            route = Route(unsupported_api_versions, None, response_codec(api_key, 0), NO_BODY)
        else:
            case, in_place = GENERAL, None
            if self.authorizer is None:  # which takes items out of requests, so they are always decoded
                if api_key == PRODUCE_KEY and FIRST_FLEXIBLE <= api_version <= LAST_BY_NAME:
                    case, in_place = PRODUCE_IN_PLACE, produce_one
                elif api_key == FETCH_KEY:
                    case = FETCH_KEPT
            codec = request_codec(api_key, api_version)
            route = Route(spec.handle, codec, response_codec(api_key, api_version), case, in_place)
        self.routes[api_key * 65536 + api_version] = route
        return route

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


def build_dispatcher(broker: Broker) -> Dispatcher:
    """The pipeline for `broker` as its config asks: the ACL authorizer when `authorizer: acl`, and the
    client quotas kept beside the logs."""
    from sluice.broker.authz import AclRequestAuthorizer
    from sluice.broker.quotas import ClientQuotas

    if broker.config.authorizer != "acl":
        return Dispatcher(broker, None, ClientQuotas.open(broker.storage.data_dir))
    authorizer = AclRequestAuthorizer.for_broker(broker)
    return Dispatcher(broker, authorizer, ClientQuotas.open(broker.storage.data_dir), authorizer.authorizer)
