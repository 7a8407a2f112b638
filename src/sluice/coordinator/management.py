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
from collections.abc import Iterable
from dataclasses import dataclass

from sluice.coordinator.messages import (
    OffsetCommit,
    OffsetCommitResult,
    OffsetCommitTopic,
    PartitionResult,
    TopicResult,
)
from sluice.coordinator.records import PersistRecord
from sluice.errors import ErrorCode
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


def load_settings(records: Iterable[tuple[bytes, bytes | None]]) -> dict[str, GroupSettings]:
    """The settings records among ``__consumer_offsets`` records (oldest first; last write wins).
    Unreadable settings records are skipped rather than failing the broker's start."""
    out: dict[str, GroupSettings] = {}
    for key, value in records:
        if len(key) < 4 or _SHORT.unpack_from(key)[0] != SETTINGS_KEY_TYPE:
            continue
        (length,) = _SHORT.unpack_from(key, 2)
        try:
            group_id = key[4 : 4 + length].decode()
        except UnicodeDecodeError:
            continue
        if value is None:
            out.pop(group_id, None)
            continue
        try:
            raw = json.loads(value[_SHORT.size :])
            timeout = raw.get("session_timeout_ms")
            out[group_id] = GroupSettings(int(timeout) if timeout is not None else None, bool(raw.get("ephemeral")))
        except (ValueError, AttributeError, TypeError):
            continue
    return out


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

