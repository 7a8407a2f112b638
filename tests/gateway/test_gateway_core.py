"""Pure consume/ack semantics: no Kafka, no clock."""

from __future__ import annotations

from collections import Counter

import pytest

from sluice.gateway.batches import MESSAGE_OVERHEAD_BYTES, Batch, Message, reply_bytes
from sluice.gateway.core import GroupTopicCore
from sluice.gateway.sparse_acks import (
    SparseAcksError,
    decode_sparse_acks,
    encode_sparse_acks,
    sparse_acks_to_str,
)
from sluice.gateway.tracker import AckOutcome, CommitPoint, PartitionTracker, TrackerSettings


def message(offset: int, partition: int = 0) -> Message:
    return Message(partition=partition, offset=offset, key=None, value=b"v%d" % offset)


def tracker(committed: int = 0, metadata: str = "", **settings: float) -> PartitionTracker:
    options = {"ack_timeout": 10.0, "max_pending": 100, "max_retries": -1, **settings}
    return PartitionTracker(0, committed, metadata, **options)  # type: ignore[arg-type]


def fill(t: PartitionTracker, offsets: range) -> None:
    for offset in offsets:
        t.add_fetched(message(offset))


def hand_out(t: PartitionTracker, count: int, now: float = 0.0) -> list[int]:
    offsets = []
    for _ in range(count):
        delivery = t.next_delivery(now)
        assert delivery is not None
        offsets.append(delivery.message.offset)
    return offsets


class TestSparseAcksEncoding:
    def test_known_values_match_kafka_pixy_alphabet(self) -> None:
        # One range starting right above the base, one long: "B" = 1, "C" = 2.
        assert encode_sparse_acks(10, [(11, 13)]) == "BC"
        # 32 needs two 5-bit groups: low group 0 with continuation ("g"), then 1 ("B").
        assert encode_sparse_acks(0, [(32, 33)]) == "gBB"

    @pytest.mark.parametrize(
        "base,ranges",
        [
            (0, []),
            (5, [(7, 9)]),
            (100, [(101, 102), (104, 200), (1000, 70000)]),
            (2**40, [(2**40 + 3, 2**41)]),
        ],
    )
    def test_round_trip(self, base: int, ranges: list[tuple[int, int]]) -> None:
        assert decode_sparse_acks(base, encode_sparse_acks(base, ranges)) == ranges

    @pytest.mark.parametrize("garbage", ["!", "B", "g", "BA", "gggggggggggggggg"])
    def test_garbage_is_rejected(self, garbage: str) -> None:
        with pytest.raises(SparseAcksError):
            decode_sparse_acks(10, garbage)

    def test_metadata_longer_than_the_broker_allows_drops_the_highest_ranges(self) -> None:
        ranges = [(10 + 2 * i, 11 + 2 * i) for i in range(100)]
        encoded = encode_sparse_acks(9, ranges, max_length=50)
        assert len(encoded) <= 50
        kept = decode_sparse_acks(9, encoded)
        assert kept == ranges[: len(kept)] and 0 < len(kept) < 100

    def test_human_readable_form_is_relative_to_the_offset(self) -> None:
        assert sparse_acks_to_str(10, encode_sparse_acks(10, [(11, 13), (20, 21)])) == "1-3,10-11"
        assert sparse_acks_to_str(10, "!!") == ""


class TestPartitionTracker:
    def test_committed_offset_is_lowest_unacked_and_sparse_acks_go_to_metadata(self) -> None:
        t = tracker()
        fill(t, range(5))
        assert hand_out(t, 5) == [0, 1, 2, 3, 4]
        assert t.ack(1) is AckOutcome.ACKED
        assert t.ack(3) is AckOutcome.ACKED
        point = t.commit_point()
        assert point.offset == 0
        assert decode_sparse_acks(0, point.metadata) == [(1, 2), (3, 4)]
        t.ack(0)
        assert t.commit_point().offset == 2
        t.ack(2)
        assert t.commit_point() == t.commit_point().__class__(4, "")

    def test_acks_merge_adjacent_ranges(self) -> None:
        t = tracker()
        fill(t, range(10))
        hand_out(t, 10)
        for offset in (5, 3, 4, 8, 7):
            t.ack(offset)
        assert t.acked_ranges == [(3, 6), (7, 9)]
        t.ack(6)
        assert t.acked_ranges == [(3, 9)]

    def test_restart_from_commit_redelivers_only_unacked(self) -> None:
        t = tracker()
        fill(t, range(6))
        hand_out(t, 6)
        for offset in (1, 2, 4):
            t.ack(offset)
        point = t.commit_point()
        restarted = tracker(point.offset, point.metadata)
        fill(restarted, range(point.offset, 6))
        assert hand_out(restarted, 3) == [0, 3, 5]
        assert restarted.next_delivery(0.0) is None

    def test_unacked_message_is_redelivered_after_ack_timeout(self) -> None:
        t = tracker(ack_timeout=5.0)
        fill(t, range(2))
        assert hand_out(t, 1, now=0.0) == [0]
        assert t.next_delivery(4.9) is not None  # offset 1, fresh
        redelivery = t.next_delivery(5.0)
        assert redelivery is not None and redelivery.message.offset == 0 and redelivery.attempt == 1
        assert t.next_delivery(5.1) is None
        assert t.next_deadline() == pytest.approx(9.9)

    def test_max_pending_stops_new_hand_outs_until_acked(self) -> None:
        t = tracker(max_pending=2)
        fill(t, range(5))
        assert hand_out(t, 2) == [0, 1]
        assert t.next_delivery(0.0) is None
        assert not t.has_ready(0.0)
        t.ack(0)
        assert hand_out(t, 1) == [2]

    def test_ack_of_message_never_handed_out_moves_nothing(self) -> None:
        t = tracker(committed=3)
        fill(t, range(3, 6))
        assert t.ack(4) is AckOutcome.NOT_HANDED_OUT
        assert t.ack(100) is AckOutcome.NOT_HANDED_OUT
        assert t.commit_point().offset == 3 and t.acked_ranges == []

    def test_duplicate_ack_is_harmless(self) -> None:
        t = tracker()
        fill(t, range(2))
        hand_out(t, 2)
        assert t.ack(0) is AckOutcome.ACKED
        assert t.ack(0) is AckOutcome.DUPLICATE
        assert t.commit_point().offset == 1

    def test_dead_letter_after_max_retries(self) -> None:
        t = tracker(ack_timeout=1.0, max_retries=1)
        fill(t, range(2))
        assert hand_out(t, 1, now=0.0) == [0]
        again = t.next_delivery(1.0)
        assert again is not None and again.message.offset == 0 and again.attempt == 1
        # Second expiry exceeds max_retries: parked, acked, and the next message flows.
        following = t.next_delivery(2.0)
        assert following is not None and following.message.offset == 1
        assert [m.offset for m in t.take_dead_letters()] == [0]
        assert t.commit_point().offset == 1

    def test_dead_letters_are_collected_without_a_caller(self) -> None:
        core = GroupTopicCore(TrackerSettings(ack_timeout=1.0, max_pending=10, max_retries=0))
        core.assign(0, 0)
        core.add_fetched([message(0)])
        core.next_delivery(0.0)
        assert core.take_dead_letters(0.5) == []
        assert [m.offset for m in core.take_dead_letters(1.0)] == [0]
        assert core.trackers[0].commit_point().offset == 1

    def test_zero_retries_means_offered_once(self) -> None:
        t = tracker(ack_timeout=1.0, max_retries=0)
        fill(t, range(1))
        hand_out(t, 1)
        assert t.next_delivery(1.0) is None
        assert [m.offset for m in t.take_dead_letters()] == [0]

    def test_fetched_messages_already_acked_are_skipped(self) -> None:
        t = tracker(committed=5, metadata=encode_sparse_acks(5, [(6, 8)]))
        fill(t, range(3, 10))
        assert hand_out(t, 3) == [5, 8, 9]

    def test_offsets_skipped_by_the_fetch_do_not_block_the_commit(self) -> None:
        t = tracker(committed=10)
        for offset in (10, 13, 14):  # 11-12: e.g. transaction markers
            t.add_fetched(message(offset))
        assert hand_out(t, 3) == [10, 13, 14]
        t.ack(10)
        assert t.commit_point().offset == 13
        t.ack(14)
        t.ack(13)
        assert t.commit_point().offset == 15 and t.acked_ranges == []

    def test_garbage_metadata_falls_back_to_plain_offset(self) -> None:
        t = tracker(committed=2, metadata="not sparse acks!")
        assert t.commit_point().offset == 2 and t.acked_ranges == []

    def test_commit_only_when_changed(self) -> None:
        t = tracker()
        fill(t, range(2))
        assert t.take_commit_if_changed() is not None
        assert t.take_commit_if_changed() is None
        hand_out(t, 1)
        t.ack(0)
        point = t.take_commit_if_changed()
        assert point is not None and point.offset == 1


class TestHeldDeadLetters:
    """With a dead-letter topic, a given-up message stays un-acked until its produce is confirmed."""

    @staticmethod
    def given_up(count: int = 3) -> PartitionTracker:
        """Offset 0 given up (no retries allowed), 1 acked, 2 handed out in its place."""
        t = tracker(ack_timeout=1.0, max_retries=0, hold_dead_letters=True)
        fill(t, range(count))
        assert hand_out(t, 2, now=0.0) == [0, 1]
        assert t.ack(1) is AckOutcome.ACKED
        following = t.next_delivery(1.0)
        assert following is not None and following.message.offset == 2
        assert [m.offset for m in t.take_dead_letters()] == [0]
        return t

    def test_commit_point_stays_below_the_dead_letter_until_confirmed(self) -> None:
        t = self.given_up()
        assert t.is_parked(0) and not t.is_acked(0)
        assert t.commit_point().offset == 0
        assert t.take_commit_if_changed() == CommitPoint(0, encode_sparse_acks(0, [(1, 2)]))
        assert t.dead_letter_confirmed(0)
        assert t.commit_point().offset == 2 and t.parked_count == 0
        assert not t.dead_letter_confirmed(0)  # a second confirmation changes nothing

    def test_failed_dead_letter_stays_unacked_and_is_not_handed_out_again(self) -> None:
        t = self.given_up()
        assert t.dead_letter_failed(0, now=1.0)
        assert t.commit_point().offset == 0
        fill(t, range(3, 6))
        handed_out = [d.message.offset for d in t.take(1.5, 10)]
        assert handed_out == [3, 4, 5]
        assert t.ack(2) is AckOutcome.ACKED and t.ack_range(3, 6) == (3, 0)
        assert t.commit_point().offset == 0 and t.acked_ranges == [(1, 6)]
        assert t.take(100.0, 10) == [] and t.take_dead_letters() == []

    def test_failed_dead_letter_is_retried_with_a_bounded_growing_backoff(self) -> None:
        t = self.given_up()
        now, delays = 1.0, []
        for _ in range(7):
            assert t.dead_letter_failed(0, now)
            retry_at = now
            while not t.take_dead_letter_retries(retry_at):
                retry_at += 0.5
            delays.append(retry_at - now)
            # Under way again: not offered a second time until it fails or is confirmed.
            assert t.take_dead_letter_retries(retry_at + 1000.0) == []
            now = retry_at
        assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
        assert t.commit_point().offset == 0
        assert t.dead_letter_confirmed(0) and t.commit_point().offset == 2

    def test_late_acks_of_a_held_dead_letter_do_not_ack_it(self) -> None:
        t = self.given_up(4)
        assert t.ack(0) is AckOutcome.DUPLICATE
        assert t.next_delivery(1.0) is not None  # offset 3
        assert t.ack_range(0, 4) == (2, 0)
        assert t.commit_point().offset == 0 and t.acked_ranges == [(1, 4)]
        assert t.dead_letter_confirmed(0) and t.commit_point().offset == 4

    def test_fetching_a_held_dead_letter_again_does_not_hand_it_out(self) -> None:
        t = self.given_up()
        t.add_fetched(message(0))
        assert t.buffered_count == 0 and t.take(1.5, 10) == []

    def test_expired_dead_letters_are_held_and_a_revoked_partition_ignores_the_outcome(self) -> None:
        settings = TrackerSettings(ack_timeout=1.0, max_pending=10, max_retries=0, hold_dead_letters=True)
        core = GroupTopicCore(settings)
        core.assign(0, 0)
        core.add_fetched([message(0)])
        core.next_delivery(0.0)
        assert [m.offset for m in core.take_dead_letters(1.0)] == [0]
        assert core.parked_count() == 1 and core.trackers[0].commit_point().offset == 0
        assert core.dead_letter_failed(0, 0, now=1.0)
        assert [m.offset for m in core.take_dead_letter_retries(2.0)] == [0]
        assert core.revoke(0) == CommitPoint(0, "")
        assert not core.dead_letter_confirmed(0, 0)
        assert not core.dead_letter_failed(0, 0, now=3.0)


def fetched(partition: int, offsets: range) -> Batch:
    return Batch.of([message(offset, partition) for offset in offsets])


class TestGroupTopicCore:
    def test_round_robin_across_partitions(self) -> None:
        core = GroupTopicCore(TrackerSettings(ack_timeout=10, max_pending=10))
        core.assign(0, 0)
        core.assign(1, 0)
        core.add_fetched([message(o, 0) for o in range(3)] + [message(o, 1) for o in range(3)])
        handed = [core.next_delivery(0.0) for _ in range(4)]
        assert [d.message.partition for d in handed if d] == [0, 1, 0, 1]

    def test_a_large_take_shares_evenly_then_fills_from_whole_runs(self) -> None:
        core = GroupTopicCore(TrackerSettings(ack_timeout=10, max_pending=10_000))
        for partition in range(4):
            core.assign(partition, 0)
        # Two of four partitions hold messages: an even share (250) from each, then the rest of the room
        # from what they still hold -- one more run each, not ever smaller pieces of them.
        core.add_batches([fetched(0, range(500)), fetched(1, range(500))])
        batches = core.take_batches(0.0, 1000)
        assert [(b.partition, b.offsets[0], len(b.offsets)) for b in batches] == [
            (0, 0, 250),
            (1, 0, 250),
            (0, 250, 250),
            (1, 250, 250),
        ]
        core.add_batches([fetched(2, range(10)), fetched(3, range(10)), fetched(0, range(500, 600))])
        taken = core.take_batches(0.0, 40)
        # Every partition with messages gets its turn before any gets a second one.
        assert sorted({b.partition for b in taken}) == [0, 2, 3] and sum(len(b.offsets) for b in taken) == 40

    def test_ack_for_unassigned_partition(self) -> None:
        core = GroupTopicCore()
        assert core.ack(7, 0) is AckOutcome.NOT_HANDED_OUT

    def test_late_ack_after_revoke_is_accepted_but_moves_nothing(self) -> None:
        core = GroupTopicCore()
        core.assign(0, 0)
        core.add_fetched([message(0), message(1)])
        core.next_delivery(0.0)
        core.revoke(0)
        assert core.ack(0, 0) is AckOutcome.DUPLICATE
        assert core.ack(0, 1) is AckOutcome.NOT_HANDED_OUT
        assert core.take_commits() == {}

    def test_revoke_returns_final_commit(self) -> None:
        core = GroupTopicCore()
        core.assign(0, 4)
        core.add_fetched([message(4), message(5)])
        core.next_delivery(0.0)
        core.ack(0, 4)
        point = core.revoke(0)
        assert point is not None and point.offset == 5
        assert core.next_delivery(0.0) is None


class TestBatchesAndRanges:
    def test_take_hands_out_in_offset_order_up_to_the_given_pending_limit(self) -> None:
        t = tracker(max_pending=2)
        fill(t, range(10))
        assert [d.message.offset for d in t.take(0.0, 5)] == [0, 1]
        assert [d.message.offset for d in t.take(0.0, 5, max_pending=6)] == [2, 3, 4, 5]
        assert t.take(0.0, 5, max_pending=6) == []

    def test_take_redelivers_expired_offers_first(self) -> None:
        t = tracker(ack_timeout=5.0)
        fill(t, range(6))
        assert [d.message.offset for d in t.take(0.0, 3)] == [0, 1, 2]
        t.ack(1)
        taken = t.take(5.0, 3)
        assert [(d.message.offset, d.attempt) for d in taken] == [(0, 1), (2, 1), (3, 0)]
        assert t.next_deadline() == pytest.approx(10.0)

    def test_ack_range_acks_what_was_handed_out_and_counts_the_rest(self) -> None:
        t = tracker()
        fill(t, range(10))
        t.take(0.0, 6)
        t.ack(2)
        assert t.ack_range(0, 6) == (5, 0)
        assert t.commit_point().offset == 6
        assert t.ack_range(0, 6) == (0, 0)  # duplicates are harmless
        # 6..9 were never handed out: refused, and the commit point stays put.
        assert t.ack_range(6, 8) == (0, 2)
        assert t.commit_point().offset == 6
        assert [d.message.offset for d in t.take(0.0, 10)] == [6, 7, 8, 9]

    def test_ack_range_with_holes_acks_only_the_offsets_handed_out(self) -> None:
        t = tracker()
        fill(t, range(10))
        t.take(0.0, 3)  # 0, 1, 2 handed out; 3.. still buffered
        assert t.ack_range(1, 5) == (2, 2)
        assert t.commit_point().offset == 0 and t.acked_ranges == [(1, 3)]
        assert [d.message.offset for d in t.take(0.0, 2)] == [3, 4]

    def test_core_take_shares_a_batch_between_partitions_in_runs(self) -> None:
        core = GroupTopicCore(TrackerSettings(ack_timeout=10, max_pending=100))
        core.assign(0, 0)
        core.assign(1, 0)
        core.add_fetched([message(o, 0) for o in range(10)] + [message(o, 1) for o in range(10)])
        taken = [(d.message.partition, d.message.offset) for d in core.take(0.0, 8)]
        assert taken == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
        # A partition with nothing left does not stop the others filling the batch.
        rest = [(d.message.partition, d.message.offset) for d in core.take(0.0, 20)]
        assert sorted(rest) == [(p, o) for p in (0, 1) for o in range(4, 10)]
        assert core.ack_range(0, 0, 10) == (10, 0)
        assert core.ack_range(5, 0, 3) == (0, 3)  # not ours


def sized(partition: int, offsets: range, value_bytes: int) -> Batch:
    return Batch.of(
        [Message(partition=partition, offset=o, key=None, value=b"x" * value_bytes) for o in offsets]
    )


def offsets_of(batches: list[Batch]) -> list[tuple[int, int]]:
    return [(b.partition, o) for b in batches for o in b.offsets]


class TestReplyBytes:
    # A 100 B value costs 132 reply bytes with the per-message overhead.
    COST = 100 + MESSAGE_OVERHEAD_BYTES

    def test_a_take_stops_before_the_message_that_would_pass_max_bytes(self) -> None:
        t = tracker()
        t.add_batch(sized(0, range(10), 100))
        first = t.take_batches(0.0, 10, max_bytes=3 * self.COST + self.COST // 2)
        assert offsets_of(first) == [(0, 0), (0, 1), (0, 2)]
        # The rest is still buffered, in order, for the next take.
        assert offsets_of(t.take_batches(0.0, 10, max_bytes=2 * self.COST)) == [(0, 3), (0, 4)]
        assert offsets_of(t.take_batches(0.0, 10)) == [(0, o) for o in range(5, 10)]

    def test_the_first_message_goes_even_when_larger_than_max_bytes(self) -> None:
        t = tracker()
        t.add_batch(sized(0, range(3), 5000))
        assert offsets_of(t.take_batches(0.0, 10, max_bytes=1000)) == [(0, 0)]
        assert offsets_of(t.take_batches(0.0, 10, max_bytes=1000)) == [(0, 1)]

    def test_the_partitions_of_one_take_share_its_bytes(self) -> None:
        core = GroupTopicCore(TrackerSettings(ack_timeout=10, max_pending=100))
        for partition in (0, 1):
            core.assign(partition, 0)
        core.add_batches([sized(0, range(10), 100), sized(1, range(10), 100)])
        taken = core.take_batches(0.0, 20, max_bytes=7 * self.COST)
        # An even share of the bytes first (3 each), then the rest of the room: 4 + 3, not 7 from one.
        per_partition = Counter(p for p, _ in offsets_of(taken))
        assert sorted(per_partition.values()) == [3, 4]
        # A take larger than the budget of its first message still gets that one message, not one a partition.
        core.add_batches([sized(0, range(10, 12), 5000), sized(1, range(10, 12), 5000)])
        core.take_batches(0.0, 20)
        core.add_batches([sized(0, range(12, 14), 5000), sized(1, range(12, 14), 5000)])
        assert len(offsets_of(core.take_batches(0.0, 20, max_bytes=1000))) == 1

    def test_redeliveries_keep_to_max_bytes_and_the_rest_stays_first_in_line(self) -> None:
        t = tracker(ack_timeout=5.0)
        t.add_batch(sized(0, range(6), 100))
        t.take_batches(0.0, 5)
        again = t.take_batches(5.0, 10, max_bytes=2 * self.COST)
        assert [(o, b.attempt) for b in again for o in b.offsets] == [(0, 1), (1, 1)]
        rest = t.take_batches(5.0, 4)
        assert [(o, b.attempt) for b in rest for o in b.offsets] == [(2, 1), (3, 1), (4, 1), (5, 0)]

    def test_headers_and_keys_count(self) -> None:
        batch = Batch.of(
            [Message(partition=0, offset=0, key=b"k" * 10, value=b"v" * 20, headers=(("h", b"x" * 30),))]
        )
        assert reply_bytes(batch) == 10 + 20 + 1 + 30 + MESSAGE_OVERHEAD_BYTES
