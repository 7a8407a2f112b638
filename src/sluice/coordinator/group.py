"""One classic consumer group: its state table, members and committed offsets (no I/O, no clock).

The lifecycle follows Kafka's ClassicGroup (``TRANSITIONS`` below is the authority):

    Empty --first join--> PreparingRebalance --everyone rejoined, or timeout--> CompletingRebalance
                            ^      |                                                  |
                            |      +--nobody left--> Empty          leader's SyncGroup |
                            |                                                         v
                            +------ a member joins, leaves, changes or expires ---- Stable

CompletingRebalance returns to PreparingRebalance the same way Stable does; a deleted or expired
group becomes Dead and is dropped.

The request handlers live in :mod:`sluice.coordinator.coordinator`; this module only keeps the
books (who is a member, who is awaiting what, which protocol wins) and refuses illegal transitions.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum

from sluice.coordinator.consumer_protocol import subscribed_topics
from sluice.coordinator.messages import JoinGroupProtocol, JoinGroupResponseMember
from sluice.coordinator.records import GroupMetadataValue, MemberMetadataValue, OffsetCommitValue
from sluice.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState

# state -> the states it may move to next (Kafka's validPreviousStates, read the other way round).
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.PREPARING_REBALANCE: frozenset({_S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
    _S.COMPLETING_REBALANCE: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.DEAD}),
    _S.STABLE: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.DEAD: frozenset({_S.DEAD}),
}

# What a Heartbeat from a current member of the current generation gets in each state.
HEARTBEAT_ERROR: dict[GroupState, ErrorCode] = {
    _S.EMPTY: ErrorCode.UNKNOWN_MEMBER_ID,
    _S.PREPARING_REBALANCE: ErrorCode.REBALANCE_IN_PROGRESS,
    _S.COMPLETING_REBALANCE: ErrorCode.NONE,
    _S.STABLE: ErrorCode.NONE,
    _S.DEAD: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}

# What a validated OffsetCommit gets: commits during PreparingRebalance are still accepted because
# the member learns about the rebalance from its next heartbeat; during CompletingRebalance the
# member already holds the new generation but not its assignment yet.
COMMIT_ERROR: dict[GroupState, ErrorCode] = {
    _S.EMPTY: ErrorCode.NONE,
    _S.PREPARING_REBALANCE: ErrorCode.NONE,
    _S.COMPLETING_REBALANCE: ErrorCode.REBALANCE_IN_PROGRESS,
    _S.STABLE: ErrorCode.NONE,
    _S.DEAD: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}

# States in which a membership change starts a new rebalance (in PreparingRebalance it joins the
# one already running).
CAN_REBALANCE = frozenset({_S.EMPTY, _S.STABLE, _S.COMPLETING_REBALANCE})


class IllegalStateTransition(RuntimeError):
    """A bug in the coordinator: the table above does not allow this move."""


@dataclass(slots=True)
class Waiter:
    """A parked JoinGroup/SyncGroup: the caller's reply token and the request version."""

    reply_to: Hashable
    api_version: int = 0


@dataclass(slots=True, eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[JoinGroupProtocol]
    assignment: bytes = b""
    join_waiter: Waiter | None = None
    sync_waiter: Waiter | None = None
    # A member that has never received a JoinGroup response cannot heartbeat, so it is bounded by
    # the new-member join timeout instead of its session timeout.
    is_new: bool = False
    session_deadline_ms: int = 0

    def metadata_for(self, protocol_name: str | None) -> bytes:
        for protocol in self.protocols:
            if protocol.name == protocol_name:
                return protocol.metadata
        return b""

    def supports(self, protocol_name: str) -> bool:
        return any(p.name == protocol_name for p in self.protocols)

    def protocols_match(self, protocols: list[JoinGroupProtocol]) -> bool:
        return [(p.name, p.metadata) for p in self.protocols] == [(p.name, p.metadata) for p in protocols]

    def subscription_matches(self, protocols: list[JoinGroupProtocol]) -> bool:
        """Does a restarted static member ask for the same thing as the member it replaces? For the consumer
        protocol that is the subscribed topics only: the rest of a subscription (owned partitions, generation,
        assignor user data) describes the process that sent it, so a new process never repeats it byte for
        byte (the Java client's carries the generation it last joined, a new process sends -1). A known
        member's rejoin still compares bytes (protocols_match): new owned partitions there mean a rebalance."""

        def wanted(metadata: bytes) -> object:
            topics = subscribed_topics(metadata) if self.protocol_type == "consumer" else None
            return metadata if topics is None else sorted(topics)

        return [(p.name, wanted(p.metadata)) for p in self.protocols] == [
            (p.name, wanted(p.metadata)) for p in protocols
        ]

    def vote(self, candidates: set[str]) -> str | None:
        return next((p.name for p in self.protocols if p.name in candidates), None)

    def session_can_expire(self) -> bool:
        # A member parked in JoinGroup or SyncGroup cannot heartbeat; the rebalance timeout and the
        # pending-sync timeout bound it instead (new members excepted, see ``is_new``).
        return self.is_new or (self.join_waiter is None and self.sync_waiter is None)


@dataclass(slots=True, eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, and when they lapse if never used.
    pending_members: dict[str, int] = field(default_factory=dict)
    # Members of this generation that have not sent SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline_ms: int | None = None
    join_deadline_ms: int | None = None
    # Set while the first rebalance of a new group is being delayed (group.initial.rebalance.delay).
    initial_delay_remaining_ms: int | None = None
    initial_delay_ms: int = 0
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)

    # --- state ---------------------------------------------------------------------------------

    def transition(self, target: GroupState, now_ms: int) -> None:
        if target not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(f"group {self.group_id!r}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # --- membership ----------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        instance_id = member.group_instance_id if member is not None else None
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static_member(self, group_instance_id: str, new_member_id: str) -> Member:
        old_member_id = self.static_members[group_instance_id]
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return member

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Is this (member id, instance id) pair the current incarnation of a member?"""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            # Another process restarted with the same instance id after this one: fence this one.
            return ErrorCode.NONE if current == member_id else ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.join_waiter is not None)

    def all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_members

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if nobody did."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.join_waiter is not None:
            return True
        joined = next((m.member_id for m in self.members.values() if m.join_waiter is not None), None)
        if joined is None:
            return False
        self.leader_id = joined
        return True

    # --- protocols -----------------------------------------------------------------------------

    def supports_protocols(
        self, protocol_type: str, protocols: list[JoinGroupProtocol], member_id: str = ""
    ) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        # The joining member's own old protocols must not vote: it is replacing them.
        others = [m for m in self.members.values() if m.member_id != member_id]
        return any(all(m.supports(p.name) for m in others) for p in protocols)

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        names = {p.name for p in members[0].protocols}
        for member in members[1:]:
            names &= {p.name for p in member.protocols}
        return names

    def select_protocol(self) -> str:
        """The protocol every member supports with the most first-choice votes, as Kafka picks it."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        if not votes:
            # Only possible with members restored from a log that lacks their protocols: keep going
            # with what the group had rather than fail the whole rebalance.
            return self.protocol_name or ""
        # Ties go to the protocol voted first (dicts keep insertion order; max keeps the first).
        return max(votes, key=lambda name: votes[name])

    def member_list(self) -> list[JoinGroupResponseMember]:
        return [
            JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        ]

    def refresh_subscribed_topics(self) -> None:
        """Work out the topics a "consumer" group reads; None when unknown (treated as "all")."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            self.subscribed_topics = None
            return
        topics: set[str] = set()
        for member in self.members.values():
            member_topics = subscribed_topics(member.metadata_for(self.protocol_name))
            if member_topics is None:
                self.subscribed_topics = None
                return
            topics.update(member_topics)
        self.subscribed_topics = frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        # Kafka answers "yes" when it cannot tell, so offsets in use are never deleted.
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # --- persistence ---------------------------------------------------------------------------

    def metadata_value(self) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp_ms,
            members=[
                MemberMetadataValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata_for(self.protocol_name),
                    assignment=m.assignment,
                )
                for m in self.members.values()
            ],
        )
