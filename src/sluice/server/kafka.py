"""The Kafka listener: the thin asyncio shell around the broker.

It owns sockets, timers and the fsync thread; the broker owns state. Requests on one connection are decoded
and dispatched as they arrive (so a pipelining producer's appends share one fsync), and their responses are
written strictly in request order, as Kafka clients require.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from time import perf_counter
from typing import Any

from sluice.broker.api import (
    HANDLERS,
    NoResponse,
    Parked,
    RequestContext,
    Respond,
    RespondWhenData,
    RespondWhenDurable,
)
from sluice.broker.broker import OFFSETS_TOPIC, Broker
from sluice.broker.handlers.metadata import api_versions_body
from sluice.broker.handlers.produce import refuse_unflushed
from sluice.broker.quotas import request_time_throttle
from sluice.errors import ErrorCode, KafkaError, ProtocolError
from sluice.protocol.framing import FrameBuffer, coalesce, frame
from sluice.protocol.headers import (
    API_VERSIONS_KEY,
    parse_request_header,
    peek_request_header,
    response_header,
)
from sluice.protocol.messages import APIS_BY_KEY, request_codecs, response_codecs
from sluice.security.session import PLAINTEXT, Session, uses_sasl, uses_tls
from sluice.server.auth import AuthGate
from sluice.server.tls import TlsContext, peer_principal

log = logging.getLogger("sluice.kafka")

# Pause reading from a client whose unsent responses exceed this (a consumer that stopped reading).
WRITE_BUFFER_HIGH = 64 * 1024 * 1024
# How long a deferred append (a transaction's Complete record) may wait for a flush to ride along with.
DEFERRED_FLUSH_S = 0.05


def now_ms() -> int:
    return int(time.time() * 1000)


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
        version = self.api_version if version is None else version
        throttle = getattr(response, "throttle_time_ms", 0)
        if self.throttle_ms > throttle:
            throttle = self.throttle_ms
            if hasattr(response, "throttle_time_ms"):
                response.throttle_time_ms = throttle  # the client backs off too (KIP-219)
        api = APIS_BY_KEY[self.api_key]
        flexible = version in api.response_def.flexible
        parts: list[Any] = [response_header(self.correlation_id, self.api_key, flexible)]
        response_codecs(self.api_key)[version].encode_into(response, parts)
        self.parts = parts
        self.connection.server.broker.metrics.request_done(self.api_key, perf_counter() - self.started)
        self.connection.flush_responses()
        if throttle:
            self.connection.mute(throttle)


class LongPoll:
    __slots__ = ("done", "outcome", "slot", "timer")

    def __init__(self, slot: ResponseSlot, outcome: RespondWhenData) -> None:
        self.slot = slot
        self.outcome = outcome
        self.timer: asyncio.TimerHandle | None = None
        self.done = False


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: KafkaServer, listener: str = PLAINTEXT) -> None:
        self.server = server
        self.listener = listener
        self.session: Session | None = None
        self.auth: AuthGate | None = None
        self.frames = FrameBuffer(server.broker.config.max_request_bytes)
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
        broker = self.server.broker
        if broker.quotas.configs and (delay := broker.quotas.connection_throttle(self.peer_host, now_ms())):
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
            self.auth = AuthGate(self, self.session)  # other listeners have nothing to gate

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
        for body in frames:
            if self.closed:
                return
            self.handle_frame(body)
        self._update_reading()

    # ----- requests -----

    def abort(self, reason: str) -> None:
        if not self.closed:
            log.info("closing connection from %s: %s", self.peer_host, reason)
            self.closed = True
            if self.transport is not None:
                self.transport.abort()

    def handle_frame(self, body: memoryview) -> None:
        server = self.server
        auth = self.auth
        if auth is not None and auth.raw_token(body):
            return
        try:
            header = peek_request_header(body)
            if auth is not None and not auth.admits(header.api_key):
                return
            spec = HANDLERS.handlers.get(header.api_key)
            if spec is None:
                self.abort(f"unknown API key {header.api_key}")
                return
            if header.api_version not in spec.versions:
                if header.api_key == API_VERSIONS_KEY:
                    # Kafka answers an ApiVersions it cannot parse in v0, so the client can pick a version.
                    slot = self._new_slot(header.api_key, 0, header.correlation_id)
                    slot.fill(api_versions_body(ErrorCode.UNSUPPORTED_VERSION), 0)
                    return
                self.abort(f"unsupported version {header.api_version} of API {header.api_key}")
                return
            flexible = header.api_version in APIS_BY_KEY[header.api_key].request_def.flexible
            header, pos = parse_request_header(body, flexible)
            request, _ = request_codecs(header.api_key)[header.api_version].decode(body, pos)
        except ProtocolError as exc:
            self.abort(f"malformed request: {exc}")
            return
        ctx = RequestContext(
            header.api_key,
            header.api_version,
            header.correlation_id,
            header.client_id,
            self.peer_host,
            now_ms(),
            listener=self.listener,
            session=self.session,
        )
        slot = None
        outcome: Any
        try:
            slot = self._new_slot(header.api_key, header.api_version, header.correlation_id)
            ctx.reply_token = slot
            outcome = server.broker.dispatch(ctx, request)
            if server.broker.quotas.configs:
                slot.throttle_ms = request_time_throttle(
                    server.broker, ctx, perf_counter() - slot.started, ctx.now_ms
                )
        except KafkaError as exc:  # a request refused as a whole (e.g. a group write on a full disk)
            log.error("closing connection from %s: %s", self.peer_host, exc.message)
            self.abort(exc.message)
            return
        except Exception:
            log.exception("handler for API %d v%d failed", header.api_key, header.api_version)
            self.abort("internal error")
            return
        if auth is not None and auth.after_dispatch(slot, outcome):
            pass
        elif isinstance(outcome, Respond):
            slot.fill(outcome.response)
        elif isinstance(outcome, RespondWhenDurable):
            server.group_commit.wait(slot, outcome.response)
        elif isinstance(outcome, RespondWhenData):
            server.long_poll(slot, outcome)
        elif isinstance(outcome, NoResponse):
            self.pending.remove(slot)
            self.flush_responses()
            server.group_commit.kick()
        elif isinstance(outcome, Parked):
            pass
        server.deliver_ready_replies()

    def _new_slot(self, api_key: int, api_version: int, correlation_id: int) -> ResponseSlot:
        slot = ResponseSlot(self, api_key, api_version, correlation_id)
        self.pending.append(slot)
        return slot

    def flush_responses(self) -> None:
        """Write every response at the head of the order that is ready."""
        if self.closed or self.transport is None:
            return
        pending = self.pending
        if self.tls:
            # One write of joined small parts: see framing.coalesce (a TLS record per part otherwise).
            out: list[bytes | bytearray | memoryview] = []
            while pending and pending[0].parts is not None:
                out += frame(pending.popleft().parts or [])
            if out:
                self.transport.writelines(coalesce(out))
        else:
            while pending and pending[0].parts is not None:
                slot = pending.popleft()
                self.transport.writelines(frame(slot.parts or []))
        self._update_reading()

    def mute(self, throttle_ms: int) -> None:
        if self.muted or self.closed:
            return
        self.muted = True
        asyncio.get_running_loop().call_later(throttle_ms / 1000, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
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


class GroupCommit:
    """One fsync covers every append that arrived while the previous one ran.

    The fsyncs run on one thread of their own. The loop hands it the partitions to flush and hears back
    through call_soon_threadsafe: per produce request that is a fraction of what an executor future and
    a task cost, and this path runs once per produce request.
    """

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.waiting: list[tuple[ResponseSlot, Any]] = []
        # The flush under way: the responses it will release and the partitions it covers.
        self.flushing: tuple[list[tuple[ResponseSlot, Any]], list[Any]] | None = None
        self._jobs: queue.SimpleQueue[list[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle: asyncio.Future[None] | None = None
        self._deferred_timer: asyncio.TimerHandle | None = None

    def wait(self, slot: ResponseSlot, response: Any) -> None:
        """Fill `slot` with `response` once everything appended so far is on disk."""
        self.waiting.append((slot, response))
        self.kick()

    def kick(self) -> None:
        """Start a flush if appends or responses wait for one and none is running.

        Appends that nobody waits for (acks=0) need one too: until it ends they are not visible to readers.
        """
        if self.flushing is None and (self.waiting or self.server.broker.unflushed):
            self._start()
        elif self.server.broker.deferred and self._deferred_timer is None:
            self._deferred_timer = asyncio.get_running_loop().call_later(
                DEFERRED_FLUSH_S, self._flush_deferred
            )

    def _flush_deferred(self) -> None:
        self._deferred_timer = None
        self.server.broker.undefer_flushes()
        self.kick()

    def _start(self) -> None:
        batch, self.waiting = self.waiting, []
        partitions = self.server.broker.begin_flush()
        self.flushing = (batch, partitions)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._flush_forever,
                args=(asyncio.get_running_loop(),),
                name="sluice-fsync",
                daemon=True,
            )
            self._thread.start()
        self._jobs.put(partitions)

    def _flush_forever(self, loop: asyncio.AbstractEventLoop) -> None:
        while (partitions := self._jobs.get()) is not None:
            # Each partition on its own: one that fails goes offline, the others are still acknowledged.
            failed: dict[tuple[str, int], str] = {}
            started = perf_counter()
            for state, _ in partitions:
                try:
                    state.log.flush()
                except Exception as exc:  # any failure at all must reach the waiting clients
                    failed[(state.topic, state.index)] = str(exc)
            try:
                loop.call_soon_threadsafe(self._flushed, failed, perf_counter() - started)
            except RuntimeError:
                return  # the loop is closed: nobody is left to answer

    def _flushed(self, failed: dict[tuple[str, int], str], seconds: float = 0.0) -> None:
        assert self.flushing is not None
        if self.flushing[1]:  # a flush with no partitions did no fsync
            self.server.broker.metrics.fsync.observe(seconds)
        (batch, partitions), self.flushing = self.flushing, None
        broker = self.server.broker
        broker.end_flush(
            [(state, end) for state, end in partitions if (state.topic, state.index) not in failed]
        )
        if failed:
            log.error("fsync failed, nothing they hold is acknowledged: %s", failed)
        for slot, response in batch:
            if slot.connection.closed:
                continue
            if failed and not refuse_unflushed(broker, response, failed) and (OFFSETS_TOPIC, 0) in failed:
                slot.connection.abort("storage error")  # a group write that is not durable: no answer
            else:
                slot.fill(response)
        self.kick()
        if self.flushing is None and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def drain(self) -> None:
        """Wait until no flush runs or is needed."""
        self.server.broker.undefer_flushes()
        self.kick()
        while self.flushing is not None:
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle

    def close(self) -> None:
        if self._deferred_timer is not None:
            self._deferred_timer.cancel()
            self._deferred_timer = None
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.connections: set[KafkaConnection] = set()
        self.group_commit = GroupCommit(self)
        self.watchers: dict[tuple[str, int], set[LongPoll]] = {}
        self.server: asyncio.Server | None = None
        self.servers: list[asyncio.Server] = []
        self.tls: TlsContext | None = None
        self._tick_timer: asyncio.TimerHandle | None = None
        self._tick_deadline: int | None = None
        self._sweep_timer: asyncio.TimerHandle | None = None
        broker.on_data = self._on_data

    async def start(self) -> tuple[str, int]:
        """Open every listener; returns the first one's address."""
        config = self.broker.config
        config.validate()
        loop = asyncio.get_running_loop()
        specs = config.listener_specs()
        if any(uses_tls(protocol) for protocol, _, _ in specs):
            self.tls = TlsContext.from_config(config)
        first: tuple[str, int] | None = None
        for protocol, host, port in specs:
            server = await loop.create_server(
                lambda protocol=protocol: KafkaConnection(self, protocol),
                host,
                port,
                reuse_address=True,
                ssl=self.tls.context if self.tls is not None and uses_tls(protocol) else None,
            )
            self.servers.append(server)
            bound_host, bound_port = server.sockets[0].getsockname()[:2]
            config.bound_ports[protocol] = bound_port
            if first is None:
                first = (bound_host, bound_port)
                self.server = server
                if not config.listeners and config.listen_port == 0:
                    config.listen_port = bound_port
            log.info("listener %s://%s:%d", protocol, bound_host, bound_port)
        self.schedule_tick()
        self._schedule_sweep()
        assert first is not None
        return first

    def reload_tls(self) -> bool:
        """SIGHUP: load the certificate files again; open connections keep theirs."""
        return self.tls.reload() if self.tls is not None else False

    # ----- idle and stalled connections -----

    def _sweep_interval(self) -> float:
        config = self.broker.config
        return min(1.0, config.connections_max_idle_ms / 2000, config.partial_request_timeout_ms / 2000)

    def _schedule_sweep(self) -> None:
        self._sweep_timer = asyncio.get_running_loop().call_later(
            self._sweep_interval(), self._sweep_connections
        )

    def _sweep_connections(self) -> None:
        """Close idle connections and ones stalled mid-request; give quiet ones' receive buffers back."""
        config = self.broker.config
        now = time.monotonic()
        for connection in list(self.connections):
            quiet = now - connection.last_received
            if connection.frames.buffered and quiet * 1000 > config.partial_request_timeout_ms:
                connection.abort(f"sent part of a request, then nothing for {quiet:.1f} s")
            elif not connection.pending and quiet * 1000 > config.connections_max_idle_ms:
                connection.abort(f"idle for {quiet:.1f} s (connections_max_idle_ms)")
            elif quiet >= self._sweep_interval():
                connection.frames.release()
        self._schedule_sweep()

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.connections):
            connection.abort("shutting down")
        await self.group_commit.drain()
        self.group_commit.close()
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()

    # ----- long polls -----

    def long_poll(self, slot: ResponseSlot, outcome: RespondWhenData) -> None:
        poll = LongPoll(slot, outcome)
        loop = asyncio.get_running_loop()
        delay = max(0.0, (outcome.deadline_ms - now_ms()) / 1000)
        poll.timer = loop.call_later(delay, self._finish_poll, poll, True)
        for key in outcome.watch:
            self.watchers.setdefault(key, set()).add(poll)

    def _on_data(self, key: tuple[str, int]) -> None:
        polls = self.watchers.get(key)
        if not polls:
            return
        loop = asyncio.get_running_loop()
        for poll in list(polls):
            loop.call_soon(self._finish_poll, poll, False)

    def _finish_poll(self, poll: LongPoll, final: bool) -> None:
        if poll.done or poll.slot.connection.closed:
            self._drop_poll(poll)
            return
        try:
            response = poll.outcome.retry(now_ms(), final)
        except Exception:
            log.exception("long poll retry failed")
            poll.slot.connection.abort("internal error")
            self._drop_poll(poll)
            return
        if response is None:
            return
        self._drop_poll(poll)
        poll.slot.fill(response)

    def _drop_poll(self, poll: LongPoll) -> None:
        poll.done = True
        if poll.timer is not None:
            poll.timer.cancel()
        for key in poll.outcome.watch:
            polls = self.watchers.get(key)
            if polls is not None:
                polls.discard(poll)
                if not polls:
                    del self.watchers[key]

    def forget_connection(self, connection: KafkaConnection) -> None:
        for key in list(self.watchers):
            for poll in list(self.watchers.get(key, ())):
                if poll.slot.connection is connection:
                    self._drop_poll(poll)

    # ----- parked requests and timers (consumer groups) -----

    def deliver_ready_replies(self) -> None:
        for token, response, durable in self.broker.take_ready_replies():
            slot = token
            if not isinstance(slot, ResponseSlot) or slot.connection.closed:
                continue
            if durable:
                self.group_commit.wait(slot, response)
            else:
                slot.fill(response)
        self.schedule_tick()

    def schedule_tick(self) -> None:
        deadline = self.broker.next_deadline()
        if deadline == self._tick_deadline:
            return  # the timer already set is the right one (this runs after every request)
        if self._tick_timer is not None:
            self._tick_timer.cancel()
            self._tick_timer = None
        self._tick_deadline = deadline
        if deadline is None:
            return
        loop = asyncio.get_running_loop()
        self._tick_timer = loop.call_later(max(0.0, (deadline - now_ms()) / 1000), self._tick)

    def _tick(self) -> None:
        self._tick_timer = None
        self._tick_deadline = None
        try:
            self.broker.tick(now_ms())
        except Exception:
            log.exception("broker timer failed")
        # Timers append too (transaction timeouts write abort markers): they only become visible once flushed.
        self.group_commit.kick()
        self.deliver_ready_replies()


__all__ = ["KafkaServer"]
