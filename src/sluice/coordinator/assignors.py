"""The server-side assignors of KIP-848 consumer groups (Kafka's `uniform` and `range`): members and
topics in, each member's target partitions out. Pure functions; the group state machine is
sluice.coordinator.consumer_group."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from sluice.coordinator.messages import TopicIdPartition, TopicInfo

UNIFORM_ASSIGNOR = "uniform"
RANGE_ASSIGNOR = "range"
# Kafka's group.consumer.assignors default order: the first is used unless members ask otherwise.
ASSIGNORS = (UNIFORM_ASSIGNOR, RANGE_ASSIGNOR)

TP = TopicIdPartition


class Subscriber(Protocol):
    """A member as an assignor sees it (sluice.coordinator.consumer_group.ConsumerMember)."""

    def subscribes_to(self, topic: str) -> bool: ...


def _eligible(members: Mapping[str, Subscriber], topic: str) -> list[str]:
    return sorted(mid for mid, m in members.items() if m.subscribes_to(topic))


def assign_range(
    members: Mapping[str, Subscriber], topics: Mapping[str, TopicInfo], previous: Mapping[str, frozenset[TP]]
) -> dict[str, frozenset[TP]]:
    """Per topic, contiguous ranges of partitions to the subscribed members in member-id order."""
    del previous  # range is deterministic from the membership alone
    result: dict[str, set[TP]] = {mid: set() for mid in members}
    for name, info in sorted(topics.items()):
        eligible = _eligible(members, name)
        if not eligible:
            continue
        share, extra = divmod(info.partitions, len(eligible))
        start = 0
        for index, mid in enumerate(eligible):
            count = share + (1 if index < extra else 0)
            result[mid] |= {(info.topic_id, p) for p in range(start, start + count)}
            start += count
    return {mid: frozenset(tps) for mid, tps in result.items()}


def assign_uniform(
    members: Mapping[str, Subscriber], topics: Mapping[str, TopicInfo], previous: Mapping[str, frozenset[TP]]
) -> dict[str, frozenset[TP]]:
    """Balanced and sticky: partitions stay with their previous target owner while counts stay even.

    Kafka's uniform assignor has the same two goals; this is a simpler greedy version of it. With
    identical subscriptions counts differ by at most one; with different ones it balances as far as
    the subscriptions allow.
    """
    by_id = {info.topic_id: name for name, info in topics.items()}
    eligible_for = {name: set(_eligible(members, name)) for name in topics}
    result: dict[str, set[TP]] = {mid: set() for mid in members}
    unassigned = [(info.topic_id, p) for _, info in sorted(topics.items()) for p in range(info.partitions)]
    owner_before = {tp: mid for mid, tps in previous.items() if mid in members for tp in tps}
    free: list[TP] = []
    for tp in unassigned:
        mid = owner_before.get(tp)
        if mid is not None and mid in eligible_for[by_id[tp[0]]]:
            result[mid].add(tp)
        elif eligible_for[by_id[tp[0]]]:
            free.append(tp)
    for tp in free:
        candidates = eligible_for[by_id[tp[0]]]
        target = min(candidates, key=lambda m: (len(result[m]), m))
        result[target].add(tp)
    # Move partitions from the fullest member to the emptiest one that can take them, while it helps.
    for _ in range(sum(info.partitions for info in topics.values()) + 1):
        moved = False
        for giver in sorted(result, key=lambda m: (-len(result[m]), m)):
            for tp in sorted(result[giver], key=lambda t: (str(t[0]), -t[1])):
                takers = [m for m in eligible_for[by_id[tp[0]]] if len(result[m]) + 1 < len(result[giver])]
                if takers:
                    taker = min(takers, key=lambda m: (len(result[m]), m))
                    result[giver].discard(tp)
                    result[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return {mid: frozenset(tps) for mid, tps in result.items()}


AssignorFn = Callable[
    [Mapping[str, Subscriber], Mapping[str, TopicInfo], Mapping[str, frozenset[TP]]], dict[str, frozenset[TP]]
]
ASSIGNOR_FUNCTIONS: dict[str, AssignorFn] = {UNIFORM_ASSIGNOR: assign_uniform, RANGE_ASSIGNOR: assign_range}
