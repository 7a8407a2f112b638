"""One client connection: frames in, responses out in request order.

Requests on one connection are dispatched as they arrive (so a pipelining producer's appends share one
fsync), and their responses are written strictly in request order, as Kafka clients require. A client that
stops reading, or is over a quota, is paused rather than buffered without bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.api import NoResponse, Parked, Respond, RespondEncoded, RespondWhenData, RespondWhenDurable
from sluice.broker.dispatch import Close
from sluice.errors import ProtocolError
from sluice.protocol.codec import Encoded, Preencoded
from sluice.protocol.fetch_shape import FetchShape
from sluice.protocol.framing import FrameBuffer, coalesce, frame
from sluice.protocol.headers import framed_response, response_header
from sluice.protocol.messages import response_codec
from sluice.security.session import PLAINTEXT, Session, uses_sasl
from sluice.server.clock import now_ms
from sluice.server.sasl_gate import AuthGate
from sluice.server.tls import peer_principal

if TYPE_CHECKING:
    from sluice.broker.broker import Broker
    from sluice.broker.dispatch import Dispatcher
    from sluice.server.group_commit import GroupCommit

log = logging.getLogger("sluice.kafka")


class ConnectionOwner(Protocol):
    """What a connection needs of the listener that accepted it (sluice.server.kafka.KafkaServer)."""

    broker: Broker
    dispatcher: Dispatcher
    connections: set[KafkaConnection]
    group_commit: GroupCommit

    def long_poll(self, slot: ResponseSlot, outcome: RespondWhenData) -> None: ...

    def deliver_ready_replies(self, timers_touched: bool = True) -> None: ...

    def forget_connection(self, connection: KafkaConnection) -> None: ...


class ResponseSlot:
    """A place in a connection's response order; filled now or later."""

    __slots__ = ("api_key", "api_version", "connection", "correlation_id", "parts", "started", "throttle_ms")

    def __init__(
        self, connection: KafkaConnection, api_key: int, api_version: int, correlation_id: int
    ) -> None:
        self.connection = connection
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.parts: list[Any] | None = None
        self.started = perf_counter()
        self.throttle_ms = 0  # from the request_percentage quota, known once the handler returned

    def fill(self, response: Any, version: int | None = None) -> None:
        if type(response) is Encoded:
            self.fill_encoded(response.body)
            return
        api_key = self.api_key
        throttle = getattr(response, "throttle_time_ms", 0)
        if self.throttle_ms > throttle:
            throttle = self.throttle_ms
            if hasattr(response, "throttle_time_ms"):
                response.throttle_time_ms = throttle  # the client backs off too (KIP-219)
        version = self.api_version if version is None else version
        codec = response_codec(api_key, version)
        parts: list[Any] = [response_header(self.correlation_id, api_key, codec.flexible)]
        if type(response) is Preencoded:
            if response.parts and response.api_version == version:
                parts.extend(response.parts)
            else:
                codec.encode_root(response.message, parts)
        else:
            codec.encode_root(response, parts)
        self.parts = frame(parts)
        self._done(throttle)

    def fill_encoded(self, body: bytes) -> None:
        """Fill with a body already encoded at the request's version (sluice.broker.api.RespondEncoded)."""
        api_key = self.api_key
        flexible = response_codec(api_key, self.api_version).flexible
        self.parts = framed_response(self.correlation_id, api_key, flexible, body)
        self._done(self.throttle_ms)

    def _done(self, throttle: int) -> None:
        connection = self.connection
        connection.metrics.request_done(self.api_key, perf_counter() - self.started)
        connection.flush_responses()
        if throttle:
            connection.mute(throttle)


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: ConnectionOwner, listener: str = PLAINTEXT) -> None:
        self.server = server
        self.metrics = server.broker.metrics
        self.listener = listener
        self.session: Session | None = None
        self.auth: AuthGate | None = None
        self.frames = FrameBuffer(server.broker.config.max_request_bytes)
        # While corked (one read's requests being handled, or a group commit releasing its answers), ready
        # responses wait and then go out in one write: one send syscall instead of one per response.
        self.corked = False
        self.flush_wanted = False
        # What the group commit learnt of this connection's pipelining (sluice.server.group_commit).
        self.durable_window = 1
        self.durable_released_at = 0.0
        self.pending: deque[ResponseSlot] = deque()
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False
        self.last_received = time.monotonic()
        # A client over its quota: no request is read until the throttle time has passed (KIP-219).
        self.muted = False
        # Over its IP's connection_creation_rate: held unserved until closed (KIP-612).
        self.held = False
        self.tls = False  # set in connection_made: responses then go out through coalesce()
        # The last sessionless Fetch, kept by the dispatcher (sluice.broker.dispatch._decode_fetch).
        self.repeated_fetch: tuple[int, FetchShape, Any] | None = None

    # ----- asyncio callbacks -----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not a subclass of asyncio.Transport, but has its whole interface.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer_host = peer[0] if peer else ""
        self.tls = transport.get_extra_info("ssl_object") is not None
        if len(self.server.connections) >= self.server.broker.config.max_connections:
            log.warning(
                "refusing connection from %s: %d connections open",
                self.peer_host,
                len(self.server.connections),
            )
            self.server.broker.metrics.connections_refused += 1
            transport.abort()
            return
        self.server.broker.metrics.connections_accepted += 1
        self.server.connections.add(self)
        quotas = self.server.dispatcher.quotas
        if (
            quotas is not None
            and quotas.configs
            and (delay := quotas.connection_throttle(self.peer_host, now_ms()))
        ):
            # KIP-612: over its IP's connection_creation_rate, a connection is held unread for the throttle
            # time and then closed, so a reconnect loop slows down instead of being refused in a spin.
            log.info(
                "closing connection from %s in %d ms: over its connection_creation_rate",
                self.peer_host,
                delay,
            )
            self.held = self.muted = True
            loop = asyncio.get_running_loop()
            loop.call_soon(self._update_reading)  # uvloop starts reading after connection_made returns
            loop.call_later(delay / 1000, self.abort, "over connection_creation_rate")
            return
        self.session = Session.open(self.listener, self.peer_host, peer_principal(transport))
        if uses_sasl(self.listener):
            self.auth = AuthGate(
                self, self.session, self.server.broker
            )  # other listeners have nothing to gate

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pending.clear()
        self.server.connections.discard(self)
        self.server.forget_connection(self)

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.writable()

    def buffer_updated(self, nbytes: int) -> None:
        if self.held:
            return  # over the connection rate: nothing it sends is served before it is closed
        self.last_received = time.monotonic()
        try:
            frames = self.frames.commit(nbytes)
        except ProtocolError as exc:
            self.abort(str(exc))
            return
        self.corked = True
        timers_touched = False  # by a request other than Produce (API key 0) and Fetch (1)
        now = now_ms()  # the requests of one read arrived together: one clock read for all of them
        try:
            for body in frames:
                if self.closed:
                    break
                if not timers_touched and (len(body) < 2 or body[0] or body[1] > 1):
                    timers_touched = True
                self.handle_frame(body, now)
            # Once per read, not per request: answers of parked requests that became ready, and the timer.
            self.server.deliver_ready_replies(timers_touched)
        finally:
            self.corked = False
        self.flush_responses()

    # ----- requests -----

    def abort(self, reason: str) -> None:
        if not self.closed:
            log.info("closing connection from %s: %s", self.peer_host, reason)
            self.closed = True
            if self.transport is not None:
                self.transport.abort()

    def handle_frame(self, body: memoryview, now: int) -> None:
        server = self.server
        auth = self.auth
        if auth is not None and auth.raw_token(body):
            return
        result = server.dispatcher.dispatch(body, self, now)
        if isinstance(result, Close):
            if result.reason is not None:
                self.abort(result.reason)
            return
        slot: ResponseSlot = result.reply
        slot.throttle_ms = result.throttle_ms
        outcome = result.outcome
        if auth is not None and auth.after_dispatch(slot, outcome):
            pass
        elif type(outcome) is RespondEncoded:
            slot.fill_encoded(outcome.body)
        elif isinstance(outcome, Respond):
            slot.fill(outcome.response)
        elif isinstance(outcome, RespondWhenDurable):
            server.group_commit.wait(slot, outcome.response)
        elif isinstance(outcome, RespondWhenData):
            server.long_poll(slot, outcome)
        elif isinstance(outcome, NoResponse):
            self.pending.remove(slot)
            self.flush_responses()
            server.group_commit.kick_soon()
        elif isinstance(outcome, Parked):
            pass

    # ----- what the dispatcher asks of the connection (sluice.broker.dispatch.RequestOrigin) -----

    def admits(self, api_key: int) -> bool:
        return self.auth is None or self.auth.admits(api_key)

    def open_reply(self, api_key: int, api_version: int, correlation_id: int) -> ResponseSlot:
        slot = ResponseSlot(self, api_key, api_version, correlation_id)
        self.pending.append(slot)
        return slot

    def cork(self) -> None:
        """Hold ready responses back until `uncork` (which writes them in one go)."""
        self.corked = True

    def uncork(self) -> None:
        self.corked = False
        if self.flush_wanted:
            self.flush_responses()

    def flush_responses(self) -> None:
        """Write every response at the head of the order that is ready (later, when corked)."""
        if self.corked:
            self.flush_wanted = True
            return
        self.flush_wanted = False
        if self.closed or self.transport is None:
            return
        pending = self.pending
        out: list[bytes | bytearray | memoryview] = []
        while pending and pending[0].parts is not None:
            out += pending.popleft().parts or ()
        if out:
            # TLS: one write of joined small parts, see framing.coalesce (a TLS record per part otherwise).
            self.transport.writelines(coalesce(out) if self.tls else out)
        self._update_reading()

    def mute(self, throttle_ms: int) -> None:
        if self.muted or self.closed:
            return
        self.muted = True
        until = time.monotonic() + throttle_ms / 1000
        asyncio.get_running_loop().call_later(throttle_ms / 1000, self._unmute, until)
        self._update_reading()

    def _unmute(self, until: float) -> None:
        # The loop's timers run on a clock it reads once per iteration (uvloop: libuv's cached time), so a
        # timer can fire a little before its delay has passed in real time: the client is muted the whole
        # throttle time it was told, not nearly.
        left = until - time.monotonic()
        if left > 0:
            asyncio.get_running_loop().call_later(left, self._unmute, until)
            return
        self.muted = False
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        limit = self.server.broker.config.max_in_flight_per_connection
        should_pause = len(self.pending) >= limit or self.writing_paused or self.muted
        if should_pause and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True
        elif not should_pause and self.reading_paused:
            self.transport.resume_reading()
            self.reading_paused = False
