"""The partition tracker against a model that keeps one record per offset.

The tracker keeps handed-out messages as whole batches and acknowledges ranges without visiting each
offset; the model below is the plain per-offset bookkeeping it must agree with, whatever the order of
fetches (with gaps), takes, single acks, range acks and passing time.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sluice.gateway.batches import Batch, reply_bytes
from sluice.gateway.tracker import AckOutcome, PartitionTracker

ACK_TIMEOUT = 10.0
MAX_PENDING = 12


def batch_of(offsets: list[int]) -> Batch:
    return Batch(
        0,
        offsets,
        [None if o % 3 == 0 else b"k%d" % o for o in offsets],
        [b"v%d" % o for o in offsets],
        [(("h", b"%d" % o),) if o % 5 == 0 else () for o in offsets],
        [1000 + o for o in offsets],
    )


class TrackerAgainstModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tracker = PartitionTracker(0, 0, ack_timeout=ACK_TIMEOUT, max_pending=MAX_PENDING)
        self.now = 0.0
        self.next_offset = 0
        self.buffer: list[int] = []  # fetched, not handed out, in order
        self.handed: dict[int, tuple[int, float]] = {}  # un-acked offset -> (attempt, deadline)
        self.acked: set[int] = set()

    def committed(self) -> int:
        offset = 0
        while offset in self.acked:
            offset += 1
        return offset

    @rule(
        count=st.integers(1, 8), skip_before=st.integers(0, 2), holes=st.lists(st.integers(1, 7), max_size=2)
    )
    def fetch(self, count: int, skip_before: int, holes: list[int]) -> None:
        # Skipped offsets (compaction, transaction markers) never reach anyone and count as acknowledged.
        first = self.next_offset + skip_before
        offsets = [o for o in range(first, first + count) if o - first not in holes or o == first]
        self.acked.update(o for o in range(self.next_offset, offsets[-1] + 1) if o not in offsets)
        self.next_offset = offsets[-1] + 1
        self.tracker.add_batch(batch_of(offsets))
        self.buffer.extend(offsets)

    @rule(limit=st.integers(1, 10), max_bytes=st.one_of(st.none(), st.integers(1, 200)))
    def take(self, limit: int, max_bytes: int | None) -> None:
        due = {o for o, (_, deadline) in self.handed.items() if deadline <= self.now}
        batches = self.tracker.take_batches(self.now, limit, max_bytes=max_bytes)
        handed_out = [(batch, o) for batch in batches for o in batch.offsets]
        assert len(handed_out) <= limit
        if max_bytes is not None:
            # Within the bytes, except that a lone first message goes whatever its size.
            assert sum(map(reply_bytes, batches)) <= max_bytes or len(handed_out) == 1
        fresh = 0
        for batch, offset in handed_out:
            index = batch.offsets.index(offset)
            assert batch.values[index] == b"v%d" % offset and batch.timestamps[index] == 1000 + offset
            if offset in due:
                assert batch.attempt == self.handed[offset][0] + 1
                due.discard(offset)
            else:
                assert batch.attempt == 0 and offset == self.buffer[0], (offset, self.buffer[:3])
                self.buffer.pop(0)
                fresh += 1
            self.handed[offset] = (batch.attempt, self.now + ACK_TIMEOUT)
        if fresh:
            assert len(self.handed) <= MAX_PENDING
        # Nothing is held back that could have gone out (at least one message, when bytes are short).
        if len(handed_out) < limit and (max_bytes is None or not handed_out):
            assert not due
            assert not self.buffer or len(self.handed) >= MAX_PENDING

    def _pick(self, data: st.DataObject) -> int:
        candidates = sorted(self.handed) or [0]
        return data.draw(st.one_of(st.sampled_from(candidates), st.integers(0, self.next_offset + 3)))

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        offset = self._pick(data)
        outcome = self.tracker.ack(offset)
        if offset in self.acked:
            assert outcome is AckOutcome.DUPLICATE
        elif offset in self.handed:
            assert outcome is AckOutcome.ACKED
            del self.handed[offset]
            self.acked.add(offset)
        else:
            assert outcome is AckOutcome.NOT_HANDED_OUT

    @rule(data=st.data(), length=st.integers(1, 12))
    def ack_range(self, data: st.DataObject, length: int) -> None:
        begin = self._pick(data)
        end = begin + length
        lowest = max(begin, self.committed())
        newly = [o for o in range(lowest, end) if o in self.handed]
        missing = [o for o in range(lowest, end) if o not in self.handed and o not in self.acked]
        assert self.tracker.ack_range(begin, end) == (len(newly), len(missing))
        for offset in newly:
            del self.handed[offset]
            self.acked.add(offset)

    @rule(seconds=st.sampled_from([1.0, 6.0, 11.0]))
    def wait(self, seconds: float) -> None:
        self.now += seconds

    @invariant()
    def agrees(self) -> None:
        committed = self.committed()
        assert self.tracker.committed_offset == committed
        assert self.tracker.pending_count == len(self.handed)
        assert self.tracker.buffered_count == len(self.buffer)
        above = sorted(o for o in self.acked if o > committed)
        ranged = [o for begin, end in self.tracker.acked_ranges for o in range(begin, end)]
        assert ranged == above


TestTrackerAgainstModel = TrackerAgainstModel.TestCase
TestTrackerAgainstModel.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
