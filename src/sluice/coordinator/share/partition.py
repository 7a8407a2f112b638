"""One share-partition's delivery state (KIP-932; Kafka's SharePartition): which records of one partition a
share group has handed out, to whom, how often, and which are done. Pure: time comes in as arguments, the
caller reads the log and persists `state_batches()` after every change that must survive a restart.

The partition's offsets fall in three parts:

    [.., start_offset)              done for this group: acknowledged, archived, or skipped by a reset
    [start_offset, next_offset)     in flight: every offset lies in exactly one Run
    [next_offset, ..)               never handed out yet

A Run is consecutive offsets that share a state and a delivery count (and, while ACQUIRED, the member that
holds them and when their lock ends). States and moves, as Kafka's:

    AVAILABLE  --acquire (delivery count + 1)-->  ACQUIRED
    ACQUIRED   --ACCEPT-->                        ACKNOWLEDGED   (terminal)
    ACQUIRED   --REJECT or GAP-->                 ARCHIVED       (terminal)
    ACQUIRED   --RELEASE, lock timeout, holder gone-->  AVAILABLE, or ARCHIVED once the delivery count has
                                                  reached the group's delivery limit
    ACQUIRED   --RENEW-->                         ACQUIRED with a fresh lock

The start offset moves over every leading run that is terminal, so the in-flight window only holds what is
still owed. New records are acquired only while the window is smaller than the in-flight cap
(share.partition.max.record.locks); a fetch at the cap acquires nothing new until some records complete.
Control batches (transaction markers) and, under read_committed, batches of aborted transactions are never
handed out: they enter the window ARCHIVED.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from enum import IntEnum

from sluice.errors import ErrorCode


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AcquireMode(IntEnum):
    # Whole batches: MaxRecords is a soft limit, rounded up to the end of the batch it falls in.
    BATCH_OPTIMIZED = 0
    # KIP-1206: never more than MaxRecords records, splitting a batch where needed.
    RECORD_LIMIT = 1


class BatchKind(IntEnum):
    DATA = 0
    CONTROL = 1  # a transaction marker: never delivered
    ABORTED = 2  # read_committed: a batch of an aborted transaction, never delivered


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_ACK_TARGET = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


@dataclass(slots=True)
class Run:
    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int = 0

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def same_as(self, other: Run) -> bool:
        """Whether the two runs may be one: terminal runs of one state always, others when alike in all."""
        if self.state is not other.state:
            return False
        if self.state in TERMINAL:
            return True
        return (
            self.delivery_count == other.delivery_count
            and self.member_id == other.member_id
            and self.lock_deadline_ms == other.lock_deadline_ms
        )


@dataclass(frozen=True, slots=True)
class LogBatch:
    """A batch as the log holds it: its offsets, and whether it may be delivered."""

    first: int
    last: int
    kind: BatchKind = BatchKind.DATA


@dataclass(frozen=True, slots=True)
class StateBatch:
    """One persisted range (`__share_group_state`): ACQUIRED is kept as AVAILABLE with its raised count,
    so records held at a crash come back for delivery, counted."""

    first: int
    last: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Ask:
    """What one acquisition may take, and the group's settings it runs under."""

    max_records: int
    lock_deadline_ms: int
    max_in_flight: int  # share.partition.max.record.locks
    delivery_limit: int  # share.delivery.count.limit
    mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED
    # ShareFetch's BatchSize: new records are handed out in ranges of about this many (whole log batches).
    batch_size: int = 2**31 - 1


@dataclass(slots=True)
class Acquired:
    """What one acquisition handed out: (first, last, delivery count) ranges, in offset order."""

    ranges: list[tuple[int, int, int]] = field(default_factory=list)
    count: int = 0
    redelivered: int = 0
    archived: int = 0  # control batches and aborted transactions skipped on the way
    # A record on its last attempts stopped the acquisition (it goes alone, or with fewer than usual).
    stopped: bool = False

    def add(self, first: int, last: int, delivery_count: int, batch_size: int) -> None:
        """Record a handed-out range, joined to the previous one when it continues it with the same count
        and the joined range stays within `batch_size` (a new range starts at a log batch boundary)."""
        self.count += last - first + 1
        if self.ranges:
            start, end, count = self.ranges[-1]
            if end + 1 == first and count == delivery_count and first - start < batch_size:
                self.ranges[-1] = (start, last, count)
                return
        self.ranges.append((first, last, delivery_count))


@dataclass(slots=True)
class Acknowledged:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    # Records per acknowledgement type, and how many RELEASEs ended ARCHIVED at the delivery limit.
    by_type: dict[AcknowledgeType, int] = field(default_factory=dict)
    archived_at_limit: int = 0


@dataclass(slots=True)
class Released:
    """Records an expiry or a departure gave back: made available again, or archived at the limit."""

    available: int = 0
    archived: int = 0

    def __bool__(self) -> bool:
        return bool(self.available or self.archived)


class AcknowledgeRefused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SharePartition:
    def __init__(self, start_offset: int, state_epoch: int = 0) -> None:
        self.start_offset = start_offset
        self.next_offset = start_offset
        self.runs: list[Run] = []
        # Bumped when the group's offsets are reset (AlterShareGroupOffsets): a new life of the state.
        self.state_epoch = state_epoch

    # ----- views -----

    @property
    def in_flight(self) -> int:
        return self.next_offset - self.start_offset

    def count(self, state: RecordState) -> int:
        return sum(run.size for run in self.runs if run.state is state)

    def next_fetch_offset(self) -> int:
        """Where the log should be read from: the first record available again, or the never-delivered."""
        for run in self.runs:
            if run.state is RecordState.AVAILABLE:
                return run.first
        return self.next_offset

    def can_acquire(self, max_in_flight: int) -> bool:
        """Whether a fetch could acquire anything: records available again, or room for new ones."""
        return self.in_flight < max_in_flight or any(r.state is RecordState.AVAILABLE for r in self.runs)

    def next_deadline(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.runs if r.state is RecordState.ACQUIRED]
        return min(deadlines, default=None)

    def lag(self, high_watermark: int) -> int:
        """KIP-1226: records up to the high watermark not yet delivered to completion."""
        done = sum(run.size for run in self.runs if run.state in TERMINAL)
        return max(0, high_watermark - self.start_offset - done)

    def held_by(self, member_id: str) -> int:
        return sum(r.size for r in self.runs if r.state is RecordState.ACQUIRED and r.member_id == member_id)

    # ----- acquire -----

    def acquire(self, member_id: str, batches: list[LogBatch], ask: Ask) -> Acquired:
        """Hand `member_id` what it may have of `batches` (read from the log at `next_fetch_offset()`)."""
        out = Acquired()
        for batch in batches:
            if out.count >= ask.max_records or out.stopped:
                break
            first = max(batch.first, self.start_offset)
            if batch.last < first:
                continue
            if first < self.next_offset:
                self._acquire_again(member_id, batch, first, out, ask)
                first = self.next_offset
                if out.count >= ask.max_records or out.stopped or batch.last < first:
                    continue
            if first > self.next_offset:
                # Offsets the log no longer has (compacted away): nothing to deliver there.
                self._append(Run(self.next_offset, first - 1, RecordState.ARCHIVED, 0))
            if batch.kind is not BatchKind.DATA:
                self._append(Run(first, batch.last, RecordState.ARCHIVED, 0))
                out.archived += batch.last - first + 1
                continue
            room = ask.max_in_flight - self.in_flight
            if room <= 0:
                break
            last = batch.last
            if ask.mode is AcquireMode.RECORD_LIMIT:
                last = min(last, first + min(ask.max_records - out.count, room) - 1)
            self._append(Run(first, last, RecordState.ACQUIRED, 1, member_id, ask.lock_deadline_ms))
            if last < batch.last:
                # KIP-1206: the rest of the log batch is in flight too, available, never delivered.
                self._append(Run(last + 1, batch.last, RecordState.AVAILABLE, 0))
            out.add(first, last, 1, ask.batch_size)
        self._coalesce_all()
        self._advance_start()
        return out

    def _acquire_again(self, member_id: str, batch: LogBatch, first: int, out: Acquired, ask: Ask) -> None:
        """Acquire the AVAILABLE records of `batch` from `first` that are already in flight. Records near
        their delivery limit go out in ever smaller groups, and on their last attempt alone (Kafka's
        throttling, KAFKA-17541): a record that keeps failing its consumer takes less with it each time."""
        last = min(batch.last, self.next_offset - 1)
        limit = ask.delivery_limit
        throttle_from = max(2, -(-limit // 2))
        index = self._runs_from(first)
        while index < len(self.runs) and self.runs[index].first <= last:
            run = self.runs[index]
            if run.state is not RecordState.AVAILABLE:
                index += 1
                continue
            lo, hi = max(run.first, first), min(run.last, last)
            if ask.mode is AcquireMode.RECORD_LIMIT:
                hi = min(hi, lo + ask.max_records - out.count - 1)
            if batch.kind is BatchKind.DATA and run.delivery_count >= throttle_from:
                if out.count:
                    out.stopped = True
                    return
                hi = min(hi, lo + max(1, run.size >> (run.delivery_count - throttle_from + 1)) - 1)
            if batch.kind is BatchKind.DATA and limit > 2 and run.delivery_count == limit - 1:
                if out.count:
                    out.stopped = True
                    return
                hi = lo  # the last attempt goes alone
            if hi < lo:
                break
            run = self._isolate(lo, hi)
            index = self._runs_from(lo) + 1
            if batch.kind is not BatchKind.DATA:
                self._complete(run, RecordState.ARCHIVED)
                out.archived += run.size
                continue
            run.state = RecordState.ACQUIRED
            run.delivery_count += 1
            run.member_id = member_id
            run.lock_deadline_ms = ask.lock_deadline_ms
            out.add(run.first, run.last, run.delivery_count, ask.batch_size)
            if run.delivery_count > 1:
                out.redelivered += run.size
            if run.delivery_count >= limit:
                out.stopped = True  # a last attempt goes out with nothing after it
                return
            if ask.mode is AcquireMode.RECORD_LIMIT and out.count >= ask.max_records:
                return

    # ----- acknowledge -----

    def acknowledge(
        self,
        member_id: str,
        batches: list[tuple[int, int, list[int]]],
        *,
        delivery_limit: int,
        lock_deadline_ms: int,
        renew_allowed: bool,
    ) -> Acknowledged:
        """Apply a partition's acknowledgements, all or none: any range the member does not hold refuses
        the lot (INVALID_RECORD_STATE), as does a malformed one (INVALID_REQUEST)."""
        try:
            plan = self._plan_acknowledgements(member_id, batches, renew_allowed)
        except AcknowledgeRefused as refused:
            return Acknowledged(refused.code, refused.message)
        out = Acknowledged()
        for first, last, ack in plan:
            run = self._isolate(first, last)
            out.by_type[ack] = out.by_type.get(ack, 0) + run.size
            if ack is AcknowledgeType.RENEW:
                run.lock_deadline_ms = lock_deadline_ms
            elif ack is AcknowledgeType.RELEASE:
                out.archived_at_limit += self._give_back(run, delivery_limit)
            else:
                self._complete(run, _ACK_TARGET[ack])
        self._coalesce_all()
        self._advance_start()
        return out

    def _plan_acknowledgements(
        self, member_id: str, batches: list[tuple[int, int, list[int]]], renew_allowed: bool
    ) -> list[tuple[int, int, AcknowledgeType]]:
        plan: list[tuple[int, int, AcknowledgeType]] = []
        previous_last = -1
        for first, last, types in batches:
            if last < first or first < previous_last:
                raise AcknowledgeRefused(
                    ErrorCode.INVALID_REQUEST, f"acknowledgement range {first}-{last} is out of order"
                )
            previous_last = last
            if not types or len(types) not in (1, last - first + 1):
                raise AcknowledgeRefused(
                    ErrorCode.INVALID_REQUEST,
                    f"range {first}-{last} has {len(types)} acknowledge types: one, or one per offset",
                )
            kinds = [_ack_type(t, renew_allowed) for t in types]
            if last < self.start_offset:
                continue  # done already: Kafka accepts these silently
            if not self.runs:
                raise AcknowledgeRefused(
                    ErrorCode.INVALID_RECORD_STATE,
                    "Batch record not found. The request batch offsets are not found in the cache.",
                )
            if last >= self.next_offset:
                raise AcknowledgeRefused(
                    ErrorCode.INVALID_REQUEST,
                    f"Batch record not found. Offsets {max(first, self.next_offset)}-{last} are past acquired records.",
                )
            for offset, length, kind in _type_runs(first, last, kinds):
                lo, hi = max(offset, self.start_offset), offset + length - 1
                if hi < lo:
                    continue  # already done: the start offset moved past them
                self._check_held(member_id, lo, hi)
                plan.append((lo, hi, kind))
        return plan

    def _check_held(self, member_id: str, first: int, last: int) -> None:
        index = self._runs_from(first)
        while index < len(self.runs) and self.runs[index].first <= last:
            run = self.runs[index]
            if run.state is not RecordState.ACQUIRED:
                state = run.state.name.lower()
                raise AcknowledgeRefused(
                    ErrorCode.INVALID_RECORD_STATE,
                    f"offsets {max(run.first, first)}-{min(run.last, last)} are {state}, not acquired",
                )
            if run.member_id != member_id:
                raise AcknowledgeRefused(
                    ErrorCode.INVALID_RECORD_STATE,
                    f"offsets {max(run.first, first)}-{min(run.last, last)} are held by another member",
                )
            index += 1

    # ----- giving records back -----

    def expire(self, now_ms: int, delivery_limit: int) -> Released:
        """Locks that ended by `now_ms` give their records back."""
        return self._release(lambda run: run.lock_deadline_ms <= now_ms, delivery_limit)

    def release_member(self, member_id: str, delivery_limit: int) -> Released:
        """A member gone (left, session closed or expired) gives back everything it holds."""
        return self._release(lambda run: run.member_id == member_id, delivery_limit)

    def _release(self, which: object, delivery_limit: int) -> Released:
        out = Released()
        for run in list(self.runs):
            if run.state is RecordState.ACQUIRED and which(run):  # type: ignore[operator]
                size = run.size
                if self._give_back(run, delivery_limit):
                    out.archived += size
                else:
                    out.available += size
        if out:
            self._coalesce_all()
            self._advance_start()
        return out

    def _give_back(self, run: Run, delivery_limit: int) -> int:
        """ACQUIRED -> AVAILABLE, or ARCHIVED once delivered `delivery_limit` times; returns records archived."""
        if run.delivery_count >= delivery_limit:
            self._complete(run, RecordState.ARCHIVED)
            return run.size
        run.state = RecordState.AVAILABLE
        run.member_id = None
        run.lock_deadline_ms = 0
        return 0

    @staticmethod
    def _complete(run: Run, state: RecordState) -> None:
        run.state = state
        run.member_id = None
        run.lock_deadline_ms = 0

    # ----- the start offset -----

    def move_start(self, offset: int) -> None:
        """The log no longer has records below `offset` (retention, DeleteRecords): forget them."""
        if offset <= self.start_offset:
            return
        if offset >= self.next_offset:
            self.runs = []
            self.start_offset = self.next_offset = offset
            return
        self._split(offset)
        self.runs = self.runs[self._runs_from(offset):]
        self.start_offset = offset
        self._advance_start()

    def reset(self, offset: int) -> None:
        """AlterShareGroupOffsets: everything starts again from `offset`, with a new state epoch."""
        self.runs = []
        self.start_offset = self.next_offset = offset
        self.state_epoch += 1

    def _advance_start(self) -> None:
        done = 0
        for run in self.runs:
            if run.state not in TERMINAL:
                break
            done += 1
        if done:
            self.start_offset = self.runs[done - 1].last + 1
            del self.runs[:done]
        if not self.runs:
            self.start_offset = self.next_offset

    # ----- persistence -----

    def state_batches(self) -> list[StateBatch]:
        return [
            StateBatch(
                run.first,
                run.last,
                RecordState.AVAILABLE if run.state is RecordState.ACQUIRED else run.state,
                run.delivery_count,
            )
            for run in self.runs
        ]

    @classmethod
    def restore(
        cls, start_offset: int, batches: list[StateBatch], delivery_limit: int, state_epoch: int = 0
    ) -> SharePartition:
        """The partition a persisted state describes. Offsets no batch covers were never delivered; records
        available at the delivery limit had their last attempt cut short by a crash: archived."""
        partition = cls(start_offset, state_epoch)
        cursor = start_offset
        for batch in sorted(batches, key=lambda b: b.first):
            first = max(batch.first, cursor)
            if batch.last < first:
                continue
            if first > cursor:
                partition.runs.append(Run(cursor, first - 1, RecordState.AVAILABLE, 0))
            state = RecordState(batch.state)
            if state not in TERMINAL:
                at_limit = batch.delivery_count >= delivery_limit
                state = RecordState.ARCHIVED if at_limit else RecordState.AVAILABLE
            partition._append_run(Run(first, batch.last, state, batch.delivery_count))
            cursor = batch.last + 1
        partition.next_offset = cursor
        partition._advance_start()
        return partition

    # ----- runs -----

    def _runs_from(self, offset: int) -> int:
        """Index of the run holding `offset` (or of the first run after it)."""
        index = bisect_right(self.runs, offset, key=lambda run: run.first) - 1
        if index < 0 or self.runs[index].last < offset:
            index += 1
        return index

    def _split(self, offset: int) -> None:
        """Make `offset` the first offset of a run (when it lies inside one)."""
        index = self._runs_from(offset)
        if index >= len(self.runs):
            return
        run = self.runs[index]
        if run.first < offset <= run.last:
            tail = Run(offset, run.last, run.state, run.delivery_count, run.member_id, run.lock_deadline_ms)
            run.last = offset - 1
            self.runs.insert(index + 1, tail)

    def _isolate(self, first: int, last: int) -> Run:
        """The run of exactly [first, last], which lies inside one run, split out of it."""
        self._split(first)
        self._split(last + 1)
        return self.runs[self._runs_from(first)]

    def _append(self, run: Run) -> None:
        """A run of never-delivered offsets, at the end of the window."""
        self._append_run(run)
        self.next_offset = run.last + 1

    def _append_run(self, run: Run) -> None:
        if self.runs and self.runs[-1].same_as(run) and self.runs[-1].last + 1 == run.first:
            self.runs[-1].last = run.last
        else:
            self.runs.append(run)

    def _coalesce_all(self) -> None:
        merged: list[Run] = []
        for run in self.runs:
            if merged and merged[-1].same_as(run):
                merged[-1].last = run.last
                merged[-1].delivery_count = max(merged[-1].delivery_count, run.delivery_count)
            else:
                merged.append(run)
        self.runs = merged


def _ack_type(value: int, renew_allowed: bool) -> AcknowledgeType:
    try:
        kind = AcknowledgeType(value)
    except ValueError:
        raise AcknowledgeRefused(ErrorCode.INVALID_REQUEST, f"acknowledge type {value} is not 0-4") from None
    if kind is AcknowledgeType.RENEW and not renew_allowed:
        raise AcknowledgeRefused(
            ErrorCode.INVALID_REQUEST, "RENEW acknowledgements need IsRenewAck and ShareFetch/ShareAcknowledge v2"
        )
    return kind


def _type_runs(first: int, last: int, kinds: list[AcknowledgeType]) -> list[tuple[int, int, AcknowledgeType]]:
    """(offset, length, type) for each stretch of equal types; one type covers the whole range."""
    if len(kinds) == 1:
        return [(first, last - first + 1, kinds[0])]
    out: list[tuple[int, int, AcknowledgeType]] = []
    for index, kind in enumerate(kinds):
        if out and out[-1][2] is kind:
            offset, length, _ = out[-1]
            out[-1] = (offset, length + 1, kind)
        else:
            out.append((first + index, 1, kind))
    return out
