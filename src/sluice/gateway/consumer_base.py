"""What every group/topic consumer of the gateway shares, whichever backend keeps its acks (the offset
tracker over a consumer group, consumer.py; or a Kafka share group, share_consumer.py): the callers waiting
for messages, first come first served, and the dead letters it produces.

A consumer's own thread owns its librdkafka handles; the event loop side only touches the consumer's pure
core under `_lock`. Waiting callers queue a future each; a fetch or an ack wakes the first in line (see
`_signal`). Dead letters are produced from the event loop; the subclass says what a confirmed or failed one
means for its core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from .batches import Batch, Message, count_messages
from .config import ClusterConfig
from .errors import Failure, GatewayError
from .metrics import GatewayMetrics

log = logging.getLogger("sluice.gateway.consumer")

# Produces one dead letter (group, topic, message); returns once Kafka acknowledged it, raises if it did not.
DeadLetterSink = Callable[[str, str, Message], Awaitable[object]]
# How long `stop` waits for dead-letter produces under way, so that those confirmed make the final commit.
_DEAD_LETTER_SETTLE_SECONDS = 5.0


def long_poll_timeout() -> GatewayError:
    return GatewayError(Failure.LONG_POLL_TIMEOUT, "long polling timeout")


def shutting_down() -> GatewayError:
    return GatewayError(Failure.UNAVAILABLE, "service is shutting down")


class TopicConsumer:
    """One (group, topic) of one cluster: waiting callers and dead letters; the subclass fetches and acks."""

    def __init__(
        self,
        cluster: ClusterConfig,
        group: str,
        topic: str,
        client_id: str,
        metrics: GatewayMetrics,
        dead_letter_sink: DeadLetterSink | None = None,
    ) -> None:
        self.cluster = cluster
        self.group = group
        self.topic = topic
        self.client_id = client_id
        self.metrics = metrics
        self.settings = cluster.consumer
        # Bound once: looking up labelled children costs microseconds per call on the hot path.
        labels = (cluster.name, group, topic)
        self._acked_metric = metrics.acked.labels(*labels)
        self._handed_out_metric = metrics.handed_out.labels(*labels, "false")
        self._redelivered_metric = metrics.handed_out.labels(*labels, "true")
        self._dead_letter_metric = metrics.dead_lettered.labels(*labels)
        self.last_used = time.monotonic()
        self.waiters = 0
        self._dead_letter_sink = dead_letter_sink
        self._dead_letter_tasks: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        # Callers waiting for messages, first come first served: a change wakes one of them, and a
        # caller that leaves something ready behind wakes the next. Waking all of them on every fetch
        # cost each stream a wasted turn per fetch.
        self._wakeups: deque[asyncio.Future[int]] = deque()
        self._closing = False
        self._failure: GatewayError | None = None

    # -- what a backend provides ---------------------------------------------------
    def _take(
        self, max_messages: int, auto_ack: bool, max_pending: int | None, max_bytes: int | None
    ) -> tuple[list[Batch], bool]:
        """What this caller may take now, and whether another waiting caller may find more."""
        raise NotImplementedError

    def _next_wake(self) -> float | None:
        """When (time.monotonic()) a waiting caller should look again without being signalled."""
        return None

    def _on_waiting(self) -> None:
        """A caller found nothing to take and is about to wait."""

    def _empty_failure(self) -> GatewayError | None:
        """What a long poll that found nothing answers instead of the timeout, if anything."""
        return None

    def _pending_count(self) -> int:
        """Messages handed out (or parked as dead letters) and not yet acknowledged."""
        raise NotImplementedError

    def _ack_timeout(self) -> float:
        raise NotImplementedError

    def _dead_letter_settled(self, message: Message, confirmed: bool) -> None:
        """The dead-letter topic has `message` (confirmed), or its produce failed."""
        raise NotImplementedError

    def ack_many(self, acks: Sequence[tuple[int, int]], ranges: Sequence[tuple[int, int, int]] = ()) -> None:
        """Acknowledge (partition, offset)s and [begin, end) ranges of messages handed out."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Release waiting callers, settle what can be, and leave the group."""
        raise NotImplementedError

    # -- event loop side -------------------------------------------------------
    @property
    def failed(self) -> bool:
        return self._failure is not None

    def fail(self, message: str, failure: Failure = Failure.INTERNAL) -> None:
        """The consumer cannot go on: every call is answered with this, until it is started over."""
        self._failure = GatewayError(failure, message)
        log.error("%s", message)

    def is_idle(self, now: float) -> bool:
        """Unused for subscription_timeout, and no caller still holds an un-acked message."""
        if self.waiters:
            return False
        quiet = now - self.last_used
        with self._lock:
            pending = self._pending_count()
        if pending:
            # Leaving now would turn the holders' upcoming acks into errors.
            return quiet > max(self.settings.subscription_timeout, self._ack_timeout())
        return quiet > self.settings.subscription_timeout

    async def consume_many(
        self,
        max_messages: int,
        timeout: float,
        *,
        auto_ack: bool = False,
        max_pending: int | None = None,
        max_bytes: int | None = None,
    ) -> list[Batch]:
        """Wait up to `timeout` for the first message, then take what else is ready (up to max_messages).

        `max_pending` replaces max_pending_messages as the per-partition limit of un-acked messages;
        `max_bytes` bounds the reply (its first message always goes).
        """
        self._check_usable()
        if self.waiters >= self.settings.channel_buffer_size:
            raise GatewayError(
                Failure.TOO_MANY_REQUESTS,
                "too many requests: consider increasing consumer.channel_buffer_size "
                f"({self.settings.channel_buffer_size})",
            )
        self.waiters += 1
        self.last_used = time.monotonic()
        deadline = time.monotonic() + timeout
        try:
            hops: int | None = None  # set when woken: how many callers this wakeup has passed through
            while True:
                batches, more_waiting = self._take(max_messages, auto_ack, max_pending, max_bytes)
                if batches:
                    if more_waiting:
                        self._signal()  # more is ready: the next caller takes it
                    return batches
                if hops is not None and hops < len(self._wakeups) and more_waiting:
                    # Nothing this caller may take (its pending limit, say): the next one may. Each
                    # caller passes it on once at most, so a wakeup nobody can use dies out.
                    self._signal(hops + 1)
                now = time.monotonic()
                if now >= deadline:
                    raise self._empty_failure() or long_poll_timeout()
                wait = deadline - now
                with self._lock:
                    wake_at = self._next_wake()
                if wake_at is not None:
                    wait = min(wait, max(wake_at - now, 0.005))
                # Queued before any await: a change from now on finds this caller.
                wakeup: asyncio.Future[int] = self._loop.create_future()
                self._wakeups.append(wakeup)
                self._on_waiting()
                hops = None
                try:
                    hops = await asyncio.wait_for(wakeup, wait)
                except TimeoutError:
                    pass
                except asyncio.CancelledError:
                    if wakeup.done() and not wakeup.cancelled():
                        self._signal(wakeup.result())  # woken, then cancelled: pass the wakeup on
                    raise
                finally:
                    with contextlib.suppress(ValueError):
                        self._wakeups.remove(wakeup)
                self._check_usable()
        finally:
            self.waiters -= 1
            self.last_used = time.monotonic()

    def _count_handed_out(self, batches: list[Batch]) -> None:
        redelivered = count_messages(batch for batch in batches if batch.attempt)
        if redelivered:
            self._redelivered_metric.inc(redelivered)
        fresh = count_messages(batches) - redelivered
        if fresh:
            self._handed_out_metric.inc(fresh)

    def _check_usable(self) -> None:
        if self._closing:
            raise shutting_down()
        if self._failure is not None:
            raise self._failure

    def _signal(self, hops: int = 0) -> None:
        """Wake the longest-waiting caller (it wakes the next if it leaves messages ready)."""
        wakeups = self._wakeups
        while wakeups:
            wakeup = wakeups.popleft()
            if not wakeup.done():
                wakeup.set_result(hops)
                return

    def _signal_all(self) -> None:
        wakeups, self._wakeups = self._wakeups, deque()
        for wakeup in wakeups:
            if not wakeup.done():
                wakeup.set_result(0)

    def _signal_from_thread(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._signal)
        except RuntimeError:
            pass  # the loop is gone: nobody is waiting any more

    def release_waiters(self) -> None:
        self._closing = True
        self._signal_all()

    # -- dead letters ----------------------------------------------------------
    def _park_dead_letters(self, letters: list[Message], retries: Sequence[Message] = ()) -> None:
        """Hand newly given-up messages (counted here, once) and due retries to the dead-letter sink."""
        if letters:
            self._dead_letter_metric.inc(len(letters))
        sink = self._dead_letter_sink
        if sink is None:
            if letters:
                log.warning(
                    "group %s topic %s: dropped %d messages after max_retries (no dead_letter_topic)",
                    self.group,
                    self.topic,
                    len(letters),
                )
            return
        if self._closing:
            # Started now, a produce could finish after the final commit and be produced again after a
            # restart; left alone, the messages are simply unacknowledged and given up again then.
            log.info(
                "group %s topic %s: %d dead letters left unacknowledged at shutdown",
                self.group,
                self.topic,
                len(letters) + len(retries),
            )
            return
        for message in (*letters, *retries):
            task = asyncio.ensure_future(self._produce_dead_letter(sink, message))
            self._dead_letter_tasks.add(task)
            task.add_done_callback(self._dead_letter_tasks.discard)

    async def _produce_dead_letter(self, sink: DeadLetterSink, message: Message) -> None:
        try:
            await sink(self.group, self.topic, message)
        except Exception:  # whatever went wrong, the message must stay un-acked and be tried again
            # The sink logged the target topic and the error; the core schedules the retry.
            self._dead_letter_settled(message, False)
            return
        self._dead_letter_settled(message, True)

    async def _settle_dead_letters(self) -> None:
        tasks = set(self._dead_letter_tasks)
        if not tasks:
            return
        _, unfinished = await asyncio.wait(tasks, timeout=_DEAD_LETTER_SETTLE_SECONDS)
        for task in unfinished:
            # Still un-acked, so uncommitted: nothing is lost, at worst the message is parked twice.
            task.cancel()
        if unfinished:
            await asyncio.wait(unfinished)
