"""The share-partition state machine (sluice.coordinator.share.partition), pure: acquisition, acknowledgement,
locks, the delivery limit, the in-flight cap and the start offset, against Kafka's rules; then a model test
that runs random operations and checks that nothing is lost, nothing completed is handed out again, and the
state survives a restore from what would be persisted."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sluice.coordinator.share.partition import (
    TERMINAL,
    AcknowledgeType,
    AcquireMode,
    Ask,
    BatchKind,
    LogBatch,
    RecordState,
    SharePartition,
)
from sluice.errors import ErrorCode

A = AcknowledgeType
LIMIT = 5
LOCK = 30_000


def acquire(sp: SharePartition, member: str, batches: list[LogBatch], *, max_records: int = 500,
            mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED, now: int = 0, cap: int = 2000, limit: int = LIMIT,
            batch_size: int = 2**31 - 1):
    return sp.acquire(member, batches, Ask(max_records, now + LOCK, cap, limit, mode, batch_size))


def ack(sp: SharePartition, member: str, *batches: tuple[int, int, list[int]], renew: bool = False, now: int = 0):
    return sp.acknowledge(member, list(batches), delivery_limit=LIMIT, lock_deadline_ms=now + LOCK,
                          renew_allowed=renew)


def batches(*spans: tuple[int, int]) -> list[LogBatch]:
    return [LogBatch(first, last) for first, last in spans]


def test_acquire_hands_out_whole_batches_and_accept_moves_the_start():
    sp = SharePartition(0)
    got = acquire(sp, "m1", batches((0, 9), (10, 19)), max_records=5)
    # Batch-optimized: MaxRecords is rounded up to the end of the batch it falls in.
    assert got.ranges == [(0, 9, 1)] and got.count == 10
    assert sp.next_offset == 10 and sp.start_offset == 0
    assert ack(sp, "m1", (0, 9, [A.ACCEPT])).error is ErrorCode.NONE
    assert sp.start_offset == 10 and sp.runs == []


def test_record_limit_mode_splits_a_batch():
    sp = SharePartition(0)
    got = acquire(sp, "m1", batches((0, 9)), max_records=3, mode=AcquireMode.RECORD_LIMIT)
    # As Kafka: the rest of the log batch is in flight, available and never delivered.
    assert got.ranges == [(0, 2, 1)] and sp.next_offset == 10 and sp.next_fetch_offset() == 3
    got = acquire(sp, "m2", batches((0, 9)), max_records=3, mode=AcquireMode.RECORD_LIMIT)
    assert got.ranges == [(3, 5, 1)] and got.redelivered == 0


def test_batch_size_splits_new_ranges_at_log_batch_boundaries():
    sp = SharePartition(0)
    got = acquire(sp, "m1", batches((0, 3), (4, 7), (8, 11), (12, 15)), max_records=100, batch_size=8)
    assert got.ranges == [(0, 7, 1), (8, 15, 1)]


def test_records_near_the_delivery_limit_go_out_in_smaller_groups_and_alone_at_the_last():
    sp = SharePartition(0)
    limit = 4  # throttled from 2 deliveries on; the 4th is the last
    sizes = []
    for attempt in range(limit):
        got = acquire(sp, "m", batches((0, 15)), limit=limit, now=attempt * LOCK)
        sizes.append(got.count)
        ack(sp, "m", *[(f, last, [A.RELEASE]) for f, last, _ in got.ranges])
    assert sizes == [16, 16, 8, 1]


def test_per_offset_types_and_release_redelivers_with_a_raised_count():
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 4)))
    result = ack(sp, "m1", (0, 4, [A.ACCEPT, A.RELEASE, A.REJECT, A.ACCEPT, A.RELEASE]))
    assert result.error is ErrorCode.NONE
    assert result.by_type == {A.ACCEPT: 2, A.RELEASE: 2, A.REJECT: 1}
    assert sp.start_offset == 1
    assert sp.next_fetch_offset() == 1
    again = acquire(sp, "m2", batches((0, 4)))
    assert again.ranges == [(1, 1, 2), (4, 4, 2)] and again.redelivered == 2


def test_acknowledging_what_the_member_does_not_hold_is_refused_whole():
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 4)))
    acquire(sp, "m2", batches((5, 9)))
    refused = ack(sp, "m1", (0, 4, [A.ACCEPT]), (5, 5, [A.ACCEPT]))
    assert refused.error is ErrorCode.INVALID_RECORD_STATE
    assert ack(sp, "m1", (3, 4, [A.ACCEPT]), (0, 1, [A.ACCEPT])).error is ErrorCode.INVALID_REQUEST
    assert ack(sp, "m1", (0, 4, [])).error is ErrorCode.INVALID_REQUEST
    # All or nothing: 0-4 are still acquired by m1.
    assert sp.held_by("m1") == 5 and sp.start_offset == 0
    assert ack(sp, "m1", (20, 21, [A.ACCEPT])).error is ErrorCode.INVALID_REQUEST  # past acquired records
    assert ack(sp, "m1", (0, 4, [A.ACCEPT, A.ACCEPT])).error is ErrorCode.INVALID_REQUEST
    assert ack(sp, "m1", (0, 4, [7])).error is ErrorCode.INVALID_REQUEST
    assert ack(sp, "m1", (0, 4, [A.RENEW])).error is ErrorCode.INVALID_REQUEST
    assert ack(sp, "m1", (0, 4, [A.ACCEPT])).error is ErrorCode.NONE
    # Done records cannot be acknowledged again (the start moved past them: skipped, as Kafka does).
    assert ack(sp, "m2", (5, 9, [A.ACCEPT])).error is ErrorCode.NONE
    assert ack(sp, "m2", (5, 9, [A.REJECT])).error is ErrorCode.NONE and sp.start_offset == 10


def test_lock_expiry_and_the_delivery_limit_archive():
    sp = SharePartition(0)
    deliveries = {offset: 0 for offset in range(3)}
    now = 0
    for _ in range(20):
        got = acquire(sp, "m", batches((0, 2)), now=now)
        if not got.count:
            break
        for first, last, count in got.ranges:
            for offset in range(first, last + 1):
                deliveries[offset] += 1
                assert deliveries[offset] == count
        assert sp.next_deadline() == now + LOCK
        now += LOCK
        released = sp.expire(now, LIMIT)
        assert released.available + released.archived == got.count
    # Every record was delivered the limit's number of times, then archived.
    assert deliveries == {0: LIMIT, 1: LIMIT, 2: LIMIT}
    assert sp.start_offset == 3 and not sp.runs


def test_renew_extends_the_lock():
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 2)), now=0)
    assert ack(sp, "m1", (0, 2, [A.RENEW]), renew=True, now=20_000).error is ErrorCode.NONE
    assert not sp.expire(LOCK, LIMIT)
    assert sp.next_deadline() == 20_000 + LOCK


def test_a_member_gone_gives_its_records_back():
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 4)))
    acquire(sp, "m2", batches((5, 9)))
    released = sp.release_member("m1", LIMIT)
    assert released.available == 5 and sp.held_by("m2") == 5
    assert acquire(sp, "m3", batches((0, 4))).ranges == [(0, 4, 2)]


def test_in_flight_cap_stops_new_records_until_some_complete():
    sp = SharePartition(0)
    assert acquire(sp, "m1", batches((0, 9), (10, 19)), cap=10).count == 10
    assert not sp.can_acquire(10)
    assert acquire(sp, "m2", batches((10, 19)), cap=10).count == 0
    ack(sp, "m1", (0, 4, [A.ACCEPT]))
    assert sp.can_acquire(10)
    assert acquire(sp, "m2", batches((10, 19)), cap=10).ranges == [(10, 19, 1)]


def test_control_and_aborted_batches_are_never_handed_out():
    sp = SharePartition(0)
    got = acquire(sp, "m1", [LogBatch(0, 2), LogBatch(3, 3, BatchKind.CONTROL), LogBatch(4, 6, BatchKind.ABORTED),
                             LogBatch(7, 7, BatchKind.CONTROL), LogBatch(8, 9)])
    assert got.ranges == [(0, 2, 1), (8, 9, 1)] and got.archived == 5
    ack(sp, "m1", (0, 2, [A.ACCEPT]))
    assert sp.start_offset == 8


def test_compacted_gaps_in_the_log_are_skipped():
    sp = SharePartition(0)
    got = acquire(sp, "m1", batches((5, 9), (20, 24)))
    assert got.ranges == [(5, 9, 1), (20, 24, 1)]
    ack(sp, "m1", (5, 9, [A.ACCEPT]), (20, 24, [A.ACCEPT]))
    assert sp.start_offset == 25


def test_restore_brings_back_acquired_records_available_with_their_count():
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 9)))
    ack(sp, "m1", (2, 3, [A.ACCEPT]))
    sp.expire(LOCK, LIMIT)
    acquire(sp, "m2", batches((0, 9)))
    ack(sp, "m2", (0, 0, [A.REJECT]))
    restored = SharePartition.restore(sp.start_offset, sp.state_batches(), LIMIT)
    assert restored.start_offset == 1 and restored.next_offset == 10
    assert [(r.first, r.last, r.state, r.delivery_count) for r in restored.runs] == [
        (1, 1, RecordState.AVAILABLE, 2),
        (2, 3, RecordState.ACKNOWLEDGED, 1),
        (4, 9, RecordState.AVAILABLE, 2),
    ]
    # At the limit, a record held at the crash has had its last attempt.
    assert SharePartition.restore(1, sp.state_batches(), 2).count(RecordState.AVAILABLE) == 0


def test_move_start_and_reset():
    sp = SharePartition(0)
    acquire(sp, "m1", batches((0, 9)))
    sp.move_start(4)
    assert sp.start_offset == 4 and sp.held_by("m1") == 6
    sp.reset(100)
    assert sp.start_offset == sp.next_offset == 100 and sp.state_epoch == 1 and not sp.runs
    assert sp.lag(150) == 50


class SharePartitionModel(RuleBasedStateMachine):
    """Random acquisitions, acknowledgements, expiries and departures over a log of 60 records in batches of
    1-4, checked after every step against a plain per-offset model."""

    def __init__(self) -> None:
        super().__init__()
        self.sp = SharePartition(0)
        self.log = [LogBatch(first, min(first + 3, 59)) for first in range(0, 60, 4)]
        self.now = 0
        self.done: set[int] = set()  # offsets acknowledged or archived: never handed out again
        self.deliveries: dict[int, int] = {}

    @rule(member=st.sampled_from(["a", "b", "c"]), max_records=st.integers(1, 12),
          mode=st.sampled_from(list(AcquireMode)))
    def acquire(self, member: str, max_records: int, mode: AcquireMode) -> None:
        start = self.sp.next_fetch_offset()
        log = [b for b in self.log if b.last >= start]
        got = self.sp.acquire(member, log, Ask(max_records, self.now + LOCK, 16, LIMIT, mode))
        if mode is AcquireMode.RECORD_LIMIT:
            assert got.count <= max_records
        for first, last, count in got.ranges:
            for offset in range(first, last + 1):
                assert offset not in self.done
                self.deliveries[offset] = self.deliveries.get(offset, 0) + 1
                assert self.deliveries[offset] == count <= LIMIT

    @rule(member=st.sampled_from(["a", "b", "c"]), kind=st.sampled_from([A.ACCEPT, A.RELEASE, A.REJECT]),
          data=st.data())
    def acknowledge(self, member: str, kind: AcknowledgeType, data: st.DataObject) -> None:
        held = [r for r in self.sp.runs if r.state is RecordState.ACQUIRED and r.member_id == member]
        if not held:
            return
        run = data.draw(st.sampled_from(held))
        first = data.draw(st.integers(run.first, run.last))
        last = data.draw(st.integers(first, run.last))
        result = self.sp.acknowledge(member, [(first, last, [kind])], delivery_limit=LIMIT,
                                     lock_deadline_ms=self.now + LOCK, renew_allowed=False)
        assert result.error is ErrorCode.NONE
        for offset in range(first, last + 1):
            if kind is not A.RELEASE or self.deliveries[offset] >= LIMIT:
                self.done.add(offset)

    @rule(member=st.sampled_from(["a", "b", "c"]))
    def someone_else_acknowledges(self, member: str) -> None:
        others = [r for r in self.sp.runs if r.state is RecordState.ACQUIRED and r.member_id != member]
        if others:
            result = self.sp.acknowledge(member, [(others[0].first, others[0].first, [A.ACCEPT])],
                                         delivery_limit=LIMIT, lock_deadline_ms=0, renew_allowed=False)
            assert result.error is ErrorCode.INVALID_RECORD_STATE

    @rule(ms=st.integers(1, 40_000))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self.sp.expire(self.now, LIMIT)
        self._archived_at_limit()

    @rule(member=st.sampled_from(["a", "b", "c"]))
    def member_leaves(self, member: str) -> None:
        self.sp.release_member(member, LIMIT)
        self._archived_at_limit()

    @precondition(lambda self: True)
    @rule()
    def restart(self) -> None:
        self.sp = SharePartition.restore(self.sp.start_offset, self.sp.state_batches(), LIMIT)
        self._archived_at_limit()

    def _archived_at_limit(self) -> None:
        for offset, count in self.deliveries.items():
            if count >= LIMIT and offset >= self.sp.start_offset:
                run = self.sp.runs[self.sp._runs_from(offset)]
                if run.state is not RecordState.ACQUIRED:
                    self.done.add(offset)

    @invariant()
    def runs_tile_the_window(self) -> None:
        cursor = self.sp.start_offset
        for run in self.sp.runs:
            assert run.first == cursor and run.last >= run.first
            cursor = run.last + 1
        assert cursor == self.sp.next_offset
        if self.sp.runs:
            assert self.sp.runs[0].state not in TERMINAL

    @invariant()
    def completed_records_stay_completed(self) -> None:
        for offset in self.done:
            if offset >= self.sp.start_offset:
                run = self.sp.runs[self.sp._runs_from(offset)]
                assert run.state in TERMINAL, (offset, run)


TestSharePartitionModel = SharePartitionModel.TestCase
TestSharePartitionModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                            derandomize=True)


def test_share_state_records_replay_kafkas_snapshots_updates_and_tombstones():
    import uuid

    from sluice.coordinator.share.partition import StateBatch
    from sluice.coordinator.share.records import (
        _UPDATE_VALUE,
        _VERSION,
        UPDATE_TYPE,
        SharePartitionKey,
        ShareState,
        encode_key,
        encode_snapshot,
    )
    from sluice.coordinator.share.states import ShareStates

    key = SharePartitionKey("g", uuid.UUID(int=3), 0)
    snapshot = ShareState(4, 1, 10, (StateBatch(10, 19, RecordState.AVAILABLE, 1),))
    cls = _UPDATE_VALUE.cls
    # Kafka's update of the same snapshot epoch: 12-13 acknowledged, the start offset unchanged (-1).
    update = _VERSION.pack(0) + _UPDATE_VALUE[0].encode(cls(snapshot_epoch=4, leader_epoch=0, start_offset=-1,
        state_batches=[cls.StateBatch(first_offset=12, last_offset=13, delivery_state=2, delivery_count=1)]))
    states = ShareStates(lambda group: LIMIT)
    states.apply(encode_key(key), encode_snapshot(snapshot))
    states.apply(encode_key(key, UPDATE_TYPE), update)
    states.loaded(0)
    restored = states.get(key)
    assert (restored.start_offset, restored.next_offset) == (10, 20)
    assert restored.count(RecordState.ACKNOWLEDGED) == 2 and restored.count(RecordState.AVAILABLE) == 8
    record_key, value = states.record(key)
    again = ShareStates(lambda group: LIMIT)
    again.apply(record_key, value)
    assert again.get(key).count(RecordState.ACKNOWLEDGED) == 2
    again.apply(encode_key(key), None)  # a tombstone forgets it
    assert again.get(key) is None
