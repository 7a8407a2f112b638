"""Consume-and-ack semantics of the gateway, free of I/O.

Nothing here touches sockets, threads or clocks: time is passed in as a float
(seconds, any monotonic origin). The Kafka side feeds fetched messages in and
takes commit points out; the API side takes messages to hand out and reports
acknowledgements.

Offsets are tracked per (group, topic, partition) by a `PartitionTracker`:

* a message handed out ("offered") must be acknowledged within `ack_timeout`,
  otherwise it is handed out again, possibly to another caller;
* at most `max_pending` messages of a partition are offered and un-acked at
  once; past that the partition hands out nothing new until acks arrive;
* after `max_retries` re-deliveries a message is dead-lettered: reported so the
  caller can park it elsewhere (-1: retry forever). With `hold_dead_letters` it
  stays un-acknowledged (and is never handed out again) until the caller
  confirms that the dead-letter topic has it; a failed dead-letter produce is
  offered again after a growing backoff. Without it (nowhere to park them) it
  is acknowledged at once;
* the committed offset is the lowest un-acked offset, and the acknowledged
  ranges above it travel in the commit metadata string, encoded as kafka-pixy
  does, so that a restarted gateway (or a kafka-pixy) redelivers only what was
  not acknowledged.
"""

from __future__ import annotations

import bisect
import enum
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

# kafka-pixy packs each number as little-endian groups of 5 bits, one character
# of the standard base64 alphabet per group, with 0x20 set on every group but
# the last one.
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_DECODE = {char: index for index, char in enumerate(_ALPHABET)}
_CONTINUATION = 0x20
_MAX_GROUPS_PER_NUMBER = 64 // 5 + 1


class SparseAcksError(ValueError):
    """Commit metadata that is not a valid sparse-acks encoding."""


def _encode_number(number: int, out: list[str]) -> None:
    group, number = number & 0x1F, number >> 5
    while number > 0:
        out.append(_ALPHABET[group | _CONTINUATION])
        group, number = number & 0x1F, number >> 5
    out.append(_ALPHABET[group])


def _decode_number(encoded: str, position: int) -> tuple[int, int]:
    number = 0
    for shift_index in range(_MAX_GROUPS_PER_NUMBER):
        if position >= len(encoded):
            break
        char = encoded[position]
        value = _DECODE.get(char)
        if value is None:
            raise SparseAcksError(f"bad char: {char!r}")
        number |= (value & 0x1F) << (5 * shift_index)
        position += 1
        if not value & _CONTINUATION:
            return number, position
    raise SparseAcksError(f"bad sequence: {encoded[position - 1 :]!r}")


def encode_sparse_acks(
    base: int, acked_ranges: Sequence[tuple[int, int]], max_length: int | None = None
) -> str:
    """Encode half-open acked ranges [from, to) lying above offset `base`.

    With `max_length`, the highest ranges that do not fit are left out: brokers
    cap commit metadata (offset.metadata.max.bytes, 4096 by default), and losing
    a few acks only means redelivering those messages, never skipping one.
    """
    out: list[str] = []
    length = 0
    for range_from, range_to in acked_ranges:
        encoded: list[str] = []
        _encode_number(range_from - base, encoded)
        _encode_number(range_to - range_from, encoded)
        if max_length is not None and length + len(encoded) > max_length:
            break
        out.extend(encoded)
        length += len(encoded)
        base = range_to
    return "".join(out)


def decode_sparse_acks(base: int, encoded: str) -> list[tuple[int, int]]:
    """Inverse of `encode_sparse_acks`; raises `SparseAcksError` on garbage."""
    ranges: list[tuple[int, int]] = []
    position = 0
    while position < len(encoded):
        delta, position = _decode_number(encoded, position)
        range_from = base + delta
        if position >= len(encoded):
            raise SparseAcksError(f"bad encoding: {encoded!r}: range without an end")
        length, position = _decode_number(encoded, position)
        range_to = range_from + length
        if range_from >= range_to or range_from <= 0:
            raise SparseAcksError(f"bad encoding: {encoded!r}: bad range {range_from}-{range_to}")
        ranges.append((range_from, range_to))
        base = range_to
    return ranges


def sparse_acks_to_str(base: int, encoded: str) -> str:
    """Human readable acked ranges relative to `base`, e.g. "1-3,5-6" (kafka-pixy's format)."""
    try:
        ranges = decode_sparse_acks(base, encoded)
    except SparseAcksError:
        return ""
    return ",".join(f"{range_from - base}-{range_to - base}" for range_from, range_to in ranges)


class Message(NamedTuple):
    # A NamedTuple rather than a dataclass: one is built per fetched record on the hot path,
    # and a tuple is several times cheaper to create than a frozen dataclass.
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int = 0


class Delivery(NamedTuple):
    message: Message
    # 0 for the first hand-out, n for the n-th redelivery.
    attempt: int


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


class _Offer(NamedTuple):
    """A handed-out, un-acked message and when it is due back (replaced, not changed, on redelivery)."""

    message: Message
    deadline: float
    attempt: int


# tuple.__new__ builds a NamedTuple without the Python-level __new__ frame: about half the cost per object,
# which counts on the paths that run once per message.
_new_tuple = tuple.__new__


# A fetched message as a plain tuple in `Message`'s field order. The fetch buffer holds these rather than
# `Message`s: the garbage collector stops tracking exact tuples of plain values, but never tuple subclasses,
# and tens of thousands of tracked objects in the buffer made every full collection a pause of tens of ms.
RawMessage = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]


@dataclass(frozen=True, slots=True)
class CommitPoint:
    offset: int
    metadata: str


class PartitionTracker:
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
        self._fetched: deque[RawMessage | Message] = deque()
        # offset -> offer, oldest deadline first. An OrderedDict, not a dict: offers leave from the front
        # (acks come roughly in hand-out order), and a plain dict keeps the holes they leave there, so
        # finding its first live entry gets slower with every ack until the next resize.
        self._offers: OrderedDict[int, _Offer] = OrderedDict()
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
        return len(self._offers)

    @property
    def buffered_count(self) -> int:
        return len(self._fetched)

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

    def commit_point(self) -> CommitPoint:
        metadata = encode_sparse_acks(self._committed, self.acked_ranges, self.max_metadata_length)
        return CommitPoint(self._committed, metadata)

    def next_deadline(self) -> float | None:
        # Offers are kept in deadline order (see `_offer`): the first one is due first.
        for offer in self._offers.values():
            return offer.deadline
        return None

    def has_ready(self, now: float) -> bool:
        deadline = self.next_deadline()
        if deadline is not None and deadline <= now:
            return True
        return bool(self._fetched) and len(self._offers) < self.max_pending

    # -- state changes ---------------------------------------------------------
    def add_fetched(self, message: RawMessage | Message) -> None:
        offset = message[1]
        expected = self.highest_fetched + 1
        if offset == expected and offset >= self._committed and not self._acked_ranges:
            # The common case, in order and nothing acked above the commit: skip the lookups.
            self.highest_fetched = offset
            if offset not in self._offers and not (self._parked and offset in self._parked):
                self._fetched.append(message)
            return
        if offset > expected >= self._committed:
            # Offsets the fetch skipped (transaction markers, compaction, retention)
            # never reach a caller, so nobody would ever ack them; without this the
            # committed offset would be stuck at the gap forever.
            self._add_acked_range(expected, offset)
        self.highest_fetched = max(self.highest_fetched, offset)
        if self.is_acked(offset) or offset in self._offers or offset in self._parked:
            return
        self._fetched.append(message)

    def _offer(self, message: Message, now: float, attempt: int) -> Delivery:
        # Every deadline is `now + ack_timeout` with a monotonic `now`, so appending (a redelivery is
        # removed and appended again) keeps the dict in deadline order: expiry checks look at the front only.
        self._offers[message.offset] = _new_tuple(_Offer, (message, now + self.ack_timeout, attempt))
        return _new_tuple(Delivery, (message, attempt))

    def _redeliver_expired(self, now: float, room: int, out: list[Delivery]) -> None:
        """Hand out up to `room` expired offers again (dead-lettering those out of retries) into `out`."""
        offers = self._offers
        while offers and len(out) < room:
            offer = next(iter(offers.values()))
            if offer.deadline > now:
                return
            message = offer.message
            del offers[message.offset]
            if 0 <= self.max_retries <= offer.attempt:
                self._give_up(message)
                continue
            out.append(self._offer(message, now, offer.attempt + 1))

    def next_delivery(self, now: float) -> Delivery | None:
        """The message to hand out now: an expired offer first, then a fresh one."""
        deliveries = self.take(now, 1)
        return deliveries[0] if deliveries else None

    def take(self, now: float, limit: int, max_pending: int | None = None) -> list[Delivery]:
        """Up to `limit` messages to hand out now: expired offers first, then fresh ones in offset order.

        Fresh ones only while fewer than `max_pending` (default: the tracker's own limit) are un-acked.
        """
        deliveries: list[Delivery] = []
        self._redeliver_expired(now, limit, deliveries)
        cap = self.max_pending if max_pending is None else max_pending
        fetched, offers = self._fetched, self._offers
        room = min(limit - len(deliveries), cap - len(offers))
        if room <= 0 or not fetched:
            return deliveries
        deadline = now + self.ack_timeout
        check = bool(self._acked_ranges) or fetched[0][1] < self._committed
        highest = self.highest_handed_out
        append = deliveries.append
        while room > 0 and fetched:
            raw = fetched.popleft()
            offset = raw[1]
            if offset in offers or (check and self.is_acked(offset)):
                continue
            message = _new_tuple(Message, raw)
            offers[offset] = _new_tuple(_Offer, (message, deadline, 0))
            append(_new_tuple(Delivery, (message, 0)))
            if offset > highest:
                highest = offset
            room -= 1
        self.highest_handed_out = highest
        return deliveries

    def ack(self, offset: int) -> AckOutcome:
        if self.is_acked(offset):
            self._offers.pop(offset, None)
            return AckOutcome.DUPLICATE
        if offset in self._parked:
            # A late ack of a message already given up: the dead-letter topic is its home now, and only
            # the confirmed produce may move the commit point past it.
            return AckOutcome.DUPLICATE
        if self._offers.pop(offset, None) is None:
            return AckOutcome.NOT_HANDED_OUT
        self._mark_acked(offset)
        return AckOutcome.ACKED

    def ack_range(self, begin: int, end: int) -> tuple[int, int]:
        """Acknowledge offsets [begin, end); returns (newly acked, never handed out).

        Offsets never handed out are left alone (acking them would skip messages nobody saw);
        already acknowledged ones are harmless duplicates.
        """
        offers = self._offers
        pop = offers.pop
        parked = self._parked
        acked = missing = held = 0
        lone: list[int] = []
        for offset in range(max(begin, self._committed), end):
            if pop(offset, None) is not None:
                acked += 1
                lone.append(offset)
            elif parked and offset in parked:
                # As in `ack`: late, harmless, and not an ack of the dead letter.
                held += 1
            elif not self.is_acked(offset):
                missing += 1
        if not acked:
            return 0, missing
        if missing or held:
            for offset in lone:
                self._mark_acked(offset)
        else:
            # Every offset was handed out or acked already: one range update instead of one per offset.
            self._add_acked_range(lone[0], lone[-1] + 1)
        return acked, missing

    def expire(self, now: float) -> None:
        """Dead-letter expired offers that used up their retries, without waiting for a caller."""
        if self.max_retries < 0:
            return
        for offer in list(self._offers.values()):
            if offer.deadline > now:
                break
            if offer.attempt >= self.max_retries:
                del self._offers[offer.message.offset]
                self._give_up(offer.message)

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


@dataclass
class GroupTopicCore:
    """All partitions of one topic that this gateway holds for one group."""

    settings: TrackerSettings = field(default_factory=TrackerSettings)
    trackers: dict[int, PartitionTracker] = field(default_factory=dict)
    # partition -> highest offset handed out before the partition was revoked
    released: dict[int, int] = field(default_factory=dict)
    _rotation: int = 0

    def assign(self, partition: int, committed_offset: int, metadata: str = "") -> PartitionTracker:
        tracker = PartitionTracker(
            partition,
            committed_offset,
            metadata,
            ack_timeout=self.settings.ack_timeout,
            max_pending=self.settings.max_pending,
            max_retries=self.settings.max_retries,
            max_metadata_length=self.settings.max_metadata_length,
            hold_dead_letters=self.settings.hold_dead_letters,
            dead_letter_backoff=self.settings.dead_letter_backoff,
            dead_letter_max_backoff=self.settings.dead_letter_max_backoff,
        )
        self.trackers[partition] = tracker
        return tracker

    def revoke(self, partition: int) -> CommitPoint | None:
        tracker = self.trackers.pop(partition, None)
        if tracker is None:
            return None
        self.released[partition] = max(self.released.get(partition, -1), tracker.highest_handed_out)
        return tracker.commit_point()

    def pending_count(self) -> int:
        return sum(tracker.pending_count for tracker in self.trackers.values())

    def parked_count(self) -> int:
        return sum(tracker.parked_count for tracker in self.trackers.values())

    def add_fetched(self, messages: Iterable[RawMessage | Message]) -> None:
        for message in messages:
            tracker = self.trackers.get(message[0])
            if tracker is not None:
                tracker.add_fetched(message)

    def next_delivery(self, now: float) -> Delivery | None:
        """Round-robin over partitions so one busy partition cannot starve the rest."""
        deliveries = self.take(now, 1)
        return deliveries[0] if deliveries else None

    def take(self, now: float, limit: int, max_pending: int | None = None) -> list[Delivery]:
        """Up to `limit` messages, in turns over the partitions starting after the last one served.

        Each turn takes an even share from a partition, so a batch holds a few contiguous runs of
        offsets (cheap to acknowledge as ranges) and one busy partition cannot starve the rest.
        `max_pending` overrides the trackers' own limit of un-acked messages (batch and stream calls).
        """
        partitions = sorted(self.trackers)
        count = len(partitions)
        deliveries: list[Delivery] = []
        if not count:
            return deliveries
        start, last_served = self._rotation, -1
        progress = True
        while len(deliveries) < limit and progress:
            progress = False
            share = max((limit - len(deliveries)) // count, 1)
            for step in range(count):
                room = limit - len(deliveries)
                if room <= 0:
                    break
                index = (start + step) % count
                taken = self.trackers[partitions[index]].take(now, min(share, room), max_pending)
                if taken:
                    deliveries.extend(taken)
                    last_served, progress = index, True
        if last_served >= 0:
            self._rotation = (last_served + 1) % count
        return deliveries

    def has_ready(self, now: float) -> bool:
        return any(tracker.has_ready(now) for tracker in self.trackers.values())

    def ack(self, partition: int, offset: int) -> AckOutcome:
        tracker = self.trackers.get(partition)
        if tracker is None:
            # A partition that moved to another group member after we handed out
            # messages of it: their late acks are expected and simply too late.
            if offset <= self.released.get(partition, -1):
                return AckOutcome.DUPLICATE
            return AckOutcome.NOT_HANDED_OUT
        return tracker.ack(offset)

    def ack_range(self, partition: int, begin: int, end: int) -> tuple[int, int]:
        """Acknowledge offsets [begin, end) of a partition: (newly acked, never handed out)."""
        tracker = self.trackers.get(partition)
        if tracker is None:
            # As in `ack`: late acks of a revoked partition are too late, not wrong.
            if end - 1 <= self.released.get(partition, -1):
                return 0, 0
            return 0, max(end - max(begin, self.released.get(partition, -1) + 1), 0)
        return tracker.ack_range(begin, end)

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (t.next_deadline() for t in self.trackers.values()) if d is not None]
        return min(deadlines) if deadlines else None

    def take_commits(self) -> dict[int, CommitPoint]:
        commits: dict[int, CommitPoint] = {}
        for partition, tracker in self.trackers.items():
            point = tracker.take_commit_if_changed()
            if point is not None:
                commits[partition] = point
        return commits

    def forget_last_commits(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            tracker = self.trackers.get(partition)
            if tracker is not None:
                tracker.forget_last_commit()

    def take_dead_letters(self, now: float | None = None) -> list[Message]:
        """Messages given up after max_retries; with `now`, expired ones are collected first."""
        letters: list[Message] = []
        for tracker in self.trackers.values():
            if now is not None:
                tracker.expire(now)
            letters.extend(tracker.take_dead_letters())
        return letters

    def take_dead_letter_retries(self, now: float) -> list[Message]:
        """Held dead letters due for another produce attempt (see `PartitionTracker.dead_letter_failed`)."""
        letters: list[Message] = []
        for tracker in self.trackers.values():
            letters.extend(tracker.take_dead_letter_retries(now))
        return letters

    def dead_letter_confirmed(self, partition: int, offset: int) -> bool:
        tracker = self.trackers.get(partition)
        # A revoked partition: its next owner starts from the last commit and gives the message up again.
        return tracker is not None and tracker.dead_letter_confirmed(offset)

    def dead_letter_failed(self, partition: int, offset: int, now: float) -> bool:
        tracker = self.trackers.get(partition)
        return tracker is not None and tracker.dead_letter_failed(offset, now)

    def buffered_counts(self) -> dict[int, int]:
        return {partition: tracker.buffered_count for partition, tracker in self.trackers.items()}
