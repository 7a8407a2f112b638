"""The classic group coordinator, sans-I/O: requests and time go in, replies and records come out.

Every request method takes the decoded request, the current time ``now_ms`` and an opaque hashable
``reply_to`` token, and returns an :class:`Outcome`. A request that must wait (a JoinGroup during a
rebalance, a follower's SyncGroup before the leader's) is simply absent from ``replies``; it comes
out of a later call — another request or :meth:`GroupCoordinator.tick` — paired with its token.
Every token gets exactly one reply eventually. If the requesting connection closed meanwhile, the
caller drops the reply; the coordinator does not need to be told.

Timers are the caller's job too: after each call ask :meth:`next_deadline` and call :meth:`tick`
once the clock reaches it.

Restart: ``__consumer_offsets`` is replayed into a fresh coordinator, one record at a time
(:meth:`apply`), then :meth:`loaded` builds the groups at the time of loading (the state-topic contract:
sluice.state_topic). Groups whose last record has members come
back Stable with those members, their assignments and generation (as Kafka does), each member's
session timer starting at load time: members still running keep heartbeating, rejoin or commit
without noticing the restart, and the ones that are gone expire and trigger a rebalance.
"""

from __future__ import annotations

import uuid
from collections import ChainMap
from collections.abc import Callable, Collection, Hashable, Mapping

from sluice.coordinator import admin, offsets
from sluice.coordinator.classic import ClassicMembership
from sluice.coordinator.consumer_group import ConsumerGroupConfig, ConsumerGroups, random_consumer_member_id
from sluice.coordinator.consumer_group_state import CONSUMER_GROUP_TYPE, JOIN_EPOCH, ConsumerGroup
from sluice.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    GroupState,
)
from sluice.coordinator.management import (
    ClassicRewind,
    GroupManagement,
    GroupSettings,
    apply_settings_record,
    merge_refused,
    split_fenced,
)
from sluice.coordinator.messages import (
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
    ListedGroup,
    ListGroups,
    OffsetCommit,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetFetch,
)
from sluice.coordinator.outcome import CoordinatorConfig, Outcome
from sluice.coordinator.persist import ReplayedGroups
from sluice.coordinator.records import (
    GroupMetadataKey,
    PersistRecord,
    group_metadata_record,
)
from sluice.coordinator.share.calls import ShareGroupCalls
from sluice.coordinator.share.group import ShareGroupConfig, ShareGroups
from sluice.errors import ErrorCode

_S = GroupState


def random_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


class GroupCoordinator(ClassicMembership, GroupManagement, ShareGroupCalls):
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
        config = self.config
        self.share = ShareGroups(
            ShareGroupConfig(
                session_timeout_ms=config.share_group_session_timeout_ms,
                heartbeat_interval_ms=config.share_group_heartbeat_interval_ms,
                max_size=config.share_group_max_size,
                assignment_interval_ms=config.share_group_assignment_interval_ms,
            )
        )
        self._next_offsets_check_ms: int | None = None
        # Groups made by create_group (sluice extension), and live rewinds still fencing commits.
        self.settings: dict[str, GroupSettings] = {}
        self.rewinds: dict[str, ClassicRewind] = {}
        self._ephemeral_joined: set[str] = set()
        # Ephemeral groups whose members a restart lost: deleted unless a member is back by the deadline.
        self._ephemeral_grace: dict[str, int] = {}
        # __consumer_offsets as replayed so far, until `loaded` builds the groups from it.
        self._replayed = ReplayedGroups()
        self._replayed_settings: dict[str, GroupSettings] = {}

    # --- introspection -------------------------------------------------------------------------

    def group_state(self, group_id: str) -> str | None:
        group = self.groups.get(group_id)
        if group is None:
            other = self.consumer.groups.get(group_id) or self.share.groups.get(group_id)
            return None if other is None else other.state
        return group.state.value

    # --- KIP-848 consumer groups ---------------------------------------------------------------

    def consumer_group_heartbeat(
        self, request: ConsumerGroupHeartbeat, now_ms: int, reply_to: Hashable
    ) -> Outcome:
        self._arm_offsets_check(now_ms)
        out = Outcome()
        if (refusal := self.not_a_consumer_group(request.group_id)) is not None:
            out.reply(
                reply_to,
                ConsumerGroupHeartbeatResult(
                    ErrorCode.GROUP_ID_NOT_FOUND, refusal, member_epoch=request.member_epoch
                ),
            )
            return out
        classic = self.groups.get(request.group_id)
        if classic is not None:
            idle = classic.is_in(_S.EMPTY) and not classic.members and not classic.pending_members
            if not idle:
                out.reply(
                    reply_to,
                    ConsumerGroupHeartbeatResult(
                        ErrorCode.GROUP_ID_NOT_FOUND,
                        f"Group {request.group_id} is not a consumer group.",
                        member_epoch=request.member_epoch,
                    ),
                )
                return out
            if request.member_epoch != JOIN_EPOCH:
                # A member from before a restart: KIP-848 membership is not persisted and the group's
                # offsets came back as an idle classic group. UNKNOWN_MEMBER_ID makes it rejoin with
                # epoch 0 (GROUP_ID_NOT_FOUND would be fatal to the client).
                out.reply(
                    reply_to,
                    ConsumerGroupHeartbeatResult(
                        ErrorCode.UNKNOWN_MEMBER_ID,
                        f"member {request.member_id!r} is not in the group",
                        member_epoch=request.member_epoch,
                    ),
                )
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
                described.append(
                    ConsumerGroupDescribedGroup(
                        ErrorCode.GROUP_ID_NOT_FOUND, group_id, f"Group {group_id} is not a consumer group."
                    )
                )
            else:
                described.append(
                    ConsumerGroupDescribedGroup(
                        ErrorCode.GROUP_ID_NOT_FOUND, group_id, f"Group {group_id} not found."
                    )
                )
        return Outcome([(reply_to, ConsumerGroupDescribeResult(described))])

    # --- offsets and administration ------------------------------------------------------------

    def offset_commit(self, request: OffsetCommit, now_ms: int, reply_to: Hashable) -> Outcome:
        if self.not_a_consumer_group(request.group_id) is not None:
            return Outcome([(reply_to, offsets.commit_refused(request, ErrorCode.GROUP_ID_NOT_FOUND))])
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
                consumer_group.group_id, consumer_group.offsets, request, now_ms, limit
            )
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
            return offsets.write_offsets(
                consumer_group.group_id, consumer_group.offsets, request, now_ms, limit
            )[1]
        group = self.groups.get(request.group_id)
        if group is None:
            group = self.groups[request.group_id] = ClassicGroup(request.group_id, state_timestamp_ms=now_ms)
        return offsets.write_offsets(group.group_id, group.offsets, request, now_ms, limit)[1]

    def offset_fetch(self, request: OffsetFetch, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        every_group: Mapping[str, offsets.HasOffsets] = ChainMap(self.consumer.groups, self.groups)  # type: ignore[arg-type]
        result = offsets.fetch_offsets(every_group, request)
        for group in result.groups:
            if self.not_a_consumer_group(group.group_id) is not None:
                group.error_code = ErrorCode.GROUP_ID_NOT_FOUND
        return Outcome([(reply_to, result)])

    def offset_delete(self, request: OffsetDelete, now_ms: int, reply_to: Hashable) -> Outcome:
        self._arm_offsets_check(now_ms)
        if self.not_a_consumer_group(request.group_id) is not None:
            return Outcome([(reply_to, OffsetDeleteResult(ErrorCode.GROUP_ID_NOT_FOUND))])
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
        result.groups += self.listed_share_groups(states, types)
        result.groups.sort(key=lambda g: g.group_id)
        return Outcome([(reply_to, result)])

    def describe_groups(self, request: DescribeGroups, now_ms: int, reply_to: Hashable) -> Outcome:
        result = admin.describe_groups(self.groups, request)
        for index, group_id in enumerate(request.groups):
            if group_id in self.consumer.groups or group_id in self.share.groups:
                # As Kafka: the classic describe does not describe a KIP-848 group (v6+ says why).
                result.groups[index] = DescribedGroup(
                    ErrorCode.NONE,
                    group_id,
                    GroupState.DEAD.value,
                    "",
                    "",
                    error_message=f"Group {group_id} is not a classic group.",
                )
        return Outcome([(reply_to, result)])

    def delete_groups(self, request: DeleteGroups, now_ms: int, reply_to: Hashable) -> Outcome:
        classic_ids = [
            g for g in request.groups_names if g not in self.consumer.groups and g not in self.share.groups
        ]
        classic_result, records = admin.delete_groups(self.groups, DeleteGroups(classic_ids), now_ms)
        answers = {r.group_id: r for r in classic_result.results}
        results = []
        for group_id in request.groups_names:
            consumer_group = self.consumer.groups.get(group_id)
            if group_id in self.share.groups:
                error, share_records = self.delete_share_group(group_id)
                records += share_records
                results.append(DeletableGroupResult(group_id, error))
            elif consumer_group is None:
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

    def topics_deleted(self, topics: Collection[str], now_ms: int) -> Outcome:
        """DeleteTopics removed `topics`: tombstones for the offsets every group committed on them."""
        self._arm_offsets_check(now_ms)  # a group left Empty without offsets goes at that check
        every_group = [*self.groups.values(), *self.consumer.groups.values()]
        return Outcome(records=offsets.forget_topics(every_group, frozenset(topics)))

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
        for deadline in (self.consumer.next_deadline(), self.share.next_deadline()):
            if deadline is not None:
                deadlines.append(deadline)
        if (self.groups or self.consumer.groups) and self._next_offsets_check_ms is not None:
            deadlines.append(self._next_offsets_check_ms)
        deadlines += self._ephemeral_grace.values()
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> Outcome:
        """Fire every timer due at ``now_ms``: sessions, join and sync deadlines, offset expiry."""
        self._arm_offsets_check(now_ms)
        out = Outcome()
        self.consumer.tick(now_ms)
        # A share member whose session ended leaves the group; what it holds is released by its share
        # session (closed with its connection) or by lock expiry, as Kafka does.
        self.share.tick(now_ms)
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
                self.consumer.groups, now_ms, self.config.offsets_retention_ms
            )
            self._keep_created_groups(now_ms)
        self._reap_ephemeral(now_ms, out)
        return out

    # --- restart -------------------------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Replay one ``__consumer_offsets`` record (oldest first; last write wins). A record without a key
        carries no state."""
        if key is None:
            return
        apply_settings_record(self._replayed_settings, key, value)
        self._replayed.apply(key, value)

    def loaded(self, now_ms: int) -> list[tuple[bytes, bytes | None]]:
        """The whole log is replayed: rebuild every group from it, its timers starting at ``now_ms``. No
        record to append."""
        self.groups = self._replayed.groups(now_ms)
        self.load_share_groups(self._replayed.share_groups())
        self.settings = self._replayed_settings
        self._replayed, self._replayed_settings = ReplayedGroups(), {}
        self._keep_created_groups(now_ms)
        self._sync_session_timeouts()
        self._resume_ephemeral(now_ms)
        # KIP-848 membership is not persisted (yet): their offsets come back as classic "simple"
        # groups, converted again when the members rejoin.
        self.consumer.groups = {}
        self._next_offsets_check_ms = None
        self._arm_offsets_check(now_ms)
        return []
