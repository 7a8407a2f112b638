"""The share backend of one (cluster, group, topic): kafka-pixy's consume-and-ack on a Kafka share group.

The gateway is a member of the share group through confluent-kafka ShareConsumers in explicit
acknowledgement mode, driven by one thread; the pure `ShareDeliveries` core (share_core.py) says what to
hand out and what to acknowledge. A member's poll returns a batch, and it may poll again only once every
record of that batch is acknowledged (ACCEPT, RELEASE or REJECT). So:

* the thread polls only while callers wait (or while a fetch it started may still bring records: librdkafka
  keeps fetching until one does), so that records are not acquired for nobody;
* callers take the batch's records one by one (or many, for ConsumeBatch and ConsumeStream); their acks
  become ACCEPTs, sent with the next poll, or every flush interval while callers still hold records;
* a record not acked by the end of its lock (less a margin) is released, and the broker delivers it again;
* when callers hold the last records of a batch for long (a caller gone, a slow one) while others wait, the
  member hands over: it unsubscribes, so its partitions go to the group's other members, and only waits for
  those acks (or their locks), while a new member fetches. At most `share_members` members run at once.

Several gateways (and any other share consumers) may serve the same group: the broker hands each record to
one member at a time. A gateway stopped cleanly sends its acks and closes its members; killed, its
connections drop. Either way the broker releases what the gateway still held, at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import IllegalStateException, KafkaError, KafkaException, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient

from .batches import Batch, Message
from .config import ClusterConfig
from .consumer_base import DeadLetterSink, TopicConsumer
from .errors import Failure, not_handed_out
from .fetched import batches_of
from .metrics import GatewayMetrics
from .share_core import ACCEPT, Settlement, ShareAck, ShareDeliveries
from .share_groups import DEFAULT_LOCK_SECONDS, prepare_share_group

log = logging.getLogger("sluice.gateway.consumer")

_POLL_SECONDS = 0.1
# The longest the thread sleeps with nothing to do (it is woken for whatever needs it sooner).
_IDLE_SECONDS = 0.5
# How long callers may hold a member's last records while others wait before a new member takes over.
_HANDOVER_SECONDS = 1.0
_ADMIN_TIMEOUT_SECONDS = 10.0


@dataclass(eq=False)
class _Member:
    """One ShareConsumer of this gateway in the group."""

    number: int
    handle: ShareConsumer
    # The end of its last poll; whether librdkafka may still be fetching for it (its last poll found
    # nothing, and librdkafka fetches until records come).
    last_poll_end: float = field(default_factory=time.monotonic)
    fetch_pending: bool = False
    # Acks given to the handle and not yet sent to the broker, since when.
    unsent_since: float | None = None
    handed_over: bool = False
    # Its share session is gone (the broker restarted, say): what it holds is the broker's again.
    session_lost: bool = False


# Acks refused for these mean the member's share session is gone, and with it every record it acquired.
_SESSION_LOST = frozenset({KafkaError.INVALID_SHARE_SESSION_EPOCH, KafkaError.SHARE_SESSION_NOT_FOUND})


class ShareTopicConsumer(TopicConsumer):
    def __init__(
        self,
        cluster: ClusterConfig,
        group: str,
        topic: str,
        client_id: str,
        metrics: GatewayMetrics,
        admin: AdminClient,
        dead_letter_sink: DeadLetterSink | None = None,
    ) -> None:
        super().__init__(cluster, group, topic, client_id, metrics, dead_letter_sink)
        self.core = ShareDeliveries(DEFAULT_LOCK_SECONDS, self.settings.max_retries)
        labels = (cluster.name, group, topic)
        self._late_metric = metrics.late_acks.labels(*labels)
        self._refused_metric = metrics.refused_acks.labels(*labels)
        self._admin = admin
        self._members: dict[int, _Member] = {}
        self._numbers = 0
        self._stopping = threading.Event()
        self._wake = threading.Event()
        # Since when callers wait while the active member only waits on the acks of what callers hold.
        self._waiting_since: float | None = None
        self._flush_seconds = self.settings.offsets_commit_interval
        self._thread = threading.Thread(target=self._run, name=f"gw-share-{group}-{topic}", daemon=True)
        self._thread.start()

    # -- event loop side -------------------------------------------------------
    def _pending_count(self) -> int:
        return self.core.held_count()

    def _ack_timeout(self) -> float:
        return self.core.lock_seconds

    def _on_waiting(self) -> None:
        if not self.core.has_ready():
            self._wake.set()  # demand: the thread fetches

    def ack_many(self, acks: Sequence[tuple[int, int]], ranges: Sequence[tuple[int, int, int]] = ()) -> None:
        """Acknowledge (partition, offset)s and [begin, end) ranges; all valid acks are applied, then the first
        offset this gateway never handed out is reported as INVALID_ARGUMENT. An ack after the message's
        lock ran out is accepted but late: the message is delivered again."""
        self.last_used = now = time.monotonic()
        acked = late = 0
        bad: tuple[int, int] | None = None
        with self._lock:
            core = self.core
            for partition, offset in acks:
                outcome = core.ack(partition, offset, now)
                if outcome is ShareAck.ACKED:
                    acked += 1
                elif outcome is ShareAck.LATE:
                    late += 1
                elif outcome is ShareAck.NOT_HANDED_OUT and bad is None:
                    bad = (partition, offset)
            if ranges:
                newly, too_late, bad_range = core.ack_ranges(ranges, now)
                acked, late, bad = acked + newly, late + too_late, bad or bad_range
            freed = core.take_freed()
        if freed:
            self._wake.set()  # a member may fetch again, or close
        if acked:
            self._acked_metric.inc(acked)
        if late:
            self._late_metric.inc(late)
        if bad is not None:
            raise not_handed_out(self.group, self.topic, bad, bool(ranges))

    def _take(
        self, max_messages: int, auto_ack: bool, max_pending: int | None, max_bytes: int | None
    ) -> tuple[list[Batch], bool]:
        # max_pending does not apply: the broker caps what a share-partition has in flight.
        now = time.monotonic()
        freed = False
        with self._lock:
            batches = self.core.take(now, max_messages, max_bytes)
            more_waiting = bool(self._wakeups) and self.core.has_ready()
            if auto_ack and batches:
                for batch in batches:
                    for offset in batch.offsets:
                        self.core.ack(batch.partition, offset, now)
                freed = self.core.take_freed()
        if batches:
            self._count_handed_out(batches)
            if auto_ack:
                self._acked_metric.inc(sum(len(batch.offsets) for batch in batches))
        if freed:
            self._wake.set()
        return batches, more_waiting

    def _dead_letter_settled(self, message: Message, confirmed: bool) -> None:
        # A failed one stays parked until its deadline, is released then, and comes back to be parked again.
        if confirmed:
            with self._lock:
                self.core.dead_letter_confirmed(message.partition, message.offset)
            self._wake.set()

    def _park_share_letters(self, letters: list[Message]) -> None:
        self._park_dead_letters(letters)
        if self._dead_letter_sink is None:
            # Nowhere to park them: archived at once (REJECT), as the tracker acks them at once.
            for message in letters:
                self._dead_letter_settled(message, True)

    async def stop(self) -> None:
        self.release_waiters()
        await self._settle_dead_letters()
        self._stopping.set()
        self._wake.set()
        await asyncio.to_thread(self._thread.join, 30.0)

    # -- consumer thread -------------------------------------------------------
    def _run(self) -> None:
        try:
            lock = prepare_share_group(
                self._admin, self.group, self.settings.initial_offset, _ADMIN_TIMEOUT_SECONDS
            )
        except (KafkaException, StopIteration) as exc:
            lock = DEFAULT_LOCK_SECONDS
            log.warning(
                "share group %s: its configs cannot be read (%s); its lock duration is taken to be %.0f s",
                self.group,
                exc,
                lock,
            )
        with self._lock:
            self.core.lock_seconds = lock
        # Every ack must reach the broker within the margin after its deadline check.
        self._flush_seconds = min(self.settings.offsets_commit_interval, self.core.margin / 3)
        active = self._start_member()
        try:
            while active is not None and not self._stopping.is_set():
                active = self._turn(active)
        except Exception as exc:  # a consumer whose thread died would leave its callers waiting forever
            log.exception("share group %s topic %s: consumer thread failed", self.group, self.topic)
            self.fail(f"share group {self.group} topic {self.topic}: consumer failed: {exc}")
            self._signal_from_thread()
        finally:
            self._close_all()

    def _turn(self, active: _Member) -> _Member | None:
        """One look at everything; returns the member that fetches next (None: stop)."""
        self._wake.clear()
        now = time.monotonic()
        with self._lock:
            core = self.core
            core.expire(now)
            settlements = core.take_settlements()
            letters = core.take_dead_letters()
            open_records = core.open_count(active.number)
            waits_on_holders = core.waits_on_holders(active.number)
            next_deadline = core.next_deadline()
        if letters:
            self._loop.call_soon_threadsafe(self._park_share_letters, letters)
        self._send(settlements, active, now)
        self._close_settled()
        if active.session_lost:
            # What it fetched the broker has given back to the group: handing it out now would deliver it
            # twice. A new member starts over; callers' acks of what it handed out are late.
            log.warning(
                "share group %s topic %s: member %d lost its share session, replaced",
                self.group,
                self.topic,
                active.number,
            )
            return self._hand_over(active, now, close=True)
        demand = self.waiters > 0
        if open_records == 0 and (demand or active.fetch_pending):
            return self._poll(active)
        if waits_on_holders and demand:
            if self._waiting_since is None:
                self._waiting_since = now
            elif (
                now - self._waiting_since >= _HANDOVER_SECONDS
                and len(self._members) < self.settings.share_members
            ):
                return self._hand_over(active, now)
        else:
            self._waiting_since = None
        if active.unsent_since is not None and now - active.unsent_since >= self._flush_seconds:
            self._commit(active)
        wait = _IDLE_SECONDS
        if next_deadline is not None:
            wait = min(wait, next_deadline - now)
        if active.unsent_since is not None:
            wait = min(wait, active.unsent_since + self._flush_seconds - now)
        if self._waiting_since is not None:
            wait = min(wait, self._waiting_since + _HANDOVER_SECONDS - now)
        if any(member.handed_over for member in self._members.values()):
            wait = min(wait, self._flush_seconds)
        self._wake.wait(max(wait, 0.001))
        return active

    def _start_member(self) -> _Member | None:
        config, refused = self.cluster.share_consumer_config(self.group, self.client_id)
        if refused and not self._members:
            log.info(
                "share group %s: librdkafka settings a share consumer refuses are left out: %s",
                self.group,
                ", ".join(refused),
            )
        number = self._numbers + 1
        try:
            handle = ShareConsumer(config)
            handle.set_acknowledgement_commit_callback(
                lambda offsets, error: self._on_acks_sent(number, offsets, error)
            )
            handle.subscribe([self.topic])
        except (KafkaException, ValueError, RuntimeError) as exc:
            self.fail(f"cannot start a share consumer for group {self.group} topic {self.topic}: {exc}")
            self._signal_from_thread()
            return None
        self._numbers = number
        member = _Member(number, handle)
        self._members[number] = member
        return member

    def _poll(self, member: _Member) -> _Member | None:
        started = time.monotonic()
        # No later than the broker acquired what this poll returns: while librdkafka was fetching on its own,
        # records may have come any time since the last poll ended; otherwise this poll's fetch got them.
        acquired_at = member.last_poll_end if member.fetch_pending else started
        try:
            records = list(member.handle.poll(_POLL_SECONDS))
        except IllegalStateException as exc:
            return self._out_of_step(member, exc)
        except KafkaException as exc:
            return self._poll_failed(member, exc)
        member.last_poll_end = time.monotonic()
        member.unsent_since = None  # the poll carried them
        good = [record for record in records if record.error() is None]
        member.fetch_pending = not records
        for record in records:
            if record.error() is not None:
                # librdkafka settles these itself (a corrupt batch is rejected, one it cannot
                # decompress released).
                log.error(
                    "share group %s topic %s: partition %d offset %d unreadable: %s",
                    self.group,
                    self.topic,
                    record.partition(),
                    record.offset(),
                    record.error().str(),
                )
        if good:
            attempts = [(record.delivery_count() or 1) - 1 for record in good]
            batches = batches_of(good, attempts)
            with self._lock:
                self.core.add_fetched(member.number, batches, acquired_at)
            self._signal_from_thread()
        return member

    def _poll_failed(self, member: _Member, exc: KafkaException) -> _Member | None:
        error: KafkaError = exc.args[0]
        if error.code() == KafkaError.GROUP_ID_NOT_FOUND:
            self.fail(
                f"group {self.group} cannot be a share group on cluster {self.cluster.name}: "
                f"{error.str()} (is it a consumer group? its backend setting says share: "
                "use another group id, or the tracker backend for it)",
                Failure.INVALID_ARGUMENT,
            )
        elif error.fatal():
            self.fail(f"share group {self.group} topic {self.topic}: {error.str()}")
        elif error.code() == KafkaError._STATE:
            return self._out_of_step(member, exc)
        else:
            log.warning("share group %s topic %s: poll failed: %s", self.group, self.topic, error.str())
            self._stopping.wait(_POLL_SECONDS)
            return member
        self._signal_from_thread()
        return None

    def _out_of_step(self, member: _Member, exc: Exception) -> _Member | None:
        """librdkafka says records of the member's last poll are unsettled where this core has none (never
        expected): a new member starts clean, and the broker releases what this one held once it closes."""
        log.error(
            "share group %s topic %s: member %d out of step (%s), replaced",
            self.group,
            self.topic,
            member.number,
            exc,
        )
        return self._hand_over(member, time.monotonic(), close=True)

    def _hand_over(self, member: _Member, now: float, close: bool = False) -> _Member | None:
        """A new member fetches from now on; `member` only waits for the acks of what callers hold."""
        self._waiting_since = None
        if close:
            self._close(member)
        else:
            log.info(
                "share group %s topic %s: callers hold %d messages of member %d; member %d fetches meanwhile",
                self.group,
                self.topic,
                self.core.open_count(member.number),
                member.number,
                self._numbers + 1,
            )
            try:
                member.handle.unsubscribe()  # its partitions go to the group's other members
            except (KafkaException, RuntimeError) as exc:
                log.warning(
                    "share group %s: unsubscribing member %d failed: %s", self.group, member.number, exc
                )
            member.handed_over = True
        return self._start_member()

    def _send(self, settlements: dict[int, list[Settlement]], active: _Member, now: float) -> None:
        """Give the settlements to their members; what is not the active member's, or a release (due now),
        goes to the broker at once, the rest with the next poll or flush."""
        topic = self.topic
        for number, items in settlements.items():
            member = self._members.get(number)
            if member is None:
                continue
            acknowledge = member.handle.acknowledge_offset
            for partition, offset, kind in items:
                try:
                    acknowledge(topic, partition, offset, kind)
                except (KafkaException, IllegalStateException) as exc:
                    # Not in flight any more (its share session was reset, say): nothing left to settle.
                    log.warning(
                        "share group %s topic %s: acknowledging %d/%d failed: %s",
                        self.group,
                        topic,
                        partition,
                        offset,
                        exc,
                    )
            if member is not active or any(item.kind != ACCEPT for item in items):
                self._commit(member)
            elif member.unsent_since is None:
                member.unsent_since = now

    def _commit(self, member: _Member) -> None:
        member.unsent_since = None
        try:
            member.handle.commit_async()
        except (KafkaException, RuntimeError) as exc:
            log.warning("share group %s topic %s: sending acks failed: %s", self.group, self.topic, exc)

    def _on_acks_sent(
        self, number: int, offsets: dict[TopicPartition, set[int]], error: KafkaException | None
    ) -> None:
        """Run on this thread, inside the member's poll, commit or close."""
        if error is None:
            return
        member = self._members.get(number)
        if member is not None and error.args[0].code() in _SESSION_LOST:
            member.session_lost = True
        count = sum(len(acked) for acked in offsets.values())
        self._refused_metric.inc(count)
        where = ", ".join(f"{tp.topic}/{tp.partition}" for tp in offsets)
        log.warning(
            "share group %s: the broker refused the acks of %d messages of %s (%s); they are delivered again",
            self.group,
            count,
            where,
            error,
        )

    def _close_settled(self) -> None:
        for member in [m for m in self._members.values() if m.handed_over]:
            with self._lock:
                done = member.session_lost or self.core.open_count(member.number) == 0
            if done:
                self._close(member)

    def _close(self, member: _Member) -> None:
        """Close one member: it sends the acks it was given and leaves; the broker releases anything else."""
        self._members.pop(member.number, None)
        try:
            member.handle.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("share group %s: closing member %d failed: %s", self.group, member.number, exc)
        with self._lock:
            self.core.forget(member.number)

    def _close_all(self) -> None:
        now = time.monotonic()
        with self._lock:
            settlements = self.core.take_settlements()
        active = next(iter(self._members.values()), None)
        if active is not None:
            self._send(settlements, active, now)
        for member in list(self._members.values()):
            self._close(member)
