"""Group management that Kafka's protocol has no API for (pure: no I/O, no clock).

* Groups created ahead of their members, with a default session timeout and an ephemeral flag. Their
  settings persist in ``__consumer_offsets`` as sluice's own record type: key = int16 record type
  ``SETTINGS_KEY_TYPE`` + int16 length + UTF-8 group id, value = int16 version 0 + a JSON object.
  Kafka's record types are 0-2 (and 3+ for KIP-848 records); the classic loader skips types it does
  not own, so Kafka tools reading the topic ignore these records too. A tombstone deletes the settings.
* Live rewinds: offsets written into a group that has members, plus the fence that keeps members from
  committing their old positions over them until they have re-read the new ones (see
  :class:`ClassicRewind` and ``ConsumerGroup.withheld``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.coordinator import offsets
from sluice.coordinator.consumer_group import ConsumerGroups
from sluice.coordinator.consumer_group_state import CONSUMER_GROUP_TYPE
from sluice.coordinator.group import ClassicGroup, GroupState, Member
from sluice.coordinator.messages import (
    OffsetCommit,
    OffsetCommitResult,
    OffsetCommitTopic,
    PartitionResult,
    TopicResult,
)
from sluice.coordinator.outcome import CoordinatorConfig, Outcome
from sluice.coordinator.records import OffsetCommitKey, OffsetCommitValue, PersistRecord, offset_commit_record
from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.messages import struct_codecs
from sluice.protocol.primitives import DecodeError

# "sl" in ASCII: far above Kafka's record types, so no Kafka version will reuse it.
SETTINGS_KEY_TYPE = 0x736C
SETTINGS_VALUE_VERSION = 0
_SHORT = struct.Struct(">h")
_ASSIGNMENT = struct_codecs("ConsumerProtocolAssignment")
_NEWEST_ASSIGNMENT = max(_ASSIGNMENT.message.valid)


@dataclass(slots=True, frozen=True)
class GroupSettings:
    """What `sluice groups create` set: the members' default session timeout and the ephemeral flag."""

    session_timeout_ms: int | None = None
    ephemeral: bool = False


def settings_key(group_id: str) -> bytes:
    name = group_id.encode()
    return _SHORT.pack(SETTINGS_KEY_TYPE) + _SHORT.pack(len(name)) + name


def settings_record(group_id: str, settings: GroupSettings | None) -> PersistRecord:
    if settings is None:
        return PersistRecord(settings_key(group_id), None)
    body = json.dumps({"session_timeout_ms": settings.session_timeout_ms, "ephemeral": settings.ephemeral})
    return PersistRecord(settings_key(group_id), _SHORT.pack(SETTINGS_VALUE_VERSION) + body.encode())


def apply_settings_record(settings: dict[str, GroupSettings], key: bytes, value: bytes | None) -> None:
    """Fold one ``__consumer_offsets`` record into `settings` if it is a settings record (last write wins).
    Unreadable settings records are skipped rather than failing the broker's start."""
    if len(key) < 4 or _SHORT.unpack_from(key)[0] != SETTINGS_KEY_TYPE:
        return
    (length,) = _SHORT.unpack_from(key, 2)
    try:
        group_id = key[4 : 4 + length].decode()
    except UnicodeDecodeError:
        return
    if value is None:
        settings.pop(group_id, None)
        return
    try:
        raw = json.loads(value[_SHORT.size :])
        timeout = raw.get("session_timeout_ms")
        settings[group_id] = GroupSettings(int(timeout) if timeout is not None else None, bool(raw.get("ephemeral")))
    except (ValueError, AttributeError, TypeError):
        return


# --- live rewind ---------------------------------------------------------------------------------


@dataclass(slots=True)
class ClassicRewind:
    """A live rewind of a classic group, in two generations.

    Generation ``strip_generation`` hands out the leader's assignment minus the rewound partitions, so
    every member gives them up, cooperative assignors included (a cooperative member keeps its position
    for partitions it keeps, and would never re-read the committed offset). Once every member synced
    that generation the coordinator starts the next rebalance; in ``release_generation`` the partitions
    come back and their new owners fetch the committed (rewound) offsets. Until then, commits to the
    rewound partitions are refused: they would carry the old positions.
    """

    partitions: frozenset[tuple[str, int]]
    strip_generation: int
    stripped: bool = False


def strip_assignment(assignment: bytes, drop: frozenset[tuple[str, int]]) -> bytes:
    """A consumer-protocol assignment without the partitions in `drop`; unknown formats pass unchanged."""
    if not assignment:
        return assignment
    try:
        (version,) = _SHORT.unpack_from(assignment)
        if version < 0:
            return assignment
        codec = _ASSIGNMENT[min(version, _NEWEST_ASSIGNMENT)]
        decoded, _ = codec.decode(assignment, _SHORT.size)
    except (struct.error, DecodeError):
        return assignment
    kept = []
    for topic in decoded.assigned_partitions:
        partitions = [p for p in topic.partitions if (topic.topic, p) not in drop]
        if partitions:
            topic.partitions = partitions
            kept.append(topic)
    decoded.assigned_partitions = kept
    return _SHORT.pack(version) + codec.encode(decoded)


def split_fenced(
    request: OffsetCommit, fenced: frozenset[tuple[str, int]]
) -> tuple[OffsetCommit, list[TopicResult]]:
    """The commit without fenced partitions, and REBALANCE_IN_PROGRESS answers for the fenced ones."""
    allowed: list[OffsetCommitTopic] = []
    refused: list[TopicResult] = []
    for topic in request.topics:
        keep = [p for p in topic.partitions if (topic.name, p.partition_index) not in fenced]
        drop = [p for p in topic.partitions if (topic.name, p.partition_index) in fenced]
        if keep:
            allowed.append(OffsetCommitTopic(topic.name, keep))
        if drop:
            refused.append(
                TopicResult(topic.name, [PartitionResult(p.partition_index, ErrorCode.REBALANCE_IN_PROGRESS) for p in drop])
            )
    trimmed = OffsetCommit(
        request.group_id, allowed, request.generation_id, request.member_id, request.group_instance_id,
        request.retention_time_ms,
    )
    return trimmed, refused


def merge_refused(result: OffsetCommitResult, refused: list[TopicResult]) -> OffsetCommitResult:
    by_name = {t.name: t for t in result.topics}
    for topic in refused:
        if topic.name in by_name:
            by_name[topic.name].partitions += topic.partitions
        else:
            result.topics.append(topic)
    return result



class GroupManagement:
    """The coordinator's operations for sluice's admin API, mixed into GroupCoordinator (which owns the
    state named below and the rebalance machinery these call)."""

    config: CoordinatorConfig
    groups: dict[str, ClassicGroup]
    consumer: ConsumerGroups
    settings: dict[str, GroupSettings]
    rewinds: dict[str, ClassicRewind]
    _ephemeral_joined: set[str]
    _ephemeral_grace: dict[str, int]

    if TYPE_CHECKING:

        def _remove_member(self, group: ClassicGroup, member: Member, now_ms: int, out: Outcome) -> None: ...
        def _prepare_rebalance(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None: ...
        def reset_offsets(
            self, group_id: str, new_offsets: Mapping[tuple[str, int], int], now_ms: int
        ) -> list[PersistRecord]: ...

    def create_group(
        self, group_id: str, session_timeout_ms: int | None, ephemeral: bool, now_ms: int
    ) -> Outcome | None:
        """A group before any member joins; None if a group of that name exists already."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "a group needs a name")
        config = self.config
        if session_timeout_ms is not None and not (
            config.group_min_session_timeout_ms <= session_timeout_ms <= config.group_max_session_timeout_ms
        ):
            raise KafkaError(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout must lie in [{config.group_min_session_timeout_ms}, "
                f"{config.group_max_session_timeout_ms}] ms",
            )
        if group_id in self.settings or group_id in self.groups or group_id in self.consumer.groups:
            return None
        settings = self.settings[group_id] = GroupSettings(session_timeout_ms, ephemeral)
        self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        self._sync_session_timeouts()
        return Outcome([], [settings_record(group_id, settings)])

    def delete_group(self, group_id: str, force: bool, now_ms: int) -> Outcome:
        """Delete a group with its offsets; one with members only with ``force`` (they are dropped and
        find out at their next heartbeat)."""
        out = Outcome()
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        if group is None and consumer_group is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        if group is not None:
            if (group.members or group.pending_members) and not force:
                raise KafkaError(
                    ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has {len(group.members)} member(s)")
            for member in list(group.members.values()):
                self._remove_member(group, member, now_ms, out)
            group.pending_members.clear()
            del self.groups[group_id]
            out.records += offsets.delete_group_records(group)
        if consumer_group is not None:
            if not consumer_group.is_empty() and not force:
                raise KafkaError(
                    ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has {len(consumer_group.members)} member(s)")
            del self.consumer.groups[group_id]
            out.records += offsets.delete_group_records(consumer_group)
        out.records += self._forget_group(group_id)
        return out

    def rewind(
        self, group_id: str, new_offsets: Mapping[tuple[str, int], int], live: bool, now_ms: int
    ) -> Outcome:
        """Commit ``new_offsets`` for a group. Without ``live`` the group must have no members (Kafka's
        rule). With ``live`` running members are made to re-read from them: a classic group rebalances
        twice (see ClassicRewind), a KIP-848 group has the partitions revoked and assigned again."""
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        busy = (group is not None and not group.is_in(GroupState.EMPTY)) or (
            consumer_group is not None and not consumer_group.is_empty())
        if not live or not busy:
            return Outcome([], self.reset_offsets(group_id, new_offsets, now_ms))
        out = Outcome()
        partitions = frozenset(new_offsets)
        target = consumer_group if consumer_group is not None else group
        assert target is not None
        for (topic, partition), offset in sorted(new_offsets.items()):
            value = OffsetCommitValue(offset, -1, "", now_ms)
            target.offsets[(topic, partition)] = value
            out.records.append(offset_commit_record(OffsetCommitKey(group_id, topic, partition), value))
        if consumer_group is not None:
            self.consumer.withhold(consumer_group, partitions)
            return out
        assert group is not None
        previous = self.rewinds.get(group_id)
        if previous is not None:
            partitions |= previous.partitions
        # The generation the next rebalance creates is the one that hands the partitions out stripped.
        self.rewinds[group_id] = ClassicRewind(partitions, group.generation_id + 1)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, out)
        return out

    def group_overview(self) -> list[dict[str, object]]:
        """Every group with its sluice settings, for the admin API."""
        rows: list[dict[str, object]] = []
        for group_id in sorted(set(self.groups) | set(self.consumer.groups)):
            settings = self.settings.get(group_id)
            classic = self.groups.get(group_id)
            members = len(classic.members) if classic is not None else len(self.consumer.groups[group_id].members)
            rows.append({
                "name": group_id,
                "type": "classic" if classic is not None else CONSUMER_GROUP_TYPE,
                "state": classic.state.value if classic is not None else self.consumer.groups[group_id].state,
                "members": members,
                "created": settings is not None,
                "session_timeout_ms": settings.session_timeout_ms if settings else None,
                "ephemeral": settings.ephemeral if settings else False,
            })
        return rows

    def _fenced(self, group_id: str) -> frozenset[tuple[str, int]]:
        rewind = self.rewinds.get(group_id)
        if rewind is not None:
            return rewind.partitions
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None and consumer_group.withheld:
            names = consumer_group.topic_names()
            return frozenset((names.get(tid, ""), p) for tid, p in consumer_group.withheld)
        return frozenset()

    def _forget_group(self, group_id: str) -> list[PersistRecord]:
        self.rewinds.pop(group_id, None)
        self._ephemeral_joined.discard(group_id)
        self._ephemeral_grace.pop(group_id, None)
        if self.settings.pop(group_id, None) is None:
            return []
        self._sync_session_timeouts()
        return [settings_record(group_id, None)]

    def _keep_created_groups(self, now_ms: int) -> None:
        # A created group stays listed with no members and no offsets, until deleted.
        for group_id in self.settings:
            if group_id not in self.groups and group_id not in self.consumer.groups:
                self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)

    def _sync_session_timeouts(self) -> None:
        self.consumer.group_session_timeouts = {
            gid: s.session_timeout_ms for gid, s in self.settings.items() if s.session_timeout_ms is not None
        }

    def _resume_ephemeral(self, now_ms: int) -> None:
        """After a restart. Classic members come back from their records and expire as usual, so such a
        group counts as joined. KIP-848 membership is not persisted, and a group left with only offsets
        may have lost its members with the broker: it waits one session timeout for a member to return
        (live consumers rejoin within a heartbeat) and is deleted if none does."""
        self._ephemeral_joined = set()
        self._ephemeral_grace = {}
        for group_id, settings in self.settings.items():
            group = self.groups.get(group_id)
            if not settings.ephemeral or group is None:
                continue
            if group.members:
                self._ephemeral_joined.add(group_id)
            elif group.offsets:
                wait = settings.session_timeout_ms or self.config.consumer_group_session_timeout_ms
                self._ephemeral_grace[group_id] = now_ms + wait

    def _reap_ephemeral(self, now_ms: int, out: Outcome) -> None:
        """Delete each ephemeral group, with its offsets, once the last member that joined has left."""
        for group_id, settings in list(self.settings.items()):
            if not settings.ephemeral:
                continue
            group = self.groups.get(group_id)
            consumer_group = self.consumer.groups.get(group_id)
            occupied = (group is not None and bool(group.members or group.pending_members)) or (
                consumer_group is not None and not consumer_group.is_empty()
            )
            grace = self._ephemeral_grace.get(group_id)
            if occupied:
                self._ephemeral_joined.add(group_id)
                self._ephemeral_grace.pop(group_id, None)
            elif group_id in self._ephemeral_joined or (grace is not None and grace <= now_ms):
                out.records += self.delete_group(group_id, False, now_ms).records

