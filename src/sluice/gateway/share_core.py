"""kafka-pixy's consume-and-ack on a Kafka share group (KIP-932), free of I/O: what one gateway holds of one
(group, topic).

The broker keeps the acks: each record a share-group member fetches is *acquired* for the group's lock
duration (`share.record.lock.duration.ms`), and the member settles it with ACCEPT, RELEASE or REJECT. The
gateway's members are confluent-kafka ShareConsumers in explicit mode, and a member may fetch again only
once every record of its last fetch is settled. This core keeps, per record, which member holds it and until
when, and turns the callers' acks and the clock into the settlements the members send:

* records fetched wait in `ready` until callers take them (in fetched order); a record handed out is *held*
  until its caller acks it (ACCEPT);
* the ack timeout is the lock: a record is settled with RELEASE at its `deadline`, the lock's end less a
  margin, so that the RELEASE reaches the broker while the lock is still ours (an acknowledgement of a
  record whose lock ran out fails, and takes the other acknowledgements of its partition in the same request
  with it). The broker then hands it out again with its delivery count raised. Records nobody took go back
  the same way. An ack that comes after that is LATE: the message is delivered again;
* a record delivered more than `max_retries` + 1 times is a dead letter: never handed out, settled with
  REJECT once the shell confirms it (the dead-letter topic has it, or there is none); one not confirmed by
  its deadline is released, delivered again and parked again.

Time is passed in (seconds, any monotonic origin). The shell (share_consumer.py) fetches, sends the
settlements and wakes waiting callers.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import NamedTuple

from .batches import Batch, ByteBudget, Message

# Kafka's acknowledge types (ShareAcknowledge's AcknowledgeTypes), as confluent-kafka's AcknowledgeType.
ACCEPT, RELEASE, REJECT = 1, 2, 3
# Settled records remembered for their late or repeated acks.
_SETTLED_MEMORY = 50_000
# The margin between a record's deadline here and its lock's end at the broker: a tenth of the lock, within
# these bounds. It must cover the ack's trip to the broker after the deadline check (the flush interval is
# kept to a third of it) and the fetch's answer travelling to the gateway.
_MARGIN_SHARE = 0.1
_MIN_MARGIN_SECONDS = 0.3
_MAX_MARGIN_SECONDS = 2.0


def lock_margin(lock_seconds: float) -> float:
    return min(max(lock_seconds * _MARGIN_SHARE, _MIN_MARGIN_SECONDS), _MAX_MARGIN_SECONDS)


class ShareAck(enum.Enum):
    ACKED = "acked"
    # Already acknowledged: harmless, nothing changes.
    DUPLICATE = "duplicate"
    # Its lock had run out and it was released: the message is delivered again.
    LATE = "late"
    # This gateway never handed the message out.
    NOT_HANDED_OUT = "not handed out"


class Settlement(NamedTuple):
    partition: int
    offset: int
    kind: int  # ACCEPT, RELEASE or REJECT


class _Ready:
    """A fetched batch, handed out from `start` on (a cursor: cutting off what went would copy the rest)."""

    __slots__ = ("batch", "deadline", "member", "start")

    def __init__(self, member: int, deadline: float, batch: Batch) -> None:
        self.member, self.deadline, self.batch, self.start = member, deadline, batch, 0

    def offsets_left(self) -> list[int]:
        return self.batch.offsets[self.start :]


class _Held(NamedTuple):
    member: int
    deadline: float


class ShareDeliveries:
    """The records of one share-group topic that this gateway's members hold, and what to tell the broker."""

    def __init__(self, lock_seconds: float, max_retries: int = -1) -> None:
        self.lock_seconds = lock_seconds
        self.max_retries = max_retries
        self._ready: deque[_Ready] = deque()
        self._held: dict[tuple[int, int], _Held] = {}
        # member -> records acquired and not yet settled (ready, held or parked)
        self._open: dict[int, int] = {}
        self._settlements: dict[int, list[Settlement]] = {}
        # (partition, offset) -> the ack outcome a repeated ack gets
        self._settled: OrderedDict[tuple[int, int], ShareAck] = OrderedDict()
        # dead letters: (partition, offset) -> (member, deadline, message); `_letters` not yet given to the sink
        self._parked: dict[tuple[int, int], tuple[int, float, Message]] = {}
        self._letters: list[Message] = []
        # Whether some member's open records came down to 0 since `take_freed` (it may fetch again, or close).
        self._freed = False
        # No later than the earliest deadline of anything ready, held or parked; None when nothing is.
        self._earliest: float | None = None

    @property
    def margin(self) -> float:
        return lock_margin(self.lock_seconds)

    # -- what the members fetched ----------------------------------------------
    def add_fetched(self, member: int, batches: Iterable[Batch], acquired_at: float) -> None:
        """Records a member's poll returned; `acquired_at` is no later than the broker acquired them."""
        deadline = acquired_at + self.lock_seconds - self.margin
        if self._earliest is None or deadline < self._earliest:
            self._earliest = deadline
        for batch in batches:
            self._open[member] = self._open.get(member, 0) + len(batch.offsets)
            if 0 <= self.max_retries < batch.attempt:
                self._park(member, deadline, batch)
            else:
                self._ready.append(_Ready(member, deadline, batch))

    def _park(self, member: int, deadline: float, batch: Batch) -> None:
        for message in batch.messages():
            self._parked[(message.partition, message.offset)] = (member, deadline, message)
            self._letters.append(message)

    # -- the callers' side -----------------------------------------------------
    def take(self, now: float, limit: int, max_bytes: int | None = None) -> list[Batch]:
        """Up to `limit` ready messages (and about `max_bytes` of them), held from now on."""
        self.expire(now)
        taken: list[Batch] = []
        budget = ByteBudget(max_bytes)
        ready, held = self._ready, self._held
        while ready and limit > 0 and not budget.exhausted:
            entry = ready[0]
            start, end = entry.start, len(entry.batch.offsets)
            part = (
                entry.batch.cut(start, min(end, start + limit))
                if start or end - start > limit
                else entry.batch
            )
            count = budget.fit(part)
            if count == 0:
                break
            if count < len(part.offsets):
                part = part.cut(0, count)
            entry.start = start + count
            if entry.start == end:
                ready.popleft()
            held_entry = _Held(entry.member, entry.deadline)
            partition = part.partition
            for offset in part.offsets:
                held[(partition, offset)] = held_entry
            taken.append(part)
            limit -= count
        return taken

    def has_ready(self) -> bool:
        return bool(self._ready)

    def ack(self, partition: int, offset: int, now: float) -> ShareAck:
        """A caller's ack of a message handed out (ACCEPT), unless its deadline passed."""
        key = (partition, offset)
        held = self._held.get(key)
        if held is not None and held.deadline <= now:
            self.expire(now)
            held = None
        if held is None:
            return self._settled.get(key, ShareAck.NOT_HANDED_OUT)
        del self._held[key]
        self._settle(held.member, partition, offset, ACCEPT, ShareAck.DUPLICATE)
        return ShareAck.ACKED

    def ack_ranges(
        self, ranges: Iterable[tuple[int, int, int]], now: float
    ) -> tuple[int, int, tuple[int, int] | None]:
        """Acks of (partition, begin, end) ranges [begin, end): (acked, late, the first range holding an
        offset never handed out, as (partition, begin)). A range wider than what is held and remembered is
        looked up in those, not walked offset by offset (a client names the range)."""
        acked = late = 0
        bad: tuple[int, int] | None = None
        known: dict[int, list[int]] | None = None
        for partition, begin, end in ranges:
            span = end - begin
            if span <= len(self._held) + len(self._settled):
                offsets: Iterable[int] = range(begin, end)
            else:
                if known is None:  # once per call, however many wide ranges it names
                    known = {}
                    for p, o in sorted(set(itertools.chain(self._held, self._settled))):
                        known.setdefault(p, []).append(o)
                of_partition = known.get(partition, [])
                offsets = of_partition[
                    bisect.bisect_left(of_partition, begin) : bisect.bisect_left(of_partition, end)
                ]
            found = 0
            for offset in offsets:
                outcome = self.ack(partition, offset, now)
                if outcome is not ShareAck.NOT_HANDED_OUT:
                    found += 1
                    acked += outcome is ShareAck.ACKED
                    late += outcome is ShareAck.LATE
            if found < span and bad is None:
                bad = (partition, begin)
        return acked, late, bad

    def _settle(self, member: int, partition: int, offset: int, kind: int, later: ShareAck) -> None:
        self._settlements.setdefault(member, []).append(Settlement(partition, offset, kind))
        left = self._open[member] = self._open[member] - 1
        if left == 0:
            self._freed = True
        settled = self._settled
        settled[(partition, offset)] = later
        settled.move_to_end((partition, offset))
        if len(settled) > _SETTLED_MEMORY:
            settled.popitem(last=False)

    # -- the clock -------------------------------------------------------------
    def expire(self, now: float) -> int:
        """Release what reached its deadline (held, ready or parked); returns how many."""
        if self._earliest is None or now < self._earliest:
            return 0
        released = 0
        if any(entry.deadline <= now for entry in self._ready):
            due_batches = [entry for entry in self._ready if entry.deadline <= now]
            self._ready = deque(entry for entry in self._ready if entry.deadline > now)
            for entry in due_batches:
                offsets = entry.offsets_left()
                for offset in offsets:
                    self._settle(entry.member, entry.batch.partition, offset, RELEASE, ShareAck.LATE)
                released += len(offsets)
        for key in [key for key, entry in self._held.items() if entry.deadline <= now]:
            entry = self._held.pop(key)
            self._settle(entry.member, key[0], key[1], RELEASE, ShareAck.LATE)
            released += 1
        for key in [key for key, entry in self._parked.items() if entry[1] <= now]:
            # A dead letter the sink did not confirm in time: delivered again, and parked again then.
            member = self._parked.pop(key)[0]
            self._settle(member, key[0], key[1], RELEASE, ShareAck.LATE)
            released += 1
        self._earliest = self._next_deadline()
        return released

    def _next_deadline(self) -> float | None:
        deadlines = [entry.deadline for entry in self._held.values()]
        deadlines.extend(entry.deadline for entry in self._ready)
        deadlines.extend(entry[1] for entry in self._parked.values())
        return min(deadlines) if deadlines else None

    def next_deadline(self) -> float | None:
        """No later than the next deadline (it may be one already settled: `expire` then finds nothing)."""
        return self._earliest

    # -- the members' side -----------------------------------------------------
    def take_settlements(self) -> dict[int, list[Settlement]]:
        settlements, self._settlements = self._settlements, {}
        return settlements

    def take_freed(self) -> bool:
        freed, self._freed = self._freed, False
        return freed

    def open_count(self, member: int) -> int:
        """Records of `member`'s fetches not yet settled: it may fetch again once this is 0."""
        return self._open.get(member, 0)

    def waits_on_holders(self, member: int) -> bool:
        """`member` has nothing left to hand out but cannot fetch: callers still hold some of its records."""
        return self._open.get(member, 0) > 0 and not any(entry.member == member for entry in self._ready)

    def forget(self, member: int) -> None:
        """A member closed: what it still held is the broker's to release."""
        self._open.pop(member, None)
        self._settlements.pop(member, None)
        self._ready = deque(entry for entry in self._ready if entry.member != member)
        for key in [key for key, entry in self._held.items() if entry.member == member]:
            del self._held[key]
            self._settled[key] = ShareAck.LATE
        for key in [key for key, entry in self._parked.items() if entry[0] == member]:
            del self._parked[key]

    def held_count(self) -> int:
        return len(self._held) + len(self._parked)

    def ready_count(self) -> int:
        return sum(len(entry.batch.offsets) - entry.start for entry in self._ready)

    # -- dead letters ----------------------------------------------------------
    def take_dead_letters(self) -> list[Message]:
        letters, self._letters = self._letters, []
        return letters

    def dead_letter_confirmed(self, partition: int, offset: int) -> bool:
        """The dead-letter topic has it: archive it (REJECT)."""
        parked = self._parked.pop((partition, offset), None)
        if parked is None:
            return False
        self._settle(parked[0], partition, offset, REJECT, ShareAck.DUPLICATE)
        return True
