"""The Kafka listener: the thin asyncio shell around the broker.

It owns the listening sockets, the connections (sluice.server.connection), the fsync thread
(sluice.server.group_commit), long polls and the coordinators' timers; the broker owns state.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import OrderedDict
from itertools import islice

from sluice.broker.api import RespondWhenData
from sluice.broker.broker import Broker
from sluice.broker.dispatch import Dispatcher, Reply, build_dispatcher
from sluice.security.session import uses_tls
from sluice.server.admission import DESCRIPTORS, Admission
from sluice.server.clock import now_ms
from sluice.server.connection import KafkaConnection
from sluice.server.group_commit import GroupCommit
from sluice.server.tls import TlsContext
from sluice.storage.file_cache import SEGMENT_FILES

log = logging.getLogger("sluice.kafka")
# At the open-file bound, a new connection closes the quietest idle one among this many of the quietest:
# when they are all busy, the new one is refused rather than the walk going over every connection.
ROOM_CANDIDATES = 64


class LongPoll:
    __slots__ = ("done", "outcome", "reply", "timer")

    def __init__(self, reply: Reply, outcome: RespondWhenData) -> None:
        self.reply = reply
        self.outcome = outcome
        self.timer: asyncio.TimerHandle | None = None
        self.done = False


class KafkaServer:
    def __init__(self, broker: Broker, dispatcher: Dispatcher | None = None) -> None:
        self.broker = broker
        self.dispatcher = dispatcher if dispatcher is not None else build_dispatcher(broker)
        # Open connections, the one that received nothing for the longest first: the idle sweep and a
        # new connection at the open-file bound look at that end only.
        self.connections: OrderedDict[KafkaConnection, None] = OrderedDict()
        self.holding: set[KafkaConnection] = set()
        self._making_room: set[KafkaConnection] = set()  # closed to let a new one in, not yet gone
        self.admission = Admission(
            broker.config, resource.getrlimit(resource.RLIMIT_NOFILE)[0], SEGMENT_FILES
        )
        self.group_commit = GroupCommit(broker)
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

    # ----- admission, idle and stalled connections -----

    def admit(self, connection: KafkaConnection) -> bool:
        """Keep a new connection unless it exceeds a bound (sluice.server.admission); at the open-file
        bound the quietest idle connection makes room for it."""
        admission = self.admission
        host = connection.peer_host
        refused = admission.refusal(host, len(self.connections) - len(self._making_room))
        if refused is not None and refused[0] == DESCRIPTORS and self._make_room(host):
            refused = None
        if refused is not None:
            bound, why = refused
            self.broker.metrics.connections_refused[bound] += 1
            admission.log.warn(bound, time.monotonic(), "refusing connection from %s: %s", host, why)
            return False
        connection.counted = True
        self.connections[connection] = None
        admission.opened(host, len(self.connections))
        return True

    def _make_room(self, host: str) -> bool:
        """Close the connection quiet the longest that owes nothing and is in no request, for one from
        `host`; False when the quietest ones are all busy."""
        now = time.monotonic()
        for candidate in islice(self.connections, ROOM_CANDIDATES + len(self._making_room)):
            if candidate.closed or candidate.pending or candidate.frames.buffered:
                continue
            quiet = now - candidate.last_received
            self.admission.log.warn(
                "make-room",
                now,
                "closing the connection from %s, quiet for %.1f s, to let one from %s in: the open-file "
                "limit leaves room for %d connections",
                candidate.peer_host,
                quiet,
                host,
                self.admission.descriptor_bound,
            )
            self.broker.metrics.connections_closed_for_room += 1
            candidate.abort(f"closed for a new connection at the open-file bound, quiet for {quiet:.1f} s")
            self._making_room.add(candidate)  # its descriptor goes when the loop runs its connection_lost
            return True
        return False

    def forget(self, connection: KafkaConnection) -> None:
        if connection.counted:
            connection.counted = False
            del self.connections[connection]
            self._making_room.discard(connection)
            self.admission.closed(connection.peer_host, len(self.connections))
        self.holding.discard(connection)
        self.forget_connection(connection)

    def _sweep_interval(self) -> float:
        config = self.broker.config
        return min(1.0, config.connections_max_idle_ms / 2000, config.partial_request_timeout_ms / 2000)

    def _schedule_sweep(self) -> None:
        self._sweep_timer = asyncio.get_running_loop().call_later(
            self._sweep_interval(), self._sweep_connections
        )

    def _sweep_connections(self) -> None:
        """Close idle connections and ones stalled mid-request; give quiet ones' receive buffers back. Looks
        only at the connections that read lately and at the quietest end: an idle fleet costs nothing."""
        config = self.broker.config
        now = time.monotonic()
        interval = self._sweep_interval()
        for connection in list(self.holding):
            quiet = now - connection.last_received
            if connection.closed:
                self.holding.discard(connection)
            elif connection.frames.buffered:
                if quiet * 1000 > config.partial_request_timeout_ms:
                    connection.abort(f"sent part of a request, then nothing for {quiet:.1f} s")
            elif quiet >= interval:
                connection.frames.release()
                connection.holding = False
                self.holding.discard(connection)
        idle: list[KafkaConnection] = []
        for connection in self.connections:
            quiet = now - connection.last_received
            if quiet * 1000 <= config.connections_max_idle_ms:
                break
            if not connection.pending and not connection.closed:
                idle.append(connection)
        for connection in idle:
            connection.abort(f"idle for {now - connection.last_received:.1f} s (connections_max_idle_ms)")
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

    def long_poll(self, reply: Reply, outcome: RespondWhenData) -> None:
        poll = LongPoll(reply, outcome)
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
        if poll.done or poll.reply.connection.closed:
            self._drop_poll(poll)
            return
        try:
            response = poll.outcome.retry(now_ms(), final)
        except Exception:
            log.exception("long poll retry failed")
            poll.reply.connection.abort("internal error")
            self._drop_poll(poll)
            return
        if response is None:
            return
        self._drop_poll(poll)
        poll.reply.fill(response)

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
                if poll.reply.connection is connection:
                    self._drop_poll(poll)
        shares = self.broker.shares
        if shares is not None and connection.session is not None and shares.sessions.sessions:
            # Share sessions end with their connection: what their members held goes back at once.
            shares.connection_closed(connection.session, now_ms())
            self.group_commit.kick()

    # ----- parked requests and timers (consumer groups) -----

    def deliver_ready_replies(self, timers_touched: bool = True) -> None:
        """Send the answers of parked requests that became ready, then set the timer for the next deadline.

        `timers_touched` False: nothing since the last call can have moved a deadline (the connection read
        only Produce and Fetch requests), so unless a parked answer went out the timer set stays right and
        the deadlines, a walk over every group and transaction, are not recomputed."""
        ready = self.dispatcher.take_ready_replies()
        for reply, response, after in ready:
            if not isinstance(reply, Reply) or reply.connection.closed:
                continue
            if after is not None:
                self.group_commit.wait_for_partition(reply, response, after)
            else:
                reply.fill(response)
        if ready or timers_touched:
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
