"""The share backend's pure core: what is handed out, what the members are told to acknowledge, and when."""

from __future__ import annotations

from sluice.gateway.batches import Batch
from sluice.gateway.share_core import (
    ACCEPT,
    REJECT,
    RELEASE,
    Settlement,
    ShareAck,
    ShareDeliveries,
    lock_margin,
)

LOCK = 10.0
MARGIN = lock_margin(LOCK)  # 1 s


def batch(partition: int, first: int, count: int, attempt: int = 0) -> Batch:
    offsets = list(range(first, first + count))
    values: list[bytes | None] = [f"{partition}/{o}".encode() for o in offsets]
    return Batch(partition, offsets, [None] * count, values, [()] * count, [0] * count, attempt)


def test_messages_go_out_in_fetched_order_and_acks_become_accepts_of_their_member() -> None:
    core = ShareDeliveries(LOCK)
    core.add_fetched(1, [batch(0, 0, 3), batch(1, 7, 2)], acquired_at=0.0)
    first = core.take(1.0, 4)
    assert [(b.partition, b.offsets) for b in first] == [(0, [0, 1, 2]), (1, [7])]
    assert core.open_count(1) == 5 and not core.waits_on_holders(1)
    assert core.ack(0, 1, 2.0) is ShareAck.ACKED
    assert core.ack(0, 1, 2.0) is ShareAck.DUPLICATE
    assert core.ack(1, 8, 2.0) is ShareAck.NOT_HANDED_OUT  # fetched, not handed out
    assert core.take_settlements() == {1: [Settlement(0, 1, ACCEPT)]}
    assert [b.offsets for b in core.take(2.0, 10)] == [[8]]
    assert core.waits_on_holders(1)  # nothing left to hand out, callers hold 4
    for partition, offset in ((0, 0), (0, 2), (1, 7), (1, 8)):
        core.ack(partition, offset, 3.0)
    assert core.open_count(1) == 0 and core.take_freed()


def test_the_ack_timeout_is_the_lock_less_a_margin_then_it_is_released_and_a_late_ack_changes_nothing() -> (
    None
):
    core = ShareDeliveries(LOCK)
    core.add_fetched(1, [batch(0, 0, 2)], acquired_at=100.0)
    core.take(100.5, 1)
    deadline = 100.0 + LOCK - MARGIN
    assert core.next_deadline() == deadline
    assert core.expire(deadline - 0.01) == 0
    assert core.expire(deadline) == 2  # the held one and the one nobody took
    assert core.take_settlements() == {1: [Settlement(0, 1, RELEASE), Settlement(0, 0, RELEASE)]}
    assert core.ack(0, 0, deadline + 1) is ShareAck.LATE
    assert core.take_settlements() == {} and core.take(deadline + 1, 10) == []
    assert core.open_count(1) == 0


def test_an_ack_at_its_deadline_is_late_not_sent() -> None:
    core = ShareDeliveries(LOCK)
    core.add_fetched(1, [batch(0, 0, 1)], acquired_at=0.0)
    core.take(0.0, 1)
    assert core.ack(0, 0, LOCK - MARGIN) is ShareAck.LATE
    assert core.take_settlements() == {1: [Settlement(0, 0, RELEASE)]}


def test_a_message_fetched_again_by_another_member_is_that_members_to_accept() -> None:
    core = ShareDeliveries(LOCK)
    core.add_fetched(1, [batch(0, 5, 1)], acquired_at=0.0)
    core.take(0.0, 1)
    core.expire(LOCK)  # released by member 1
    core.add_fetched(2, [batch(0, 5, 1, attempt=1)], acquired_at=LOCK + 0.1)
    [again] = core.take(LOCK + 0.2, 1)
    assert again.attempt == 1
    assert core.ack(0, 5, LOCK + 0.3) is ShareAck.ACKED
    assert core.take_settlements() == {1: [Settlement(0, 5, RELEASE)], 2: [Settlement(0, 5, ACCEPT)]}


def test_a_reply_is_cut_to_its_byte_budget_but_its_first_message_always_goes() -> None:
    core = ShareDeliveries(LOCK)
    core.add_fetched(1, [batch(0, 0, 5)], acquired_at=0.0)
    [one] = core.take(0.0, 10, max_bytes=1)
    assert one.offsets == [0]
    assert [b.offsets for b in core.take(0.0, 10)] == [[1, 2, 3, 4]]


def test_messages_delivered_more_than_max_retries_plus_one_times_are_dead_letters() -> None:
    core = ShareDeliveries(LOCK, max_retries=1)
    core.add_fetched(1, [batch(0, 0, 1, attempt=1), batch(0, 1, 2, attempt=2)], acquired_at=0.0)
    assert [b.offsets for b in core.take(0.0, 10)] == [[0]]  # its second delivery: one retry allowed
    letters = core.take_dead_letters()
    assert [(m.partition, m.offset) for m in letters] == [(0, 1), (0, 2)]
    assert core.dead_letter_confirmed(0, 1)
    assert core.take_settlements() == {1: [Settlement(0, 1, REJECT)]}
    # One the sink never confirmed goes back at its deadline, to be delivered (and parked) again.
    core.expire(LOCK)
    assert Settlement(0, 2, RELEASE) in core.take_settlements()[1]


def test_a_closed_member_leaves_nothing_behind() -> None:
    core = ShareDeliveries(LOCK)
    core.add_fetched(1, [batch(0, 0, 3)], acquired_at=0.0)
    core.take(0.0, 1)
    core.forget(1)
    assert core.take(0.0, 10) == [] and core.held_count() == 0 and core.open_count(1) == 0
    assert core.ack(0, 0, 1.0) is ShareAck.LATE  # the broker released it when the member left


def test_ranges_ack_what_was_handed_out_and_wide_ones_are_not_walked_offset_by_offset() -> None:
    core = ShareDeliveries(LOCK)
    core.add_fetched(1, [batch(0, 10, 5)], acquired_at=0.0)
    core.take(0.0, 3)  # 10, 11, 12
    assert core.ack_ranges([(0, 10, 12)], 1.0) == (2, 0, None)
    # 11 again, 12 now, 13 never handed out
    assert core.ack_ranges([(0, 11, 14), (0, 12, 13)], 1.0) == (1, 0, (0, 11))
    wide = [(0, 0, 2**62)] * 10_000  # looked up, at once
    assert core.ack_ranges(wide, 1.0) == (0, 0, (0, 0))
