"""Share-group membership (KIP-932's ShareGroupHeartbeat and ShareGroupDescribe), sans-I/O.

Members only heartbeat; the coordinator assigns. Unlike a consumer group nothing is ever revoked first: a
partition may be read by several members at once (records, not partitions, are what members hold), so a
member moves to its new target at once, and its epoch with it.

* The group epoch goes up whenever the assignment depends on something new: a member joins, leaves or
  changes its subscription, a subscribed topic appears or grows.
* The target assignment is recomputed from the group epoch at most once per `share.assignment.interval.ms`;
  a member waiting for it is told to heartbeat again when the interval ends. An empty group's first member
  gets its partitions one interval after it joins, with the members that start with it.
* MemberEpoch 0 joins (the member names itself), -1 leaves.

Membership lives in memory: after a restart members get UNKNOWN_MEMBER_ID and join again, which share
consumers do by themselves. The group's existence and epoch are kept in `__consumer_offsets`
(ShareGroupMetadata), so an empty share group survives restarts with its type and its state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil

from sluice.coordinator.messages import (
    ConsumerGroupHeartbeatResult,
    DescribedTopicPartitions,
    TopicIdPartition,
    TopicInfo,
)
from sluice.errors import ErrorCode

SHARE_GROUP_TYPE = "share"
SHARE_PROTOCOL_TYPE = "share"
SIMPLE_ASSIGNOR = "simple"
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
# A member id is the client's UUID in text: Kafka refuses longer ones.
MAX_MEMBER_ID_LENGTH = 36

TP = TopicIdPartition


@dataclass(slots=True, frozen=True)
class ShareGroupConfig:
    """Kafka's group.share.* broker settings that membership uses, with Kafka's defaults."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    assignment_interval_ms: int = 1_000


@dataclass(slots=True)
class ShareGroupHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    # None: unchanged since the last heartbeat.
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)


@dataclass(slots=True)
class ShareGroupDescribe:
    group_ids: list[str]


# ShareGroupHeartbeat answers as ConsumerGroupHeartbeat does (KIP-932 took KIP-848's response fields).
ShareGroupHeartbeatResult = ConsumerGroupHeartbeatResult


@dataclass(slots=True)
class ShareDescribedMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    assignment: list[DescribedTopicPartitions]


@dataclass(slots=True)
class ShareDescribedGroup:
    error_code: ErrorCode
    group_id: str
    error_message: str | None = None
    group_state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = SIMPLE_ASSIGNOR
    members: list[ShareDescribedMember] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    # A heartbeat may still carry the epoch before the last one, if that answer was lost.
    previous_epoch: int = -1
    assigned: frozenset[TP] = frozenset()
    session_deadline_ms: int = 0


@dataclass(slots=True, eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, frozenset[TP]] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    # When the target was last computed (share.assignment.interval.ms counts from here).
    assigned_at_ms: int | None = None

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def topic_names(self) -> dict[uuid.UUID, str]:
        return {info.topic_id: name for name, info in self.topics.items()}


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def assign_simple(members: Mapping[str, ShareMember], topics: Mapping[str, TopicInfo]) -> dict[str, frozenset[TP]]:
    """Kafka's simple share assignor, per topic over the members subscribed to it. With no more members than
    partitions each partition goes to one member, round-robin (counts differ by at most one). With more
    members, each partition is shared by ceil(members / partitions) members and the members' shares differ
    by at most one: member i takes ceil(x(i+1)) - ceil(xi) slots of the partitions laid out round-robin,
    x being the slots per member."""
    result: dict[str, set[TP]] = {mid: set() for mid in members}
    for name, info in sorted(topics.items()):
        eligible = sorted(mid for mid, m in members.items() if name in m.subscribed_topic_names)
        count = info.partitions
        if not eligible or count <= 0:
            continue
        if len(eligible) <= count:
            for partition in range(count):
                result[eligible[partition % len(eligible)]].add((info.topic_id, partition))
            continue
        sharing = -(-len(eligible) // count)
        per_member = Fraction(sharing * count, len(eligible))
        slot = 0
        for index, mid in enumerate(eligible):
            quota = ceil(per_member * (index + 1)) - ceil(per_member * index)
            for _ in range(quota):
                result[mid].add((info.topic_id, slot % count))
                slot += 1
    return {mid: frozenset(tps) for mid, tps in result.items()}


def sorted_partitions(tps: Iterable[TP]) -> dict[uuid.UUID, list[int]]:
    grouped: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in sorted(tps, key=lambda t: (str(t[0]), t[1])):
        grouped.setdefault(topic_id, []).append(partition)
    return grouped


class ShareGroups:
    """Every share group of the coordinator; the group coordinator owns it and routes share calls to it."""

    def __init__(self, config: ShareGroupConfig | None = None) -> None:
        self.config = config or ShareGroupConfig()
        self.groups: dict[str, ShareGroup] = {}
        # Per group: share.session.timeout.ms, share.heartbeat.interval.ms, share.assignment.interval.ms set
        # as group configs (None: the broker's).
        self.group_overrides: dict[str, tuple[int | None, int | None, int | None]] = {}

    def _setting(self, group_id: str, index: int, default: int) -> int:
        value = self.group_overrides.get(group_id, (None, None, None))[index]
        return default if value is None else value

    def session_timeout(self, group_id: str) -> int:
        return self._setting(group_id, 0, self.config.session_timeout_ms)

    def heartbeat_interval(self, group_id: str) -> int:
        return self._setting(group_id, 1, self.config.heartbeat_interval_ms)

    def assignment_interval(self, group_id: str) -> int:
        return self._setting(group_id, 2, self.config.assignment_interval_ms)

    # --- ShareGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(self, request: ShareGroupHeartbeat, now_ms: int) -> tuple[ShareGroupHeartbeatResult, bool]:
        """The answer, and whether the group was created by this call (its metadata must be persisted)."""
        try:
            _validate(request)
            if request.member_epoch == LEAVE_EPOCH:
                return self._leave(request), False
            created = request.group_id not in self.groups
            return self._heartbeat(request, now_ms), created
        except HeartbeatError as error:
            return ShareGroupHeartbeatResult(error.code, error.message, member_epoch=request.member_epoch), False

    def _heartbeat(self, request: ShareGroupHeartbeat, now_ms: int) -> ShareGroupHeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {request.group_id} not found.")
            group = ShareGroup(request.group_id)
        member = group.members.get(request.member_id)
        joined = False
        if member is None:
            if request.member_epoch != JOIN_EPOCH:
                raise _not_a_member(request)
            if len(group.members) >= self.config.max_size:
                raise HeartbeatError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The share group has reached its maximum capacity of {self.config.max_size} members.",
                )
            member = ShareMember(request.member_id)
            joined = True
        elif request.member_epoch not in (JOIN_EPOCH, member.member_epoch, member.previous_epoch):
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The share group member has a smaller member epoch ({request.member_epoch}) than the one known "
                f"by the group coordinator ({member.member_epoch}).",
            )
        self.groups[group.group_id] = group
        first = joined and not group.members
        group.members[member.member_id] = member
        before = (member.member_epoch, member.assigned)
        changed = _update_member(member, request) or joined
        changed |= _refresh_topics(group, request.topics)
        if changed:
            group.group_epoch += 1
        interval = self.heartbeat_interval(group.group_id)
        if first and self.assignment_interval(group.group_id) > 0:
            # An empty group's first member gets an epoch and no partitions yet: they are assigned one
            # assignment interval later, to it and to the members that start with it, so those share the
            # partitions from the first fetch (in Kafka a group's partitions are first initialized, and the
            # first member's first heartbeat gets no partitions either).
            self._assign(group, now_ms, {mid: frozenset() for mid in group.members})
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            wait = self._assignment_wait(group, now_ms)
            if wait > 0:
                interval = min(interval, wait)  # come back when the target may be computed
            else:
                self._assign(group, now_ms, assign_simple(group.members, group.topics))
        if member.member_epoch != group.assignment_epoch:
            # No revocation step: the member takes its target (none, if the target is older than it) at once.
            member.assigned = group.target.get(member.member_id, frozenset())
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        member.session_deadline_ms = now_ms + self.session_timeout(group.group_id)
        send = (
            request.member_epoch == JOIN_EPOCH
            or request.subscribed_topic_names is not None
            or (member.member_epoch, member.assigned) != before
        )
        return ShareGroupHeartbeatResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=interval,
            assignment=sorted(member.assigned, key=lambda t: (str(t[0]), t[1])) if send else None,
        )

    @staticmethod
    def _assign(group: ShareGroup, now_ms: int, target: dict[str, frozenset[TP]]) -> None:
        group.target = target
        group.assignment_epoch = group.group_epoch
        group.assigned_at_ms = now_ms

    def _assignment_wait(self, group: ShareGroup, now_ms: int) -> int:
        if group.assigned_at_ms is None:
            return 0
        return group.assigned_at_ms + self.assignment_interval(group.group_id) - now_ms

    def _leave(self, request: ShareGroupHeartbeat) -> ShareGroupHeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {request.group_id} not found.")
        if request.member_id not in group.members:
            raise _not_a_member(request)
        self.remove_member(group, request.member_id)
        return ShareGroupHeartbeatResult(
            ErrorCode.NONE, member_id=request.member_id, member_epoch=LEAVE_EPOCH,
            heartbeat_interval_ms=self.heartbeat_interval(group.group_id),
        )

    def remove_member(self, group: ShareGroup, member_id: str) -> None:
        group.members.pop(member_id, None)
        group.target.pop(member_id, None)
        group.group_epoch += 1
        if not group.members:
            group.target = {}
            group.topics = {}
            group.assignment_epoch = group.group_epoch

    # --- time ----------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return min(
            (m.session_deadline_ms for g in self.groups.values() for m in g.members.values()), default=None
        )

    def tick(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members whose session ended; returns (group id, member id) of each, for their records."""
        gone = []
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if member.session_deadline_ms <= now_ms:
                    self.remove_member(group, member.member_id)
                    gone.append((group.group_id, member.member_id))
        return gone

    # --- describe ------------------------------------------------------------------------------

    def describe(self, group: ShareGroup) -> ShareDescribedGroup:
        names = group.topic_names()
        return ShareDescribedGroup(
            ErrorCode.NONE,
            group.group_id,
            group_state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            members=[
                ShareDescribedMember(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.member_epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=list(m.subscribed_topic_names),
                    assignment=[
                        DescribedTopicPartitions(topic_id, names.get(topic_id, ""), partitions)
                        for topic_id, partitions in sorted_partitions(m.assigned).items()
                    ],
                )
                for m in group.members.values()
            ],
        )


def _update_member(member: ShareMember, request: ShareGroupHeartbeat) -> bool:
    changed = False
    if request.subscribed_topic_names is not None:
        names = tuple(sorted(set(request.subscribed_topic_names)))
        changed = names != member.subscribed_topic_names
        member.subscribed_topic_names = names
    if request.rack_id is not None:
        member.rack_id = request.rack_id
    if request.client_id or request.client_host:
        member.client_id = request.client_id
        member.client_host = request.client_host
    return changed


def _refresh_topics(group: ShareGroup, topics: Mapping[str, TopicInfo]) -> bool:
    fresh = {}
    for name in group.subscribed_topics():
        info = topics.get(name)
        if info is not None and info.partitions > 0:
            fresh[name] = info
    if fresh == group.topics:
        return False
    group.topics = fresh
    return True


def _not_a_member(request: ShareGroupHeartbeat) -> HeartbeatError:
    return HeartbeatError(
        ErrorCode.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of group {request.group_id}."
    )


def _validate(request: ShareGroupHeartbeat) -> None:
    """Kafka's checks, with its words, answered INVALID_REQUEST."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    if not request.member_id or len(request.member_id) > MAX_MEMBER_ID_LENGTH:
        raise invalid("Invalid member id in the request.")
    if not request.group_id:
        raise invalid("GroupId can't be empty.")
    if request.rack_id is not None and not request.rack_id:
        raise invalid("RackId can't be empty.")
    if request.member_epoch < LEAVE_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if request.member_epoch == JOIN_EPOCH and not request.subscribed_topic_names:
        raise invalid("SubscribedTopicNames must be set in first request.")
