"""The offsets of one (group, topic, partition) as the gateway tracks them (`PartitionTracker`): offers,
acks, redelivery after ack_timeout, dead letters, and the commit point with its sparse acks. The rules are
told in sluice.gateway.core."""

from __future__ import annotations

import bisect
import enum
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import NamedTuple

from .batches import Batch, ByteBudget, HandsOut, Message, RawMessage
from .sparse_acks import SparseAcksError, decode_sparse_acks, encode_sparse_acks


class AckOutcome(enum.Enum):
    ACKED = "acked"
    # Already acknowledged (or below the committed offset): harmless, nothing changes.
    DUPLICATE = "duplicate"
    # This gateway never handed the message out, or the partition is not ours.
    NOT_HANDED_OUT = "not handed out"


class _Parked(NamedTuple):
    """A dead letter waiting for its produce to be confirmed."""

    message: Message
    # Failed produce attempts so far.
    failures: int
    # When to offer it for another produce; None while a produce is under way.
    retry_at: float | None


class _Offer:
    """A handed-out batch and when its un-acked messages are due back."""

    __slots__ = ("acked", "batch", "deadline", "unacked")

    def __init__(self, batch: Batch, deadline: float) -> None:
        self.batch = batch
        self.deadline = deadline
        self.unacked = len(batch.offsets)
        # Offsets of the batch acknowledged so far (None until the first single ack).
        self.acked: set[int] | None = None

    def holds(self, offset: int) -> bool:
        """`offset` belongs to this batch and is not acknowledged yet."""
        offsets = self.batch.offsets
        if not offsets[0] <= offset <= offsets[-1]:
            return False
        if not self.batch.contiguous and offsets[bisect.bisect_left(offsets, offset)] != offset:
            return False
        return self.acked is None or offset not in self.acked

    def ack(self, offset: int) -> None:
        if self.acked is None:
            self.acked = set()
        self.acked.add(offset)
        self.unacked -= 1

    def remaining(self) -> Batch:
        """The batch without what was acknowledged."""
        if self.acked is None:
            return self.batch
        acked = self.acked
        return self.batch.select([i for i, offset in enumerate(self.batch.offsets) if offset not in acked])


@dataclass(frozen=True, slots=True)
class CommitPoint:
    offset: int
    metadata: str


class PartitionTracker(HandsOut):
    """Offers, acks and the commit point of one (group, topic, partition)."""

    def __init__(
        self,
        partition: int,
        committed_offset: int,
        metadata: str = "",
        *,
        ack_timeout: float,
        max_pending: int,
        max_retries: int = -1,
        max_metadata_length: int = 4000,
        hold_dead_letters: bool = False,
        dead_letter_backoff: float = 1.0,
        dead_letter_max_backoff: float = 30.0,
    ) -> None:
        self.partition = partition
        self.hold_dead_letters = hold_dead_letters
        self.dead_letter_backoff = dead_letter_backoff
        self.dead_letter_max_backoff = dead_letter_max_backoff
        self.max_metadata_length = max_metadata_length
        self.ack_timeout = ack_timeout
        self.max_pending = max_pending
        self.max_retries = max_retries
        self._committed = committed_offset
        try:
            self._acked_ranges = [list(r) for r in decode_sparse_acks(committed_offset, metadata or "")]
        except SparseAcksError:
            # Metadata written by something else: start from the plain offset.
            self._acked_ranges = []
        self._fetched: deque[Batch] = deque()
        # Messages of _fetched[0] handed out already.
        self._fetched_head = 0
        self._fetched_count = 0
        # first offset -> offer, oldest deadline first: every deadline is `now + ack_timeout` with a
        # monotonic `now`, so appending keeps the order and expiry checks look at the front only.
        self._offers: OrderedDict[int, _Offer] = OrderedDict()
        # The offers' first offsets, sorted, to find the offer holding an offset (offers never overlap).
        self._offer_starts: list[int] = []
        # Un-acked messages in all offers.
        self._pending = 0
        self._dead_letters: list[Message] = []
        # offset -> dead letter whose produce is not confirmed yet (only with hold_dead_letters).
        self._parked: dict[int, _Parked] = {}
        # Earliest retry_at in _parked, so that looking for due retries costs nothing on the hot path.
        self._next_dead_letter_retry: float | None = None
        self._last_committed: CommitPoint | None = None
        self.highest_fetched = committed_offset - 1
        self.highest_handed_out = committed_offset - 1

    # -- queries ---------------------------------------------------------------
    @property
    def committed_offset(self) -> int:
        return self._committed

    @property
    def pending_count(self) -> int:
        return self._pending

    @property
    def buffered_count(self) -> int:
        return self._fetched_count

    @property
    def parked_count(self) -> int:
        """Dead letters held un-acked until their produce is confirmed."""
        return len(self._parked)

    def is_parked(self, offset: int) -> bool:
        return offset in self._parked

    @property
    def acked_ranges(self) -> list[tuple[int, int]]:
        return [(r[0], r[1]) for r in self._acked_ranges]

    def is_acked(self, offset: int) -> bool:
        if offset < self._committed:
            return True
        ranges = self._acked_ranges
        if not ranges or offset < ranges[0][0]:
            return False
        index = bisect.bisect_right(ranges, [offset, float("inf")]) - 1
        return index >= 0 and ranges[index][0] <= offset < ranges[index][1]

    def _acked_within(self, begin: int, end: int) -> int:
        """How many offsets of [begin, end) are acknowledged (begin >= the committed offset)."""
        return sum(max(0, min(r[1], end) - max(r[0], begin)) for r in self._acked_ranges)

    def _offer_holding(self, offset: int) -> _Offer | None:
        index = bisect.bisect_right(self._offer_starts, offset) - 1
        if index < 0:
            return None
        offer = self._offers[self._offer_starts[index]]
        return offer if offer.holds(offset) else None

    def commit_point(self) -> CommitPoint:
        metadata = encode_sparse_acks(self._committed, self.acked_ranges, self.max_metadata_length)
        return CommitPoint(self._committed, metadata)

    def next_deadline(self) -> float | None:
        for offer in self._offers.values():
            return offer.deadline
        return None

    def has_ready(self, now: float) -> bool:
        deadline = self.next_deadline()
        if deadline is not None and deadline <= now:
            return True
        return bool(self._fetched) and self._pending < self.max_pending

    def has_waiting(self, now: float) -> bool:
        """Something could be handed out now by a caller with room for it (whatever its pending limit)."""
        deadline = self.next_deadline()
        return bool(self._fetched) or (deadline is not None and deadline <= now)

    # -- state changes ---------------------------------------------------------
    def add_fetched(self, message: RawMessage | Message) -> None:
        self.add_batch(Batch.of([message]))

    def add_batch(self, batch: Batch) -> None:
        """Buffer fetched messages, leaving out those acknowledged, offered or parked already."""
        offsets = batch.offsets
        if not offsets:
            return
        first = offsets[0]
        ranges = self._acked_ranges
        if (
            first == self.highest_fetched + 1
            and first >= self._committed
            and first > self.highest_handed_out
            and (not ranges or ranges[-1][1] <= first)
            and batch.contiguous
        ):
            # The common case, in order, nothing known above it: skip the per-message lookups.
            self.highest_fetched = offsets[-1]
            self._fetched.append(batch)
            self._fetched_count += len(offsets)
            return
        keep: list[int] = []
        for index, offset in enumerate(offsets):
            expected = self.highest_fetched + 1
            if offset > expected >= self._committed:
                # Offsets the fetch skipped (transaction markers, compaction, retention)
                # never reach a caller, so nobody would ever ack them; without this the
                # committed offset would be stuck at the gap forever.
                self._add_acked_range(expected, offset)
            self.highest_fetched = max(self.highest_fetched, offset)
            if self.is_acked(offset) or offset in self._parked or self._offer_holding(offset) is not None:
                continue
            keep.append(index)
        if keep:
            kept = batch if len(keep) == len(offsets) else batch.select(keep)
            self._fetched.append(kept)
            self._fetched_count += len(keep)

    def _add_offer(self, offer: _Offer, *, first: bool = False) -> None:
        start = offer.batch.offsets[0]
        self._offers[start] = offer
        if first:
            self._offers.move_to_end(start, last=False)
        bisect.insort(self._offer_starts, start)
        self._pending += offer.unacked

    def _ack_in_offer(self, offer: _Offer, offset: int) -> None:
        """One message of `offer` is acknowledged; the offer goes once nothing in it is left un-acked."""
        offer.ack(offset)
        self._pending -= 1
        if not offer.unacked:
            self._remove_offer(offer)

    def _remove_offer(self, offer: _Offer) -> None:
        start = offer.batch.offsets[0]
        del self._offers[start]
        starts = self._offer_starts
        del starts[bisect.bisect_left(starts, start)]
        self._pending -= offer.unacked

    def _redeliver_expired(self, now: float, room: int, out: list[Batch], budget: ByteBudget) -> int:
        """Hand out up to `room` messages of expired offers again (dead-lettering those out of retries)."""
        given = 0
        offers = self._offers
        while offers and given < room and not budget.exhausted:
            offer = next(iter(offers.values()))
            if offer.deadline > now:
                break
            self._remove_offer(offer)
            batch = offer.remaining()
            if not batch.offsets:
                continue
            if 0 <= self.max_retries <= batch.attempt:
                for message in batch.messages():
                    self._give_up(message)
                continue
            size = len(batch.offsets)
            candidate = batch.cut(0, room - given) if room - given < size else batch
            count = budget.fit(candidate)
            if count < size:
                # The rest stays due, first in line for the next taker.
                self._add_offer(_Offer(batch.cut(count, size), offer.deadline), first=True)
                if not count:
                    break
                batch = candidate if count == len(candidate.offsets) else candidate.cut(0, count)
            again = batch._replace(attempt=batch.attempt + 1)
            self._add_offer(_Offer(again, now + self.ack_timeout))
            out.append(again)
            given += count
        return given

    def take_batches(
        self, now: float, limit: int, max_pending: int | None = None, max_bytes: int | None = None
    ) -> list[Batch]:
        """Up to `limit` messages to hand out now: expired offers first, then fresh ones in offset order.

        Fresh ones only while fewer than `max_pending` (default: the tracker's own limit) are un-acked;
        at most `max_bytes` of reply (see `ByteBudget`).
        """
        return self.take_within(now, limit, max_pending, ByteBudget(max_bytes))

    def take_within(self, now: float, limit: int, max_pending: int | None, budget: ByteBudget) -> list[Batch]:
        """`take_batches` charging a budget that the caller may share with other partitions."""
        batches: list[Batch] = []
        given = self._redeliver_expired(now, limit, batches, budget)
        cap = self.max_pending if max_pending is None else max_pending
        fetched = self._fetched
        room = min(limit - given, cap - self._pending)
        deadline = now + self.ack_timeout
        while room > 0 and fetched and not budget.exhausted:
            front = fetched[0]
            head, size = self._fetched_head, len(front.offsets)
            # Callers taking a few at a time move a cursor through the fetched batch rather than copying
            # what is left of it on every take.
            stop = min(size, head + room)
            batch = front.cut(head, stop) if head or stop < size else front
            kept: list[int] | None = None  # indexes into batch, when some of it was acked while buffered
            ranges = self._acked_ranges
            if batch.offsets[0] < self._committed or (ranges and ranges[-1][1] > batch.offsets[0]):
                # Acknowledged while buffered (a gap closed above it, say): never hand those out.
                keep = [i for i, offset in enumerate(batch.offsets) if not self.is_acked(offset)]
                if len(keep) < len(batch.offsets):
                    kept, batch = keep, batch.select(keep)
            count = len(batch.offsets)
            fits = budget.fit(batch)
            if count and not fits:
                break
            if fits < count:
                # The cursor stops right after the last message taken.
                stop = head + (kept[fits - 1] if kept is not None else fits - 1) + 1
                batch, count = batch.cut(0, fits), fits
            if stop == size:
                fetched.popleft()
                self._fetched_head = 0
            else:
                self._fetched_head = stop
            self._fetched_count -= stop - head
            if not count:
                continue
            self._add_offer(_Offer(batch, deadline))
            batches.append(batch)
            room -= count
            if batch.offsets[-1] > self.highest_handed_out:
                self.highest_handed_out = batch.offsets[-1]
        return batches

    def ack(self, offset: int) -> AckOutcome:
        if self.is_acked(offset):
            return AckOutcome.DUPLICATE
        if offset in self._parked:
            # A late ack of a message already given up: the dead-letter topic is its home now, and only
            # the confirmed produce may move the commit point past it.
            return AckOutcome.DUPLICATE
        offer = self._offer_holding(offset)
        if offer is None:
            return AckOutcome.NOT_HANDED_OUT
        self._ack_in_offer(offer, offset)
        self._mark_acked(offset)
        return AckOutcome.ACKED

    def ack_range(self, begin: int, end: int) -> tuple[int, int]:
        """Acknowledge offsets [begin, end); returns (newly acked, never handed out).

        Offsets never handed out are left alone (acking them would skip messages nobody saw);
        already acknowledged ones and parked dead letters are harmless duplicates.
        """
        begin = max(begin, self._committed)
        if begin >= end:
            return 0, 0
        # Every offset of the range is exactly one of: acknowledged, offered and un-acked, parked, or
        # never handed out. Counting the first three leaves the last without visiting each offset.
        already = self._acked_within(begin, end)
        held = sum(1 for offset in self._parked if begin <= offset < end) if self._parked else 0
        starts = self._offer_starts
        low = max(bisect.bisect_right(starts, begin) - 1, 0)
        touched = [self._offers[start] for start in starts[low : bisect.bisect_left(starts, end)]]
        newly = 0
        whole: list[tuple[int, int]] = []
        singles: list[int] = []
        for offer in touched:
            offsets = offer.batch.offsets
            if offsets[-1] < begin:
                continue
            if offer.acked is None and offsets[0] >= begin and offsets[-1] < end and offer.batch.contiguous:
                # The whole offer: one range update instead of one per offset.
                newly += offer.unacked
                self._remove_offer(offer)
                whole.append((offsets[0], offsets[-1] + 1))
                continue
            for offset in offsets[bisect.bisect_left(offsets, begin) : bisect.bisect_left(offsets, end)]:
                if offer.holds(offset):
                    self._ack_in_offer(offer, offset)
                    singles.append(offset)
        newly += len(singles)
        for range_from, range_to in whole:
            self._add_acked_range(range_from, range_to)
        for offset in singles:
            self._mark_acked(offset)
        return newly, (end - begin) - already - newly - held

    def expire(self, now: float) -> None:
        """Dead-letter expired offers that used up their retries, without waiting for a caller."""
        if self.max_retries < 0:
            return
        for offer in list(self._offers.values()):
            if offer.deadline > now:
                break
            if offer.batch.attempt >= self.max_retries:
                self._remove_offer(offer)
                for message in offer.remaining().messages():
                    self._give_up(message)

    def take_dead_letters(self) -> list[Message]:
        """Messages given up since the last call, each reported once (retries: `take_dead_letter_retries`)."""
        letters, self._dead_letters = self._dead_letters, []
        return letters

    def take_dead_letter_retries(self, now: float) -> list[Message]:
        """Held dead letters whose failed produce is due to be tried again; they count as under way now."""
        due_at = self._next_dead_letter_retry
        if due_at is None or due_at > now:
            return []
        due: list[Message] = []
        next_retry: float | None = None
        for offset, parked in self._parked.items():
            if parked.retry_at is None:
                continue
            if parked.retry_at <= now:
                due.append(parked.message)
                self._parked[offset] = parked._replace(retry_at=None)
            elif next_retry is None or parked.retry_at < next_retry:
                next_retry = parked.retry_at
        self._next_dead_letter_retry = next_retry
        return due

    def dead_letter_confirmed(self, offset: int) -> bool:
        """The dead-letter topic has the message: acknowledge it. False if it is not held here.

        Not held: the partition was revoked and assigned again since (the new tracker knows nothing
        of the old produce), or the offset was confirmed already; either way there is nothing to ack.
        """
        if self._parked.pop(offset, None) is None:
            return False
        self._mark_acked(offset)
        return True

    def dead_letter_failed(self, offset: int, now: float) -> bool:
        """The dead-letter produce failed: keep the message un-acked and offer it again after a backoff."""
        parked = self._parked.get(offset)
        if parked is None:
            return False
        failures = parked.failures + 1
        delay = min(self.dead_letter_backoff * 2 ** min(failures - 1, 32), self.dead_letter_max_backoff)
        retry_at = now + delay
        self._parked[offset] = _Parked(parked.message, failures, retry_at)
        if self._next_dead_letter_retry is None or retry_at < self._next_dead_letter_retry:
            self._next_dead_letter_retry = retry_at
        return True

    def _give_up(self, message: Message) -> None:
        """Dead-letter a message whose offer is already withdrawn."""
        self._dead_letters.append(message)
        if self.hold_dead_letters:
            self._parked[message.offset] = _Parked(message, 0, None)
        else:
            self._mark_acked(message.offset)

    def take_commit_if_changed(self) -> CommitPoint | None:
        """The commit point if it differs from the last one taken."""
        point = self.commit_point()
        if point == self._last_committed:
            return None
        self._last_committed = point
        return point

    def mark_committed(self, point: CommitPoint) -> None:
        self._last_committed = point

    def forget_last_commit(self) -> None:
        """The last commit point taken did not reach Kafka: offer it again next time."""
        self._last_committed = None

    def _add_acked_range(self, range_from: int, range_to: int) -> None:
        merged: list[list[int]] = []
        for current in sorted([*self._acked_ranges, [range_from, range_to]]):
            if merged and current[0] <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], current[1])
            else:
                merged.append(list(current))
        while merged and merged[0][0] <= self._committed:
            self._committed = max(self._committed, merged.pop(0)[1])
        self._acked_ranges = merged

    def _mark_acked(self, offset: int) -> None:
        ranges = self._acked_ranges
        if offset == self._committed:
            self._committed += 1
            if ranges and ranges[0][0] == self._committed:
                self._committed = ranges.pop(0)[1]
            return
        index = bisect.bisect_left(ranges, [offset, offset])
        joins_previous = index > 0 and ranges[index - 1][1] == offset
        joins_next = index < len(ranges) and ranges[index][0] == offset + 1
        if joins_previous and joins_next:
            ranges[index - 1][1] = ranges.pop(index)[1]
        elif joins_previous:
            ranges[index - 1][1] = offset + 1
        elif joins_next:
            ranges[index][0] = offset
        else:
            ranges.insert(index, [offset, offset + 1])


@dataclass
class TrackerSettings:
    ack_timeout: float = 300.0
    max_pending: int = 300
    max_retries: int = -1
    max_metadata_length: int = 4000
    # Keep dead letters un-acked until `dead_letter_confirmed` (there is a dead-letter topic to confirm them).
    hold_dead_letters: bool = False
    dead_letter_backoff: float = 1.0
    dead_letter_max_backoff: float = 30.0
