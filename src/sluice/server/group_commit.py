"""Group commit: one fsync covers every append that arrived while the previous one ran."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from time import perf_counter
from typing import Any, Protocol

from sluice.broker.broker import OFFSETS_TOPIC, Broker
from sluice.broker.handlers.produce import refuse_unflushed

log = logging.getLogger("sluice.kafka")

# How long a deferred append (a transaction's Complete record) may wait for a flush to ride along with.
DEFERRED_FLUSH_S = 0.05
# Weight of the newest flush in that average.
FLUSH_AVERAGE_WEIGHT = 0.25
# A connection's window (see GroupCommit) counts only while its last answers went out this recently.
WINDOW_RECENT_S = 0.002
# However much keeps coming, a flush waits for windows at most this long: many clients, each sending now and
# then, would otherwise keep every poll bringing something and the flush waiting.
WINDOW_WAIT_S = 0.0005


class _Connection(Protocol):
    closed: bool
    # Learnt by GroupCommit: how many of its requests one flush released, and when (perf_counter).
    durable_window: int
    durable_released_at: float

    def abort(self, reason: str) -> None: ...

    def cork(self) -> None: ...

    def uncork(self) -> None: ...


class ResponseSlot(Protocol):
    """An answer waiting for durability (sluice.broker.dispatch.Reply)."""

    @property
    def connection(self) -> _Connection: ...

    def fill(self, response: Any) -> None: ...


def flush_partitions(partitions: list[Any]) -> dict[tuple[str, int], str]:
    """fsync each partition on its own: one that fails goes offline, the others are still acknowledged.
    Returns the failures by partition."""
    failed: dict[tuple[str, int], str] = {}
    for state, _ in partitions:
        try:
            state.log.flush()
        except Exception as exc:  # any failure at all must reach the waiting clients
            failed[(state.topic, state.index)] = str(exc)
    return failed


def _per_connection(answers: list[tuple[ResponseSlot, Any]]) -> dict[_Connection, int]:
    """How many of `answers` each connection has, in the order the connections first come."""
    counts: dict[_Connection, int] = {}
    for slot, _ in answers:
        connection = slot.connection
        counts[connection] = counts.get(connection, 0) + 1
    return counts


class GroupCommit:
    """One fsync covers every append that arrived while the previous one ran.

    Long fsyncs run on one thread of their own (short ones on the loop itself, see below). The loop hands
    that thread the partitions to flush and hears back through call_soon_threadsafe: a fraction of what an
    executor future and a task cost.

    An answer that starts waiting while no flush runs does not start one at once: the flush starts once
    the loop has handled every read of its current iteration (call_soon), so the requests that arrived
    together, on one connection or many, share one fsync, and the fsync thread does not fight the loop
    for the GIL while the loop still handles them. Each fsync costs a wake-up of that thread, the fsync
    and a wake-up of the loop, so fewer of them is most of what a small acknowledged request saves.

    A flush expected to be short runs on the loop itself. Handing it to the thread costs the loop and the
    thread three contended GIL hand-offs, futex wake-ups and a self-pipe write: measured on ext4 in a VM,
    more CPU (about 20 us per small produce request) than it saves, as there is little for the loop to
    overlap with an fsync of 0.1 ms. "Expected" is a moving average of the flushes' wall time: once they
    take longer (large appends, a slow disk) they go back to the thread, so the loop does not stall on
    them and keeps serving reads meanwhile.

    A connection that pipelines (librdkafka's max.in.flight, 5 by default) gets its answers in groups and
    sends a new request per answer it reads, one write each, while the loop already handles the first
    ones. Flushed as soon as the loop has read what came, its window splits into two groups that take
    turns, each with its own fsync. So each connection's window is learnt (the most of its requests one
    flush released), and while a connection answered less than WINDOW_RECENT_S ago has fewer requests
    waiting than its window, the flush lets the loop poll its sockets once more first, for as long as
    each poll brings more and at most WINDOW_WAIT_S. That costs a loop iteration, not a timer (uvloop's
    have millisecond resolution): a client with one request in flight (acks=all at a steady rate) is not
    held back, and a poll that brings nothing teaches the smaller window.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.waiting: list[tuple[ResponseSlot, Any]] = []
        # The flush under way: the responses it will release and the partitions it covers.
        self.flushing: tuple[list[tuple[ResponseSlot, Any]], list[Any]] | None = None
        self._jobs: queue.SimpleQueue[list[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle: asyncio.Future[None] | None = None
        self._deferred_timer: asyncio.TimerHandle | None = None
        self._start_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # Flushes run on the loop while they take less than this on average (see the class comment).
        self._on_loop_below_s = broker.config.fsync_on_loop_below_ms / 1000
        self.average_flush_s = 0.0  # of the flushes that did an fsync
        # While the next flush waits for windows to fill: how many answers waited at the last look, and since
        # when it waits.
        self._held_at = 0
        self._held_since = 0.0
        self._window_ran_out = False

    def wait(self, slot: ResponseSlot, response: Any) -> None:
        """Fill `slot` with `response` once everything appended so far is on disk (by a flush that starts
        after the loop's current iteration, or by the next one if a flush runs)."""
        self.waiting.append((slot, response))
        self.kick_soon()

    def kick_soon(self) -> None:
        """`kick` once the loop has handled every read of its current iteration."""
        if self.flushing is None and not self._start_scheduled:
            self._start_scheduled = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()  # looked up once: that costs a getpid each time
            self._loop.call_soon(self._start_scheduled_flush)

    def _start_scheduled_flush(self) -> None:
        if self.flushing is None and self._windows_unfilled():
            if not self._held_at:
                self._held_since = perf_counter()
            if len(self.waiting) > self._held_at and perf_counter() - self._held_since < WINDOW_WAIT_S:
                # Once more after the loop's next poll of its sockets: a callback scheduled from a
                # callback runs in the next iteration.
                self._held_at = len(self.waiting)
                assert self._loop is not None
                self._loop.call_soon(self._start_scheduled_flush)
                return
            self._window_ran_out = True  # that poll brought nothing (or the wait is over)
        self._held_at = 0
        self._start_scheduled = False
        self.kick()

    def _windows_unfilled(self) -> bool:
        """Whether a waiting connection's window promises more requests."""
        recent = perf_counter() - WINDOW_RECENT_S
        return any(
            connection.durable_window > count and connection.durable_released_at > recent
            for connection, count in _per_connection(self.waiting).items()
        )

    def wait_for_partition(self, slot: ResponseSlot, response: Any, key: tuple[str, int]) -> None:
        """Fill `slot` with `response` once everything appended to partition `key` so far is on disk: at once
        when it already is, with the flush under way when that flush covers it, else with the next one.

        A coordinator's answer that wrote nothing may still rest on a record an earlier call wrote (a
        follower's SyncGroup reads the assignment its leader's SyncGroup just appended): it must not reach
        its client before that record is durable, and need not wait for anything else."""
        broker = self.broker
        if key in broker.deferred:
            broker.undefer_flushes()
        if key in broker.unflushed:
            self.wait(slot, response)
        elif self.flushing is not None and any((s.topic, s.index) == key for s, _ in self.flushing[1]):
            self.flushing[0].append((slot, response))
        else:
            slot.fill(response)

    def kick(self) -> None:
        """Start a flush if appends or responses wait for one and none is running.

        Appends that nobody waits for (acks=0) need one too: until it ends they are not visible to readers.
        """
        if self.flushing is None and (self.waiting or self.broker.unflushed):
            self._start()
        elif self.broker.deferred and self._deferred_timer is None:
            self._deferred_timer = asyncio.get_running_loop().call_later(
                DEFERRED_FLUSH_S, self._flush_deferred
            )

    def _flush_deferred(self) -> None:
        self._deferred_timer = None
        self.broker.undefer_flushes()
        self.kick()

    def _start(self) -> None:
        batch, self.waiting = self.waiting, []
        partitions = self.broker.begin_flush()
        self.flushing = (batch, partitions)
        if self.average_flush_s < self._on_loop_below_s:
            started = perf_counter()
            failed = flush_partitions(partitions)
            try:
                self._flushed(failed, perf_counter() - started)
            except Exception:  # as a loop callback's would be: logged, and the caller (a timer) goes on
                log.exception("group commit: answering after the fsync failed")
            return
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
            started = perf_counter()
            failed = flush_partitions(partitions)
            try:
                loop.call_soon_threadsafe(self._flushed, failed, perf_counter() - started)
            except RuntimeError:
                return  # the loop is closed: nobody is left to answer

    def _flushed(self, failed: dict[tuple[str, int], str], seconds: float = 0.0) -> None:
        assert self.flushing is not None
        if self.flushing[1]:  # a flush with no partitions did no fsync
            self.broker.metrics.fsync.observe(seconds)
            self.average_flush_s += (seconds - self.average_flush_s) * FLUSH_AVERAGE_WEIGHT
        (batch, partitions), self.flushing = self.flushing, None
        broker = self.broker
        broker.end_flush(
            [(state, end) for state, end in partitions if (state.topic, state.index) not in failed]
        )
        if failed:
            log.error("fsync failed, nothing they hold is acknowledged: %s", failed)
        # The answers one flush releases to a connection go out in one write, in the order they were answered.
        released = _per_connection(batch)
        ran_out, self._window_ran_out = self._window_ran_out, False
        now = perf_counter()
        for connection, count in released.items():
            connection.cork()
            if ran_out or count > connection.durable_window:
                connection.durable_window = count
            connection.durable_released_at = now
        try:
            for slot, response in batch:
                if slot.connection.closed:
                    continue
                if failed:
                    refused = refuse_unflushed(broker, response, failed)
                    if refused is None and (OFFSETS_TOPIC, 0) in failed:
                        slot.connection.abort("storage error")  # a group write that is not durable: no answer
                        continue
                    response = response if refused is None else refused
                slot.fill(response)
        finally:
            for connection in released:
                connection.uncork()
        self.kick()
        if self.flushing is None and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def drain(self) -> None:
        """Wait until no flush runs or is needed."""
        self.broker.undefer_flushes()
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
