"""The classic group protocol's membership engine (Kafka's GroupCoordinator join/sync/heartbeat/leave and
rebalance logic), mixed into sluice.coordinator.coordinator.GroupCoordinator, which owns the state named
below, the timers and the offsets. Sans-I/O: requests and time in, an `Outcome` out.

A JoinGroup during a rebalance, or a follower's SyncGroup before the leader's, is parked: its reply comes
out of a later call, paired with its token.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.coordinator.consumer_group import ConsumerGroups
from sluice.coordinator.group import (
    CAN_REBALANCE,
    HEARTBEAT_ERROR,
    ClassicGroup,
    GroupState,
    Member,
    Waiter,
)
from sluice.coordinator.management import (
    ClassicRewind,
    GroupSettings,
    strip_assignment,
)
from sluice.coordinator.messages import (
    NO_MEMBER_ID,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    MemberResponse,
    SyncGroup,
    SyncGroupResult,
)
from sluice.coordinator.outcome import CoordinatorConfig, Outcome
from sluice.coordinator.records import (
    GroupMetadataKey,
    group_metadata_record,
)
from sluice.coordinator.share.group import ShareGroups
from sluice.errors import ErrorCode

_S = GroupState
# From JoinGroup v4 a member without an id is given one and must come back with it (KIP-394).
FIRST_VERSION_REQUIRING_MEMBER_ID = 4
# From JoinGroup v9 a rejoining static leader may keep its assignment (KIP-814).
FIRST_VERSION_SKIPPING_ASSIGNMENT = 9


class ClassicMembership:
    config: CoordinatorConfig
    groups: dict[str, ClassicGroup]
    consumer: ConsumerGroups
    share: ShareGroups
    settings: dict[str, GroupSettings]
    rewinds: dict[str, ClassicRewind]
    _new_member_id: Callable[[str], str]

    if TYPE_CHECKING:

        def _arm_offsets_check(self, now_ms: int) -> None: ...
        def _reap_ephemeral(self, now_ms: int, out: Outcome) -> None: ...

    # --- JoinGroup -----------------------------------------------------------------------------

    def join_group(self, request: JoinGroup, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        out = Outcome()
        settings = self.settings.get(request.group_id)
        if (
            settings is not None
            and settings.session_timeout_ms is not None
            and not (
                self.config.group_min_session_timeout_ms
                <= request.session_timeout_ms
                <= self.config.group_max_session_timeout_ms
            )
        ):
            # A created group's session timeout is what a member gets when it asks for none that fits.
            request = replace(request, session_timeout_ms=settings.session_timeout_ms)
        if request.rebalance_timeout_ms < 0:  # JoinGroup v0 has none: the session timeout serves
            request = replace(request, rebalance_timeout_ms=request.session_timeout_ms)
        error = self._join_precheck(request)
        if error is not ErrorCode.NONE:
            out.reply(reply_to, JoinGroupResult(error, request.member_id))
            return out
        if request.group_id in self.share.groups:
            # A share group's id: Kafka answers as for a group speaking another protocol.
            out.reply(reply_to, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, NO_MEMBER_ID))
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
