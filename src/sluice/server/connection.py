"""One client connection: frames in, responses out in request order.

Requests on one connection are dispatched as they arrive (so a pipelining producer's appends share one
fsync), and their responses are written strictly in request order, as Kafka clients require. A client that
stops reading, or is over a quota, is paused rather than buffered without bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from sluice.broker.api import NoResponse, RespondWhenData, RespondWhenDurable
from sluice.broker.dispatch import Close, Reply
from sluice.errors import ProtocolError
from sluice.protocol.fetch_shape import Kept
from sluice.protocol.framing import FrameBuffer, coalesce
from sluice.security.session import PLAINTEXT, Session, uses_sasl
from sluice.server.clock import now_ms
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
    # Open connections, the one that received nothing for the longest first (moved to the end at each read).
    connections: OrderedDict[KafkaConnection, None]
    # Connections holding a receive buffer: the sweep gives it back once they are quiet, or cuts them off
    # when they stall in the middle of a request.
    holding: set[KafkaConnection]
    group_commit: GroupCommit

    def admit(self, connection: KafkaConnection) -> bool:
        """Keep the new connection (True), or refuse it at a connection bound (logged)."""
        ...

    def forget(self, connection: KafkaConnection) -> None:
        """The connection closed: drop it and its long polls."""
        ...

    def long_poll(self, reply: Reply, outcome: RespondWhenData) -> None: ...

    def deliver_ready_replies(self, timers_touched: bool = True) -> None: ...


class KafkaConnection(asyncio.BufferedProtocol):
    # Slots, not a __dict__: a broker holding ten thousand idle connections pays for each one.
    __slots__ = (
        "closed",
        "closing",
        "corked",
        "counted",
        "durable_released_at",
        "durable_window",
        "flush_wanted",
        "frames",
        "gated",
        "held",
        "holding",
        "last_received",
        "listener",
        "max_request_bytes",
        "metrics",
        "muted",
        "peer_host",
        "pending",
        "reading_paused",
        "repeated_fetch",
        "server",
        "session",
        "tls",
        "transport",
        "writing_paused",
    )

    def __init__(self, server: ConnectionOwner, listener: str = PLAINTEXT) -> None:
        self.server = server
        self.metrics = server.broker.metrics
        self.listener = listener
        self.session: Session | None = None
        self.gated = uses_sasl(listener)  # a SASL listener: the pipeline's gate applies, and the size cap
        self.closing = False  # a failed login is being answered: nothing more is read
        self.frames = FrameBuffer(server.broker.config.max_request_bytes)
        self.max_request_bytes = self.frames.max_frame_bytes
        # While corked (one read's requests being handled, or a group commit releasing its answers), ready
        # responses wait and then go out in one write: one send syscall instead of one per response.
        self.corked = False
        self.flush_wanted = False
        # What the group commit learnt of this connection's pipelining (sluice.server.group_commit).
        self.durable_window = 1
        self.durable_released_at = 0.0
        # Requests in flight, in request order (at most max_in_flight_per_connection): a list, not a deque,
        # which would cost an idle connection 760 bytes.
        self.pending: list[Reply] = []
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False
        self.last_received = time.monotonic()
        # A client over its quota: no request is read until the throttle time has passed (KIP-219).
        self.muted = False
        # Over its IP's connection_creation_rate: held unserved until closed (KIP-612); or refused.
        self.held = False
        self.counted = False  # admitted: counted in the listener's connections and their address's
        self.holding = False  # in the listener's `holding` set
        self.tls = False  # set in connection_made: responses then go out through coalesce()
        # The last sessionless Fetch, kept by the pipeline's decode stage (sluice.protocol.fetch_shape).
        self.repeated_fetch: Kept | None = None

    # ----- asyncio callbacks -----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not a subclass of asyncio.Transport, but has its whole interface.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer_host = peer[0] if peer else ""
        self.tls = transport.get_extra_info("ssl_object") is not None
        if not self.server.admit(self):
            self.held = self.closed = True
            transport.abort()
            return
        self.server.broker.metrics.connections_accepted += 1
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
        self._cap_request_size()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pending.clear()
        self.server.forget(self)

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
            return  # over the connection rate, or refused: nothing it sends is served before it is closed
        server = self.server
        self.last_received = time.monotonic()
        server.connections.move_to_end(self)
        try:
            frames = self.frames.commit(nbytes)
        except ProtocolError as exc:
            self.abort(str(exc))
            return
        if not self.holding:
            self.holding = True
            server.holding.add(self)
        self.corked = True
        timers_touched = False  # by a request other than Produce (API key 0) and Fetch (1)
        now = now_ms()  # the requests of one read arrived together: one clock read for all of them
        try:
            for body in frames:
                if self.closed or self.closing:
                    break
                if not timers_touched and (len(body) < 2 or body[0] or body[1] > 1):
                    timers_touched = True
                self.handle_frame(body, now)
            # Once per read, not per request: answers of parked requests that became ready, and the timer.
            server.deliver_ready_replies(timers_touched)
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
        """One request: through the pipeline (sluice.broker.dispatch), and its answer sent in its turn, or
        handed to what it waits for."""
        server = self.server
        reply = Reply(self)
        self.pending.append(reply)
        result = server.dispatcher.dispatch(body, self, reply, now)
        if self.gated:
            self._cap_request_size()
        if type(result) is Close:
            self.pending.remove(reply)
            self.abort(result.reason)
        elif result.close_after_ms is not None:
            self._answer_then_close(reply, result.answer, result.close_after_ms)
        elif result.answer is not None:
            reply.parts = result.answer
            self.answered(reply, result.throttle_ms)
        else:
            outcome = result.outcome
            if isinstance(outcome, RespondWhenDurable):
                server.group_commit.wait(reply, outcome.response)
            elif isinstance(outcome, RespondWhenData):
                server.long_poll(reply, outcome)
            elif isinstance(outcome, NoResponse):
                self.pending.remove(reply)
                self.flush_responses()
                server.group_commit.kick_soon()
            # Parked: the coordinator answers later (KafkaServer.deliver_ready_replies)

    def answered(self, reply: Reply, throttle_ms: int) -> None:
        """`reply` has its bytes: they go out in their turn; a throttled client is then not read for a while."""
        self.metrics.request_done(reply.api_key, perf_counter() - reply.started)
        self.flush_responses()
        if throttle_ms:
            self.mute(throttle_ms)

    def _cap_request_size(self) -> None:
        """Before authentication a SASL listener takes small requests only (sluice.security.session)."""
        cap = self.session.max_request_bytes if self.session is not None else None
        usual = self.max_request_bytes
        self.frames.max_frame_bytes = min(cap, usual) if cap else usual

    def _answer_then_close(self, reply: Reply, answer: list[Any] | None, delay_ms: int) -> None:
        """A failed login: nothing more is read, the answer (if any) goes out after the delay the login
        throttle asks, then the connection closes."""
        self.closing = True
        if self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True

        def answer_and_close() -> None:
            if self.closed:
                return
            if answer is not None:
                reply.parts = answer
                self.flush_responses()
            else:
                self.pending.remove(reply)
            self.closed = True
            if self.transport is not None:
                self.transport.close()  # after the answer is written

        asyncio.get_running_loop().call_later(delay_ms / 1000, answer_and_close)

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
        ready = 0
        for slot in pending:
            if slot.parts is None:
                break
            out += slot.parts
            ready += 1
        if ready:
            del pending[:ready]
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
