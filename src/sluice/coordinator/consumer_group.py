"""KIP-848 consumer groups ("group.protocol=consumer"), sans-I/O like the classic coordinator.

The broker computes the assignment; members only heartbeat (ConsumerGroupHeartbeat) and reconcile:

* The **group epoch** goes up whenever what the assignment depends on changes: a member joins or goes,
  a subscription or the chosen assignor changes, a subscribed topic appears or grows.
* Then a new **target assignment** is computed at once with a server-side assignor; the **assignment
  epoch** records the group epoch it was computed for.
* Each member moves towards its target one heartbeat at a time. A partition the target takes away is
  first **revoked**: the member keeps its epoch and gets an assignment without it, and only once a
  heartbeat no longer lists it among the owned TopicPartitions does the member advance to the
  assignment epoch. A partition is handed to its new owner only when no other member holds or is
  still revoking it, so no partition ever has two owners.
* MemberEpoch 0 joins, -1 leaves, -2 is a static member's temporary leave (it keeps its assignment
  until its session expires or the same instance id joins again).

Membership lives in memory only (first version): after a broker restart the members' heartbeats get
UNKNOWN_MEMBER_ID and they rejoin with epoch 0, which KIP-848 clients do by themselves. Committed
offsets are persisted like any others (the caller writes the records this module returns).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from sluice.coordinator.assignors import ASSIGNOR_FUNCTIONS, ASSIGNORS
from sluice.coordinator.consumer_group_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    TP,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    grouped_by_topic,
)
from sluice.coordinator.messages import (
    NO_MEMBER_ID,
    ConsumerGroupDescribedGroup,
    ConsumerGroupDescribedMember,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    DescribedTopicPartitions,
    OffsetCommit,
    TopicInfo,
)
from sluice.errors import ErrorCode


@dataclass(slots=True, frozen=True)
class ConsumerGroupConfig:
    """Kafka's group.consumer.* broker settings, with Kafka's defaults."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1


class HeartbeatError(Exception):
    """Ends a heartbeat with an error answer; nothing it touched has been changed yet."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def random_consumer_member_id() -> str:
    return str(uuid.uuid4())


class ConsumerGroups:
    """All KIP-848 groups of the coordinator. The classic coordinator owns it and routes to it."""

    def __init__(
        self, config: ConsumerGroupConfig | None = None,
        member_id_factory: Callable[[], str] = random_consumer_member_id,
    ) -> None:
        self.config = config or ConsumerGroupConfig()
        self._new_member_id = member_id_factory
        self.groups: dict[str, ConsumerGroup] = {}
        # Session timeouts of groups created with one (sluice's create_group), by group id.
        self.group_session_timeouts: dict[str, int] = {}
        # Dynamic group configs (GROUP config resources): (session timeout, heartbeat interval), by group id.
        self.group_overrides: dict[str, tuple[int | None, int | None]] = {}

    def session_timeout(self, group_id: str) -> int:
        configured = self.group_overrides.get(group_id, (None, None))[0]
        if configured is not None:
            return configured
        return self.group_session_timeouts.get(group_id, self.config.session_timeout_ms)

    def heartbeat_interval(self, group_id: str) -> int:
        configured = self.group_overrides.get(group_id, (None, None))[1]
        return self.config.heartbeat_interval_ms if configured is None else configured

    # --- ConsumerGroupHeartbeat ----------------------------------------------------------------

    def heartbeat(self, request: ConsumerGroupHeartbeat, now_ms: int) -> ConsumerGroupHeartbeatResult:
        try:
            _validate(request)
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(request, now_ms)
            return self._heartbeat(request, now_ms)
        except HeartbeatError as error:
            return ConsumerGroupHeartbeatResult(error.code, error.message, member_epoch=request.member_epoch)

    def _heartbeat(self, request: ConsumerGroupHeartbeat, now_ms: int) -> ConsumerGroupHeartbeatResult:
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {request.group_id!r} has no members")
            group = ConsumerGroup(request.group_id)
        member, before_epoch, before_assigned = self._member_for(group, request, now_ms)
        self.groups[group.group_id] = group
        owned = None if request.topic_partitions is None else frozenset(request.topic_partitions)
        # One bump per heartbeat, whatever changed: a join that also brings a subscription and new
        # topic metadata is one new group epoch.
        joined = member.member_id not in group.target
        subscription_changed = self._update_member(group, member, request)
        topics_changed = self._refresh_topics(group, request.topics)
        if joined or subscription_changed or topics_changed:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        self._reconcile(group, member, owned, now_ms)
        if group.withheld and not any(m.owns() & group.withheld for m in group.members.values()):
            # Every member released the rewound partitions: assign them again; their new owners
            # fetch the committed (rewound) offsets.
            group.withheld = frozenset()
            group.group_epoch += 1
            self._compute_target(group)
            self._reconcile(group, member, owned, now_ms)
        member.session_deadline_ms = now_ms + self.session_timeout(group.group_id)
        send_assignment = (
            request.member_epoch == JOIN_EPOCH
            or member.member_epoch != before_epoch
            or member.assigned != before_assigned
            or (owned is not None and owned != member.assigned)
        )
        return ConsumerGroupHeartbeatResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval(group.group_id),
            assignment=sorted(member.assigned, key=lambda t: (str(t[0]), t[1])) if send_assignment else None,
        )

    def _member_for(
        self, group: ConsumerGroup, request: ConsumerGroupHeartbeat, now_ms: int
    ) -> tuple[ConsumerMember, int, frozenset[TP]]:
        """The member this heartbeat is from (created or taken over on join), its epoch and assignment
        before this heartbeat. Raises for fenced or unknown members."""
        member_id = request.member_id
        if request.member_epoch != JOIN_EPOCH:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in the group")
            if request.instance_id is not None and group.static_members.get(request.instance_id) != member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID, f"instance {request.instance_id!r} is taken")
            self._check_epoch(member, request)
            return member, member.member_epoch, member.assigned
        if not member_id:
            member_id = self._new_member_id()  # v0: the coordinator names members
        instance = request.instance_id
        current_static = group.static_members.get(instance) if instance is not None else None
        if current_static is not None and current_static != member_id:
            previous = group.members[current_static]
            if previous.member_epoch != STATIC_LEAVE_EPOCH:
                raise HeartbeatError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"static member {instance!r} is still active as {current_static!r}",
                )
            # A restarted static member takes its old self's place, epoch, assignment and target: no
            # rebalance, and whatever the target took from it while it was away is still revoked.
            member = group.replace_static_member(instance, member_id)
            member.member_epoch = member.previous_member_epoch
            return member, -1, frozenset()
        member = group.members.get(member_id)
        if member is None:
            if len(group.members) >= self.config.max_size:
                raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group.group_id!r} is full")
            member = ConsumerMember(member_id, instance_id=instance)
            group.add(member)
        else:
            # A known member joining again has dropped everything it held (it was fenced or lost them).
            member.assigned = member.revoking = frozenset()
            member.state = MemberState.STABLE
            member.revocation_deadline_ms = None
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = JOIN_EPOCH
        return member, -1, frozenset()

    @staticmethod
    def _check_epoch(member: ConsumerMember, request: ConsumerGroupHeartbeat) -> None:
        received = request.member_epoch
        if received == member.member_epoch:
            return
        # The answer that moved the member to its current epoch may have been lost: tolerate the
        # previous epoch as long as the member claims nothing it no longer has.
        if (
            received < member.member_epoch
            and received == member.previous_member_epoch
            and request.topic_partitions is not None
            and set(request.topic_partitions) <= member.owns()
        ):
            return
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"member epoch {received} is not the current {member.member_epoch}",
        )

    @staticmethod
    def _update_member(group: ConsumerGroup, member: ConsumerMember, request: ConsumerGroupHeartbeat) -> bool:
        """Take what the heartbeat changed; True if the target assignment depends on it."""
        changed = False
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(set(request.subscribed_topic_names)))
            changed |= names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex or None
            changed |= regex != member.subscribed_topic_regex
            member.subscribed_topic_regex = regex
        if request.server_assignor is not None:
            changed |= request.server_assignor != member.server_assignor
            member.server_assignor = request.server_assignor
        if request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.client_id or request.client_host:
            member.client_id = request.client_id
            member.client_host = request.client_host
        return changed

    @staticmethod
    def _refresh_topics(group: ConsumerGroup, topics: Mapping[str, TopicInfo]) -> bool:
        """Re-read the subscribed topics' metadata; True if it changed since the target was computed."""
        fresh: dict[str, TopicInfo] = {}
        has_regex = any(m.subscribed_topic_regex for m in group.members.values())
        for name in group.subscribed_topics(topics if has_regex else ()):
            info = topics.get(name)
            if info is not None and info.partitions > 0:
                fresh[name] = info
        if fresh == group.topics:
            return False
        group.topics = fresh
        return True

    def _compute_target(self, group: ConsumerGroup) -> None:
        # The assignor most members ask for wins (ties: Kafka's preference order); default: uniform.
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        group.assignor = max(ASSIGNORS, key=lambda a: (votes[a], -ASSIGNORS.index(a)))
        group.target = ASSIGNOR_FUNCTIONS[group.assignor](group.members, group.topics, group.target)
        if group.withheld:
            group.target = {mid: frozenset(tps) - group.withheld for mid, tps in group.target.items()}
        group.assignment_epoch = group.group_epoch

    def withhold(self, group: ConsumerGroup, partitions: Iterable[tuple[str, int]]) -> None:
        """Revoke these partitions from whoever owns them; they return once every member let go."""
        ids = {(group.topic_id(name), p) for name, p in partitions}
        taken = frozenset((tid, p) for tid, p in ids if tid is not None)
        if taken:
            group.withheld |= taken
            group.group_epoch += 1

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: frozenset[TP] | None, now_ms: int
    ) -> None:
        """Move the member one step towards its target assignment."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.revoking:
                return  # still holds (or has not said it released) what it must give up
            member.revoking = frozenset()
            member.revocation_deadline_ms = None
        elif member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        target = group.target.get(member.member_id, frozenset())
        keep = member.assigned & target
        revoke = member.assigned - target
        if revoke:
            # Give up first, at the same epoch; the new epoch comes once the release is confirmed.
            member.assigned = keep
            member.revoking = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revocation_deadline_ms = now_ms + max(member.rebalance_timeout_ms, 0)
            return
        wanted = target - keep
        free = wanted - group.owned_by_others(member)
        member.assigned = keep | free
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        member.state = MemberState.UNRELEASED_PARTITIONS if wanted - free else MemberState.STABLE

    # --- leaving and expiry --------------------------------------------------------------------

    def _leave(self, request: ConsumerGroupHeartbeat, now_ms: int) -> ConsumerGroupHeartbeatResult:
        group = self.groups.get(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        if group is None or member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in the group")
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # Keeps its partitions (nobody else gets them) until it comes back or its session ends.
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.session_deadline_ms = now_ms + self.session_timeout(group.group_id)
        else:
            self.remove_member(group, member)
        return ConsumerGroupHeartbeatResult(
            ErrorCode.NONE, member_id=request.member_id, member_epoch=request.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval(group.group_id),
        )

    def remove_member(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Drop a member (left, expired or fenced): its partitions are free at once, the rest rebalance."""
        group.remove(member.member_id)
        group.group_epoch += 1
        if group.members:
            group.topics = {n: i for n, i in group.topics.items() if group.is_subscribed_to(n)}
            self._compute_target(group)
        else:
            group.target = {}
            group.topics = {}
            group.assignment_epoch = group.group_epoch

    def next_deadline(self) -> int | None:
        deadlines: list[int] = []
        for group in self.groups.values():
            for member in group.members.values():
                deadlines.append(member.session_deadline_ms)
                if member.revocation_deadline_ms is not None:
                    deadlines.append(member.revocation_deadline_ms)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> None:
        """Remove members whose session ended or who did not revoke within their rebalance timeout."""
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                late = member.revocation_deadline_ms is not None and member.revocation_deadline_ms <= now_ms
                if member.session_deadline_ms <= now_ms or late:
                    self.remove_member(group, member)

    # --- offsets and administration ------------------------------------------------------------

    def commit_error(self, group: ConsumerGroup, request: OffsetCommit) -> ErrorCode:
        """Whether a member of ``group`` (or an admin, when it is empty) may commit these offsets."""
        if request.generation_id < 0 and request.member_id == NO_MEMBER_ID and group.is_empty():
            return ErrorCode.NONE
        member = group.members.get(request.member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if request.generation_id == member.member_epoch:
            return ErrorCode.NONE
        # sluice relaxation: a commit made just before the member learned its new epoch is still safe
        # for partitions it holds, since nobody else can hold them; Kafka would say STALE_MEMBER_EPOCH.
        if request.generation_id == member.previous_member_epoch and request.generation_id > 0:
            owned = member.owns()
            committed = {(group.topic_id(t.name), p.partition_index) for t in request.topics for p in t.partitions}
            if committed <= owned:
                return ErrorCode.NONE
        return ErrorCode.STALE_MEMBER_EPOCH

    def describe(self, group: ConsumerGroup) -> ConsumerGroupDescribedGroup:
        names = group.topic_names()

        def described(tps: Iterable[TP]) -> list[DescribedTopicPartitions]:
            return [
                DescribedTopicPartitions(topic_id, names.get(topic_id, ""), partitions)
                for topic_id, partitions in grouped_by_topic(tps).items()
            ]

        members = [
            ConsumerGroupDescribedMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=described(m.assigned),
                target_assignment=described(group.target.get(m.member_id, frozenset())),
            )
            for m in group.members.values()
        ]
        return ConsumerGroupDescribedGroup(
            ErrorCode.NONE,
            group.group_id,
            group_state=group.state,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.assignor,
            members=members,
        )


def _validate(request: ConsumerGroupHeartbeat) -> None:
    """Kafka's request checks, reported as INVALID_REQUEST (or UNSUPPORTED_ASSIGNOR)."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    if not request.group_id:
        raise invalid("GroupId can't be empty")
    if request.instance_id is not None and not request.instance_id:
        raise invalid("InstanceId can't be empty")
    if request.member_epoch < STATIC_LEAVE_EPOCH:
        raise invalid(f"MemberEpoch {request.member_epoch} is not valid")
    # From v1 the member names itself (KIP-1082); before that only a joining member may omit it.
    if not request.member_id and (request.api_version >= 1 or request.member_epoch != JOIN_EPOCH):
        raise invalid("MemberId can't be empty")
    if request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
        raise invalid("InstanceId can't be null when leaving with epoch -2")
    if request.member_epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms < 0:
            raise invalid("RebalanceTimeoutMs must be provided when joining")
        if request.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set when joining")
    if request.subscribed_topic_regex:
        try:
            re.compile(request.subscribed_topic_regex)
        except re.error as exc:
            raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)) from exc
    if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
        raise HeartbeatError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"assignor {request.server_assignor!r} is not one of {', '.join(ASSIGNORS)}",
        )


