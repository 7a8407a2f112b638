"""The state of one KIP-848 consumer group, as data: its members (epochs, subscriptions, what each owns and
is revoking), the group epoch, the assignment epoch and the target assignment, and its committed offsets. The
state machine that moves it, heartbeat by heartbeat, is sluice.coordinator.consumer_group."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from sluice.coordinator.assignors import UNIFORM_ASSIGNOR
from sluice.coordinator.messages import TopicIdPartition, TopicInfo
from sluice.coordinator.records import OffsetCommitValue

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
CONSUMER_GROUP_TYPE = "consumer"
# The member type ConsumerGroupDescribe v1 reports for members speaking the new protocol.
CONSUMER_MEMBER_TYPE = 1

TP = TopicIdPartition


class MemberState(Enum):
    STABLE = "stable"
    # Told to give up partitions; waits until its heartbeat no longer reports them.
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    # At the target epoch but some target partitions are still held by others.
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(slots=True, eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    # Partitions the member may use now, and those it was told to give up and still holds.
    assigned: frozenset[TP] = frozenset()
    revoking: frozenset[TP] = frozenset()
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None

    def owns(self) -> frozenset[TP]:
        return self.assigned | self.revoking

    def subscribes_to(self, topic: str) -> bool:
        if topic in self.subscribed_topic_names:
            return True
        return self.subscribed_topic_regex is not None and _regex_matches(self.subscribed_topic_regex, topic)


def _regex_matches(pattern: str, topic: str) -> bool:
    try:
        return re.fullmatch(pattern, topic) is not None
    except re.error:
        return False


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, frozenset[TP]] = field(default_factory=dict)
    # The subscribed topics as last seen: what the target assignment was computed from.
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    assignor: str = UNIFORM_ASSIGNOR
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)
    # Partitions a live rewind took from every member: out of the target until nobody owns them.
    withheld: frozenset[TP] = frozenset()

    # --- views ---------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        settled = all(
            m.state is MemberState.STABLE and m.member_epoch in (self.assignment_epoch, STATIC_LEAVE_EPOCH)
            for m in self.members.values()
        )
        return "Stable" if settled else "Reconciling"

    def is_empty(self) -> bool:
        return not self.members

    def topic_names(self) -> dict[uuid.UUID, str]:
        return {info.topic_id: name for name, info in self.topics.items()}

    def topic_id(self, name: str) -> uuid.UUID | None:
        info = self.topics.get(name)
        return None if info is None else info.topic_id

    def is_subscribed_to(self, topic: str) -> bool:
        return any(m.subscribes_to(topic) for m in self.members.values())

    def subscribed_topics(self, topics: Iterable[str]) -> set[str]:
        """Which of ``topics`` (plus every explicitly named one) some member subscribes to."""
        names = {t for m in self.members.values() for t in m.subscribed_topic_names}
        regexes = {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}
        if regexes:
            names |= {t for t in topics if any(_regex_matches(r, t) for r in regexes)}
        return names

    def owned_by_others(self, member: ConsumerMember) -> set[TP]:
        return {tp for other in self.members.values() if other is not member for tp in other.owns()}

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def replace_static_member(self, instance_id: str, new_member_id: str) -> ConsumerMember:
        """The static member of `instance_id`, renamed `new_member_id`, with its target assignment."""
        old_member_id = self.static_members[instance_id]
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        self.target[new_member_id] = self.target.pop(old_member_id, member.assigned)
        return member

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        instance = None if member is None else member.instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        self.target.pop(member_id, None)
        return member


def grouped_by_topic(tps: Iterable[TP]) -> dict[uuid.UUID, list[int]]:
    """Partitions per topic id, both in order, as the ConsumerGroup responses list them."""
    grouped: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in sorted(tps, key=lambda t: (str(t[0]), t[1])):
        grouped.setdefault(topic_id, []).append(partition)
    return grouped
