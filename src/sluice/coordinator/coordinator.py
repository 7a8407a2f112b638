"""The classic group coordinator, sans-I/O: requests and time go in, replies and records come out.

Every request method takes the decoded request, the current time ``now_ms`` and an opaque hashable
``reply_to`` token, and returns an :class:`Outcome`. A request that must wait (a JoinGroup during a
rebalance, a follower's SyncGroup before the leader's) is simply absent from ``replies``; it comes
out of a later call — another request or :meth:`GroupCoordinator.tick` — paired with its token.
Every token gets exactly one reply eventually. If the requesting connection closed meanwhile, the
caller drops the reply; the coordinator does not need to be told.

Timers are the caller's job too: after each call ask :meth:`next_deadline` and call :meth:`tick`
once the clock reaches it.

Restart: :meth:`load` replays ``__consumer_offsets``. Groups whose last record has members come
back Stable with those members, their assignments and generation (as Kafka does), each member's
session timer starting at load time: members still running keep heartbeating, rejoin or commit
without noticing the restart, and the ones that are gone expire and trigger a rebalance.
"""

from __future__ import annotations

import uuid
from collections import ChainMap
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import replace

from sluice.coordinator import admin, offsets
from sluice.coordinator.consumer_group import (
    CONSUMER_GROUP_TYPE,
    JOIN_EPOCH,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroups,
    random_consumer_member_id,
)
from sluice.coordinator.group import (
    CAN_REBALANCE,
    CONSUMER_PROTOCOL_TYPE,
    HEARTBEAT_ERROR,
    ClassicGroup,
    GroupState,
    Member,
    Waiter,
)
from sluice.coordinator.management import (
    ClassicRewind,
    GroupManagement,
    GroupSettings,
    load_settings,
    merge_refused,
    split_fenced,
    strip_assignment,
)
from sluice.coordinator.messages import (
    NO_MEMBER_ID,
    ConsumerGroupDescribe,
    ConsumerGroupDescribedGroup,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResult,
    DeletableGroupResult,
    DeleteGroups,
    DeleteGroupsResult,
    DescribedGroup,
    DescribeGroups,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    ListedGroup,
    ListGroups,
    MemberResponse,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    SyncGroup,
    SyncGroupResult,
)
from sluice.coordinator.outcome import CoordinatorConfig, Outcome
from sluice.coordinator.persist import load_groups
from sluice.coordinator.records import (
    GroupMetadataKey,
    PersistRecord,
    group_metadata_record,
)
from sluice.errors import ErrorCode

_S = GroupState
# From JoinGroup v4 a member without an id is given one and must come back with it (KIP-394).
FIRST_VERSION_REQUIRING_MEMBER_ID = 4
# From JoinGroup v9 a rejoining static leader may keep its assignment (KIP-814).
FIRST_VERSION_SKIPPING_ASSIGNMENT = 9


def random_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


class GroupCoordinator(GroupManagement):
    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        member_id_factory: Callable[[str], str] = random_member_id,
        consumer_member_id_factory: Callable[[], str] = random_consumer_member_id,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self._new_member_id = member_id_factory
        self.groups: dict[str, ClassicGroup] = {}
        # KIP-848 groups. A group id names a group of one kind only; an empty group of the other kind
        # is converted on the first join, as Kafka does.
        self.consumer = ConsumerGroups(
            ConsumerGroupConfig(
                session_timeout_ms=self.config.consumer_group_session_timeout_ms,
                heartbeat_interval_ms=self.config.consumer_group_heartbeat_interval_ms,
                max_size=self.config.group_max_size,
            ),
            consumer_member_id_factory,
        )
        self._next_offsets_check_ms: int | None = None
        # Groups made by create_group (sluice extension), and live rewinds still fencing commits.
        self.settings: dict[str, GroupSettings] = {}
        self.rewinds: dict[str, ClassicRewind] = {}
        self._ephemeral_joined: set[str] = set()
        # Ephemeral groups whose members a restart lost: deleted unless a member is back by the deadline.
        self._ephemeral_grace: dict[str, int] = {}

    # --- introspection -------------------------------------------------------------------------

    def group_state(self, group_id: str) -> str | None:
        group = self.groups.get(group_id)
        if group is None:
            consumer_group = self.consumer.groups.get(group_id)
            return None if consumer_group is None else consumer_group.state
        return group.state.value

    # --- JoinGroup -----------------------------------------------------------------------------

    def join_group(self, request: JoinGroup, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        out = Outcome()
        settings = self.settings.get(request.group_id)
        if settings is not None and settings.session_timeout_ms is not None and not (
            self.config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            # A created group's session timeout is what a member gets when it asks for none that fits.
            request = replace(request, session_timeout_ms=settings.session_timeout_ms)
        if request.rebalance_timeout_ms < 0:  # JoinGroup v0 has none: the session timeout serves
            request = replace(request, rebalance_timeout_ms=request.session_timeout_ms)
        error = self._join_precheck(request)
        if error is not ErrorCode.NONE:
            out.reply(reply_to, JoinGroupResult(error, request.member_id))
            return out
        is_new_member = request.member_id == NO_MEMBER_ID
        consumer_group = self.consumer.groups.get(request.group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty():
                # Kafka can migrate members between protocols; sluice keeps one protocol per group.
                out.reply(reply_to, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, request.member_id))
                return out
            del self.consumer.groups[request.group_id]
            converted = ClassicGroup(request.group_id, state_timestamp_ms=now_ms)
            converted.offsets = consumer_group.offsets
            self.groups[request.group_id] = converted
        group = self.groups.get(request.group_id)
        if group is None:
            if not is_new_member:
                out.reply(reply_to, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id))
                return out
            group = self.groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp_ms=now_ms)
        if not self._accepts_joining_member(group, request.member_id):
            out.reply(reply_to, JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, NO_MEMBER_ID))
            member = group.members.get(request.member_id)
            if member is not None:
                self._remove_member(group, member, now_ms, out)
        elif is_new_member:
            self._join_new_member(group, request, now_ms, reply_to, out)
        else:
            self._join_known_member(group, request, now_ms, reply_to, out)
        self._try_complete_join(group, now_ms, out)
        self._forget_if_unused(group)
        self._reap_ephemeral(now_ms, out)
        return out

    def _join_precheck(self, request: JoinGroup) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        config = self.config
        if not (
            config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.group_max_session_timeout_ms
        ):
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return ErrorCode.NONE

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.group_max_size
        if group.is_in(_S.EMPTY, _S.DEAD):
            return True
        if group.is_in(_S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (
                member is not None and member.join_waiter is not None
            ) or group.awaiting_join_count() < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(
        self, group: ClassicGroup, request: JoinGroup, now_ms: int, reply_to: Hashable, out: Outcome
    ) -> None:
        # A restarting static member replaces its old self, whose protocols must not get a say.
        replaced = group.static_members.get(request.group_instance_id or "", NO_MEMBER_ID)
        if not group.supports_protocols(request.protocol_type, request.protocols, replaced):
            out.reply(reply_to, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, NO_MEMBER_ID))
            return
        member_id = self._new_member_id(request.client_id)
        if request.group_instance_id is not None:
            if request.group_instance_id in group.static_members:
                self._replace_static_member(group, request, member_id, now_ms, reply_to, out)
            else:
                self._add_member_and_rebalance(group, request, member_id, now_ms, reply_to, out)
        elif request.api_version >= FIRST_VERSION_REQUIRING_MEMBER_ID:
            # The id becomes real only when the client comes back with it, so a client that gives up
            # after the first round trip leaves no member behind to time out.
            group.pending_members[member_id] = now_ms + request.session_timeout_ms
            out.reply(reply_to, JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id))
        else:
            self._add_member_and_rebalance(group, request, member_id, now_ms, reply_to, out)

    def _join_known_member(
        self, group: ClassicGroup, request: JoinGroup, now_ms: int, reply_to: Hashable, out: Outcome
    ) -> None:
        member_id = request.member_id
        if not group.supports_protocols(request.protocol_type, request.protocols, member_id):
            out.reply(reply_to, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if member_id in group.pending_members and request.group_instance_id is None:
            self._add_member_and_rebalance(group, request, member_id, now_ms, reply_to, out)
            return
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            out.reply(reply_to, JoinGroupResult(error, member_id))
            return
        member = group.members[member_id]
        unchanged = member.protocols_match(request.protocols)
        if group.is_in(_S.COMPLETING_REBALANCE) and unchanged:
            # A retry of a join that already completed: answer with what it would have got.
            out.reply(reply_to, self._join_result(group, member_id, with_members=group.is_leader(member_id)))
        elif group.is_in(_S.STABLE) and unchanged and not group.is_leader(member_id):
            out.reply(reply_to, self._join_result(group, member_id, with_members=False))
        elif group.is_in(_S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.STABLE):
            # A rejoining leader in Stable always rebalances: that is how it asks for a new assignment.
            self._update_member(member, request, Waiter(reply_to, request.api_version), out)
            self._maybe_prepare_rebalance(group, now_ms, out)
        else:
            out.reply(reply_to, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _add_member_and_rebalance(
        self,
        group: ClassicGroup,
        request: JoinGroup,
        member_id: str,
        now_ms: int,
        reply_to: Hashable,
        out: Outcome,
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=list(request.protocols),
            join_waiter=Waiter(reply_to, request.api_version),
            is_new=True,
            session_deadline_ms=now_ms + self.config.new_member_join_timeout_ms,
        )
        if group.is_in(_S.PREPARING_REBALANCE) and group.initial_delay_remaining_ms is not None:
            group.new_member_added = True  # lets the initial delay run once more
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms, out)

    def _update_member(self, member: Member, request: JoinGroup, waiter: Waiter, out: Outcome) -> None:
        member.protocols = list(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        if member.join_waiter is not None:
            # A duplicate JoinGroup supersedes the earlier one, whose client has stopped waiting.
            out.reply(
                member.join_waiter.reply_to,
                JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id),
            )
        member.join_waiter = waiter

    def _replace_static_member(
        self,
        group: ClassicGroup,
        request: JoinGroup,
        new_member_id: str,
        now_ms: int,
        reply_to: Hashable,
        out: Outcome,
    ) -> None:
        """A known group.instance.id restarted: the new process takes over the old member's place."""
        assert request.group_instance_id is not None
        old = group.members[group.static_members[request.group_instance_id]]
        if old.join_waiter is not None:
            out.reply(old.join_waiter.reply_to, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, old.member_id))
            old.join_waiter = None
        if old.sync_waiter is not None:
            out.reply(old.sync_waiter.reply_to, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
            old.sync_waiter = None
        metadata_unchanged = old.subscription_matches(request.protocols)
        previous_leader = group.leader_id or ""
        member = group.replace_static_member(request.group_instance_id, new_member_id)
        member.session_deadline_ms = now_ms + request.session_timeout_ms
        self._update_member(member, request, Waiter(reply_to, request.api_version), out)
        if group.is_in(_S.STABLE) and metadata_unchanged and group.select_protocol() == group.protocol_name:
            # Same subscription, same protocol: hand back the old generation, no rebalance.
            member.join_waiter = None
            out.records.append(
                group_metadata_record(GroupMetadataKey(group.group_id), group.metadata_value())
            )
            result = self._join_result(group, new_member_id, with_members=False)
            if request.api_version >= FIRST_VERSION_SKIPPING_ASSIGNMENT:
                # A restarted leader learns it leads (so it can watch metadata) but must not
                # reassign: a Stable group would not hand a new assignment out anyway.
                if group.is_leader(new_member_id):
                    result.members = group.member_list()
                    result.skip_assignment = True
            else:
                # Older clients would assign if they saw themselves as leader; the old leader id
                # never matches the new member id, so they do not.
                result.leader = previous_leader
            out.reply(reply_to, result)
        elif group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            # In CompletingRebalance the leader may be assigning to the old member id: start over.
            self._prepare_rebalance(group, now_ms, out)

    def _join_result(self, group: ClassicGroup, member_id: str, with_members: bool) -> JoinGroupResult:
        return JoinGroupResult(
            error_code=ErrorCode.NONE,
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=group.member_list() if with_members else [],
        )

    # --- rebalancing ---------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None:
        if group.state in CAN_REBALANCE:
            self._prepare_rebalance(group, now_ms, out)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None:
        if group.is_in(_S.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.sync_waiter is not None:
                    out.reply(member.sync_waiter.reply_to, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
                    member.sync_waiter = None
                    member.session_deadline_ms = now_ms + member.session_timeout_ms
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        initial_delay = self.config.group_initial_rebalance_delay_ms
        if group.is_in(_S.EMPTY) and initial_delay > 0:
            # A new group waits for more members before the first assignment, so a fleet starting
            # together gets one rebalance instead of one per member.
            group.initial_delay_ms = initial_delay
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - initial_delay, 0)
            group.join_deadline_ms = now_ms + initial_delay
        else:
            group.initial_delay_remaining_ms = None
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.new_member_added = False
        group.transition(_S.PREPARING_REBALANCE, now_ms)
        self._try_complete_join(group, now_ms, out)

    def _try_complete_join(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None:
        if (
            group.is_in(_S.PREPARING_REBALANCE)
            and group.initial_delay_remaining_ms is None
            and group.all_members_joined()
        ):
            self._complete_join(group, now_ms, out)

    def _join_deadline_passed(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None:
        remaining = group.initial_delay_remaining_ms
        if remaining is not None and group.new_member_added and remaining > 0:
            # Someone joined during the delay: wait once more, never beyond the rebalance timeout.
            group.new_member_added = False
            delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = max(remaining - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.join_deadline_ms = now_ms + delay
            return
        self._complete_join(group, now_ms, out)

    def _complete_join(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None:
        group.join_deadline_ms = None
        group.initial_delay_remaining_ms = None
        # Dynamic members that did not rejoin in time are gone; static ones keep their place until
        # their session expires, so a slow restart does not cost them their assignment.
        for member in list(group.members.values()):
            if member.join_waiter is None and member.group_instance_id is None:
                group.remove(member.member_id)
        if not group.elect_joined_leader() and group.members:
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = None
            group.transition(_S.EMPTY, now_ms)
            out.records.append(
                group_metadata_record(GroupMetadataKey(group.group_id), group.metadata_value())
            )
            return
        group.protocol_name = group.select_protocol()
        group.refresh_subscribed_topics()
        group.transition(_S.COMPLETING_REBALANCE, now_ms)
        for member in group.members.values():
            if member.join_waiter is not None:
                result = self._join_result(group, member.member_id, group.is_leader(member.member_id))
                out.reply(member.join_waiter.reply_to, result)
                member.join_waiter = None
            member.is_new = False
            member.session_deadline_ms = now_ms + member.session_timeout_ms
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()

    def _remove_member(self, group: ClassicGroup, member: Member, now_ms: int, out: Outcome) -> None:
        """Drop a member (left, expired or fenced) and let the rest of the group rebalance."""
        if member.join_waiter is not None:
            out.reply(member.join_waiter.reply_to, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, NO_MEMBER_ID))
            member.join_waiter = None
        if member.sync_waiter is not None:
            out.reply(member.sync_waiter.reply_to, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            member.sync_waiter = None
        group.remove(member.member_id)
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms, out)
        else:
            self._try_complete_join(group, now_ms, out)

    def _forget_if_unused(self, group: ClassicGroup) -> None:
        # A join refused before anything happened must not leave a husk of a group behind.
        if (
            group.is_in(_S.EMPTY)
            and group.generation_id == 0
            and not group.members
            and not group.pending_members
            and not group.offsets
            and group.group_id not in self.settings
        ):
            self.groups.pop(group.group_id, None)

    # --- SyncGroup -----------------------------------------------------------------------------

    def sync_group(self, request: SyncGroup, now_ms: int, reply_to: Hashable) -> Outcome:
        out = self._sync_group(request, now_ms, reply_to)
        group = self.groups.get(request.group_id)
        rewind = self.rewinds.get(request.group_id)
        if group is not None and rewind is not None and group.is_in(_S.STABLE) and not group.pending_sync:
            if rewind.stripped and group.generation_id == rewind.strip_generation:
                # Everyone gave the rewound partitions up: hand them back; owners fetch the new offsets.
                self._prepare_rebalance(group, now_ms, out)
            elif group.generation_id > rewind.strip_generation:
                del self.rewinds[request.group_id]
        return out

    def _sync_group(self, request: SyncGroup, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        out = Outcome()
        group = self.groups.get(request.group_id)
        error = self._sync_error(group, request)
        if error is not ErrorCode.NONE or group is None:
            out.reply(reply_to, SyncGroupResult(error))
            return out
        member = group.members[request.member_id]
        group.pending_sync.discard(member.member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None
        if group.is_in(_S.STABLE):
            member.session_deadline_ms = now_ms + member.session_timeout_ms
            out.reply(reply_to, self._sync_result(group, member))
            return out
        if member.sync_waiter is not None:
            out.reply(member.sync_waiter.reply_to, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_waiter = Waiter(reply_to)
        if group.is_leader(member.member_id):
            assignments = {a.member_id: a.assignment for a in request.assignments}
            for each in group.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            rewind = self.rewinds.get(group.group_id)
            if rewind is not None and group.generation_id >= rewind.strip_generation and not rewind.stripped:
                for each in group.members.values():
                    each.assignment = strip_assignment(each.assignment, rewind.partitions)
                rewind.stripped = True
                rewind.strip_generation = group.generation_id
            out.records.append(
                group_metadata_record(GroupMetadataKey(group.group_id), group.metadata_value())
            )
            group.transition(_S.STABLE, now_ms)
            for each in group.members.values():
                if each.sync_waiter is not None:
                    out.reply(each.sync_waiter.reply_to, self._sync_result(group, each))
                    each.sync_waiter = None
                    each.session_deadline_ms = now_ms + each.session_timeout_ms
        return out

    def _sync_error(self, group: ClassicGroup | None, request: SyncGroup) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        # KIP-559: a client that says which protocol it synced for must agree with the group.
        if request.protocol_type is not None and request.protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if request.protocol_name is not None and request.protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if group.is_in(_S.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(_S.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    @staticmethod
    def _sync_result(group: ClassicGroup, member: Member) -> SyncGroupResult:
        return SyncGroupResult(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol_name)

    # --- Heartbeat and LeaveGroup --------------------------------------------------------------

    def heartbeat(self, request: Heartbeat, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        out = Outcome()
        group = self.groups.get(request.group_id)
        if not request.group_id:
            error = ErrorCode.INVALID_GROUP_ID
        elif group is None:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        else:
            error = group.validate_member(request.member_id, request.group_instance_id)
            if error is ErrorCode.NONE and request.generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            if error is ErrorCode.NONE:
                error = HEARTBEAT_ERROR[group.state]
                member = group.members[request.member_id]
                member.session_deadline_ms = now_ms + member.session_timeout_ms
        out.reply(reply_to, HeartbeatResult(error))
        return out

    def leave_group(self, request: LeaveGroup, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        out = Outcome()
        if not request.group_id:
            out.reply(reply_to, LeaveGroupResult(ErrorCode.INVALID_GROUP_ID))
            return out
        group = self.groups.get(request.group_id)
        responses = []
        for identity in request.members:
            if group is None:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                error = self._leave_one(group, identity.member_id, identity.group_instance_id, now_ms, out)
            responses.append(MemberResponse(identity.member_id, identity.group_instance_id, error))
        out.reply(reply_to, LeaveGroupResult(ErrorCode.NONE, responses))
        self._reap_ephemeral(now_ms, out)
        return out

    def _leave_one(
        self, group: ClassicGroup, member_id: str, group_instance_id: str | None, now_ms: int, out: Outcome
    ) -> ErrorCode:
        if member_id == NO_MEMBER_ID:
            # Administrative removal by instance id (kafka-consumer-groups --remove-members).
            current = group.static_members.get(group_instance_id) if group_instance_id is not None else None
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_member(group, group.members[current], now_ms, out)
            return ErrorCode.NONE
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._try_complete_join(group, now_ms, out)
            return ErrorCode.NONE
        error = group.validate_member(member_id, group_instance_id)
        if error is ErrorCode.NONE:
            self._remove_member(group, group.members[member_id], now_ms, out)
        return error

    # --- KIP-848 consumer groups ---------------------------------------------------------------

    def consumer_group_heartbeat(
        self, request: ConsumerGroupHeartbeat, now_ms: int, reply_to: Hashable
    ) -> Outcome:
        self._arm_offsets_check(now_ms)
        out = Outcome()
        classic = self.groups.get(request.group_id)
        if classic is not None:
            idle = classic.is_in(_S.EMPTY) and not classic.members and not classic.pending_members
            if not idle:
                out.reply(reply_to, ConsumerGroupHeartbeatResult(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group.",
                    member_epoch=request.member_epoch))
                return out
            if request.member_epoch != JOIN_EPOCH:
                # A member from before a restart: KIP-848 membership is not persisted and the group's
                # offsets came back as an idle classic group. UNKNOWN_MEMBER_ID makes it rejoin with
                # epoch 0 (GROUP_ID_NOT_FOUND would be fatal to the client).
                out.reply(reply_to, ConsumerGroupHeartbeatResult(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in the group",
                    member_epoch=request.member_epoch))
                return out
            # An idle classic group (or one that only has offsets) becomes a consumer group, keeping
            # its offsets; its group record goes so that a restart does not bring the classic one back.
            del self.groups[request.group_id]
            self.consumer.groups[request.group_id] = ConsumerGroup(request.group_id, offsets=classic.offsets)
            out.records.append(group_metadata_record(GroupMetadataKey(request.group_id), None))
        result = self.consumer.heartbeat(request, now_ms)
        group = self.consumer.groups.get(request.group_id)
        failed = result.error_code is not ErrorCode.NONE
        if failed and classic is not None and group is not None and group.is_empty():
            # The join that converted the group failed: give the offsets back to the classic group.
            del self.consumer.groups[request.group_id]
            self.groups[request.group_id] = classic
            out.records.clear()
        out.reply(reply_to, result)
        self._reap_ephemeral(now_ms, out)
        return out

    def consumer_group_describe(
        self, request: ConsumerGroupDescribe, now_ms: int, reply_to: Hashable
    ) -> Outcome:
        described = []
        for group_id in request.group_ids:
            group = self.consumer.groups.get(group_id)
            if group is not None:
                described.append(self.consumer.describe(group))
            elif group_id in self.groups:
                described.append(ConsumerGroupDescribedGroup(
                    ErrorCode.GROUP_ID_NOT_FOUND, group_id, f"Group {group_id} is not a consumer group."))
            else:
                described.append(ConsumerGroupDescribedGroup(
                    ErrorCode.GROUP_ID_NOT_FOUND, group_id, f"Group {group_id} not found."))
        return Outcome([(reply_to, ConsumerGroupDescribeResult(described))])

    # --- offsets and administration ------------------------------------------------------------

    def offset_commit(self, request: OffsetCommit, now_ms: int, reply_to: Hashable) -> Outcome:
        fenced = self._fenced(request.group_id)
        if not fenced:
            return self._offset_commit(request, now_ms, reply_to)
        allowed, refused = split_fenced(request, fenced)
        out = self._offset_commit(allowed, now_ms, reply_to)
        out.replies = [(token, merge_refused(result, refused)) for token, result in out.replies]
        return out

    def _offset_commit(self, request: OffsetCommit, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        limit = self.config.offset_metadata_max_bytes
        consumer_group = self.consumer.groups.get(request.group_id)
        if consumer_group is not None:
            error = self.consumer.commit_error(consumer_group, request)
            if error is not ErrorCode.NONE:
                return Outcome([(reply_to, offsets.commit_refused(request, error))])
            result, records = offsets.write_offsets(
                consumer_group.group_id, consumer_group.offsets, request, now_ms, limit)
            return Outcome([(reply_to, result)], records)
        result, records = offsets.commit_offsets(self.groups, request, now_ms, limit)
        return Outcome([(reply_to, result)], records)

    def txn_commit_error(self, request: OffsetCommit) -> ErrorCode:
        """KIP-447: may this member commit offsets inside a transaction? A group the coordinator does not
        know accepts commits without membership (a producer that is not a group member)."""
        consumer_group = self.consumer.groups.get(request.group_id)
        if consumer_group is not None:
            return self.consumer.commit_error(consumer_group, request)
        group = self.groups.get(request.group_id)
        if group is None:
            return ErrorCode.NONE if request.generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        # An Empty group accepts commits without membership as in OffsetCommit; a member's are checked.
        return offsets._commit_error(group, request)

    def write_txn_offsets(self, request: OffsetCommit, now_ms: int) -> list[PersistRecord]:
        """Make a committed transaction's offsets visible (they were validated at TxnOffsetCommit)."""
        limit = self.config.offset_metadata_max_bytes
        consumer_group = self.consumer.groups.get(request.group_id)
        if consumer_group is not None:
            return offsets.write_offsets(consumer_group.group_id, consumer_group.offsets, request, now_ms, limit)[1]
        group = self.groups.get(request.group_id)
        if group is None:
            group = self.groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp_ms=now_ms)
        return offsets.write_offsets(group.group_id, group.offsets, request, now_ms, limit)[1]

    def offset_fetch(self, request: OffsetFetch, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        every_group: Mapping[str, offsets.HasOffsets] = ChainMap(self.consumer.groups, self.groups)  # type: ignore[arg-type]
        return Outcome([(reply_to, offsets.fetch_offsets(every_group, request))])

    def offset_delete(self, request: OffsetDelete, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        consumer_group = self.consumer.groups.get(request.group_id)
        if consumer_group is not None:
            result, records = offsets.delete_consumer_group_offsets(consumer_group, request)
            return Outcome([(reply_to, result)], records)
        result, records = offsets.delete_offsets(self.groups, request)
        return Outcome([(reply_to, result)], records)

    def list_groups(self, request: ListGroups, now_ms: int, reply_to: Hashable) -> Outcome:
        result = admin.list_groups(self.groups, request)
        states = {s.lower() for s in request.states_filter}
        types = {t.lower() for t in request.types_filter}
        result.groups += [
            ListedGroup(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state, CONSUMER_GROUP_TYPE)
            for g in self.consumer.groups.values()
            if (not states or g.state.lower() in states) and (not types or CONSUMER_GROUP_TYPE in types)
        ]
        result.groups.sort(key=lambda g: g.group_id)
        return Outcome([(reply_to, result)])

    def describe_groups(self, request: DescribeGroups, now_ms: int, reply_to: Hashable) -> Outcome:
        result = admin.describe_groups(self.groups, request)
        for index, group_id in enumerate(request.groups):
            if group_id in self.consumer.groups:
                # As Kafka: the classic describe does not describe a KIP-848 group (v6+ says why).
                result.groups[index] = DescribedGroup(
                    ErrorCode.NONE, group_id, GroupState.DEAD.value, "", "",
                    error_message=f"Group {group_id} is not a classic group.")
        return Outcome([(reply_to, result)])

    def delete_groups(self, request: DeleteGroups, now_ms: int, reply_to: Hashable) -> Outcome:
        classic_ids = [g for g in request.groups_names if g not in self.consumer.groups]
        classic_result, records = admin.delete_groups(self.groups, DeleteGroups(classic_ids), now_ms)
        answers = {r.group_id: r for r in classic_result.results}
        results = []
        for group_id in request.groups_names:
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is None:
                results.append(answers[group_id])
            elif not consumer_group.is_empty():
                results.append(DeletableGroupResult(group_id, ErrorCode.NON_EMPTY_GROUP))
            else:
                del self.consumer.groups[group_id]
                records += offsets.delete_group_records(consumer_group)
                results.append(DeletableGroupResult(group_id, ErrorCode.NONE))
        for result in results:
            if result.error_code is ErrorCode.NONE:
                records += self._forget_group(result.group_id)
        return Outcome([(reply_to, DeleteGroupsResult(results))], records)

    def reset_offsets(
        self, group_id: str, new_offsets: Mapping[tuple[str, int], int], now_ms: int
    ) -> list[PersistRecord]:
        """Admin: set ``(topic, partition) -> offset`` for a group; raises KafkaError(NON_EMPTY_GROUP)
        unless the group is Empty or unknown. The records must be persisted like any Outcome's."""
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            # Same rule for a KIP-848 group; its offsets stay with it rather than in a classic twin.
            return offsets.reset_consumer_group_offsets(consumer_group, new_offsets, now_ms)
        return offsets.reset_offsets(self.groups, group_id, new_offsets, now_ms)

    # --- time ----------------------------------------------------------------------------------

    def _arm_offsets_check(self, now_ms: int) -> None:
        if self._next_offsets_check_ms is None:
            self._next_offsets_check_ms = now_ms + self.config.offsets_retention_check_interval_ms

    def next_deadline(self) -> int | None:
        """The earliest time at which :meth:`tick` has something to do, or None."""
        deadlines: list[int] = []
        for group in self.groups.values():
            deadlines += group.pending_members.values()
            deadlines += (m.session_deadline_ms for m in group.members.values() if m.session_can_expire())
            if group.is_in(_S.PREPARING_REBALANCE) and group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            if group.pending_sync and group.sync_deadline_ms is not None:
                deadlines.append(group.sync_deadline_ms)
        consumer_deadline = self.consumer.next_deadline()
        if consumer_deadline is not None:
            deadlines.append(consumer_deadline)
        if (self.groups or self.consumer.groups) and self._next_offsets_check_ms is not None:
            deadlines.append(self._next_offsets_check_ms)
        deadlines += self._ephemeral_grace.values()
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> Outcome:
        """Fire every timer due at ``now_ms``: sessions, join and sync deadlines, offset expiry."""
        self._arm_offsets_check(now_ms)
        out = Outcome()
        self.consumer.tick(now_ms)
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if deadline <= now_ms:
                    del group.pending_members[member_id]
                    self._try_complete_join(group, now_ms, out)
            for member in list(group.members.values()):
                expired = member.session_can_expire() and member.session_deadline_ms <= now_ms
                if expired and group.members.get(member.member_id) is member:
                    self._remove_member(group, member, now_ms, out)
            if (
                group.is_in(_S.PREPARING_REBALANCE)
                and group.join_deadline_ms is not None
                and group.join_deadline_ms <= now_ms
            ):
                self._join_deadline_passed(group, now_ms, out)
            if group.pending_sync and group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
                # Members that got their JoinGroup answer but never synced are treated as gone.
                for member_id in list(group.pending_sync):
                    group.remove(member_id)
                group.sync_deadline_ms = None
                self._maybe_prepare_rebalance(group, now_ms, out)
        if self._next_offsets_check_ms is not None and self._next_offsets_check_ms <= now_ms:
            self._next_offsets_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            out.records += offsets.expire_offsets(self.groups, now_ms, self.config.offsets_retention_ms)
            out.records += offsets.expire_consumer_group_offsets(
                self.consumer.groups, now_ms, self.config.offsets_retention_ms)
            self._keep_created_groups(now_ms)
        self._reap_ephemeral(now_ms, out)
        return out

    # --- restart -------------------------------------------------------------------------------

    def load(self, records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Rebuild every group from ``__consumer_offsets`` (oldest first; last write wins)."""
        records = list(records)
        self.groups = load_groups(records, now_ms)
        self.settings = load_settings(records)
        self._keep_created_groups(now_ms)
        self._sync_session_timeouts()
        self._resume_ephemeral(now_ms)
        # KIP-848 membership is not persisted (yet): their offsets come back as classic "simple"
        # groups, converted again when the members rejoin.
        self.consumer.groups = {}
        self._next_offsets_check_ms = None
        self._arm_offsets_check(now_ms)
