"""Records the coordinator asks the broker to append to ``__consumer_offsets``, in Kafka's own layout.

The layouts are the shared data definitions in ``sluice.protocol.messages.consumer_protocol``
(OffsetCommitKey/Value, GroupMetadataKey/Value). On the wire every key and value starts with a
big-endian int16 that the definitions leave out: for keys it selects the record type (0 or 1: an
offset commit, 2: group metadata, 11: a share group (ShareGroupMetadata), other types: KIP-848 records a
classic coordinator skips), for values it is
the value's version. We write the non-flexible versions and read all of them, so a log written by
Kafka itself loads too.

Byte layouts: docs/storage.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from sluice.errors import SluiceError
from sluice.protocol.messages import struct_codecs
from sluice.protocol.primitives import DecodeError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
SHARE_GROUP_METADATA_KEY_VERSION = 11
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_OFFSET_COMMIT_KEY = struct_codecs("OffsetCommitKey")
_GROUP_METADATA_KEY = struct_codecs("GroupMetadataKey")
_OFFSET_COMMIT_VALUE = struct_codecs("OffsetCommitValue")
_GROUP_METADATA_VALUE = struct_codecs("GroupMetadataValue")
_SHARE_GROUP_METADATA_KEY = struct_codecs("ShareGroupMetadataKey")
_SHARE_GROUP_METADATA_VALUE = struct_codecs("ShareGroupMetadataValue")
_VERSION = struct.Struct(">h")
_D = TypeVar("_D")


class RecordFormatError(SluiceError):
    """A ``__consumer_offsets`` key or value that does not parse."""


@dataclass(slots=True, frozen=True)
class PersistRecord:
    """One record for ``__consumer_offsets``; ``value is None`` is a tombstone."""

    key: bytes
    value: bytes | None


@dataclass(slots=True, frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(slots=True, frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True, frozen=True)
class ShareGroupMetadataKey:
    """A share group exists (KIP-932): its type and epoch outlive its members."""

    group: str


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadataValue] = field(default_factory=list)


def _versioned(version: int, codecs: Any, obj: Any) -> bytes:
    return _VERSION.pack(version) + codecs[version].encode(obj)


def _decode_versioned(data: bytes, codecs: Any, what: str) -> tuple[int, Any]:
    """The int16 prefix and the body it selects (bytes after the body are ignored, as Kafka does)."""
    try:
        (version,) = _VERSION.unpack_from(data)
        codec = codecs[version]
    except (struct.error, KeyError) as exc:
        raise RecordFormatError(f"unreadable {what}: {exc}") from exc
    try:
        obj, _ = codec.decode(data, _VERSION.size)
    except DecodeError as exc:
        raise RecordFormatError(f"unreadable {what} v{version}: {exc}") from exc
    return version, obj


def _to_struct(cls: Any, value: Any, **overrides: Any) -> Any:
    """The Struct object for one of the dataclasses above: they carry the Struct's own field names."""
    return cls(**({f.name: getattr(value, f.name) for f in fields(value)} | overrides))


def _from_struct(cls: type[_D], obj: Any, **overrides: Any) -> _D:
    """The dataclass `cls` from a decoded Struct object (fields the dataclass lacks are dropped)."""
    return cls(**({f.name: getattr(obj, f.name) for f in fields(cls)} | overrides))


# --- writing ---------------------------------------------------------------------------------


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    obj = _to_struct(_OFFSET_COMMIT_KEY.cls, key)
    return _versioned(OFFSET_COMMIT_KEY_VERSION, _OFFSET_COMMIT_KEY, obj)


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return _versioned(GROUP_METADATA_KEY_VERSION, _GROUP_METADATA_KEY, _to_struct(_GROUP_METADATA_KEY.cls, key))


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    obj = _to_struct(_OFFSET_COMMIT_VALUE.cls, value)
    return _versioned(OFFSET_COMMIT_VALUE_VERSION, _OFFSET_COMMIT_VALUE, obj)


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    cls = _GROUP_METADATA_VALUE.cls
    obj = _to_struct(cls, value, members=[_to_struct(cls.MemberMetadata, m) for m in value.members])
    return _versioned(GROUP_METADATA_VALUE_VERSION, _GROUP_METADATA_VALUE, obj)


# --- reading ---------------------------------------------------------------------------------


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | ShareGroupMetadataKey | None:
    """Parse a key; ``None`` for record types a classic coordinator does not own."""
    try:
        (version,) = _VERSION.unpack_from(key)
    except struct.error as exc:
        raise RecordFormatError(f"unreadable key: {exc}") from exc
    if version in (0, 1):
        _, obj = _decode_versioned(key, _OFFSET_COMMIT_KEY, "OffsetCommitKey")
        return _from_struct(OffsetCommitKey, obj)
    if version == GROUP_METADATA_KEY_VERSION:
        _, obj = _decode_versioned(key, _GROUP_METADATA_KEY, "GroupMetadataKey")
        return _from_struct(GroupMetadataKey, obj)
    if version == SHARE_GROUP_METADATA_KEY_VERSION:
        _, obj = _decode_versioned(key, _SHARE_GROUP_METADATA_KEY, "ShareGroupMetadataKey")
        return ShareGroupMetadataKey(obj.group_id)
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    _, obj = _decode_versioned(data, _OFFSET_COMMIT_VALUE, "OffsetCommitValue")
    # v1's expire timestamp is dropped: retention is a broker setting now.
    return _from_struct(OffsetCommitValue, obj)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    version, obj = _decode_versioned(data, _GROUP_METADATA_VALUE, "GroupMetadataValue")
    members = [
        # v0 had one timeout for both; Kafka reads it as the rebalance timeout too.
        _from_struct(MemberMetadataValue, m, **({"rebalance_timeout": m.session_timeout} if version == 0 else {}))
        for m in obj.members
    ]
    return _from_struct(GroupMetadataValue, obj, members=members)


def offset_commit_record(key: OffsetCommitKey, value: OffsetCommitValue | None) -> PersistRecord:
    encoded = None if value is None else encode_offset_commit_value(value)
    return PersistRecord(encode_offset_commit_key(key), encoded)


def group_metadata_record(key: GroupMetadataKey, value: GroupMetadataValue | None) -> PersistRecord:
    encoded = None if value is None else encode_group_metadata_value(value)
    return PersistRecord(encode_group_metadata_key(key), encoded)


def share_group_metadata_record(group_id: str, epoch: int | None) -> PersistRecord:
    """The record that keeps a share group (its epoch), or its tombstone (None)."""
    key = _versioned(
        SHARE_GROUP_METADATA_KEY_VERSION, _SHARE_GROUP_METADATA_KEY, _SHARE_GROUP_METADATA_KEY.cls(group_id=group_id)
    )
    if epoch is None:
        return PersistRecord(key, None)
    return PersistRecord(key, _versioned(0, _SHARE_GROUP_METADATA_VALUE, _SHARE_GROUP_METADATA_VALUE.cls(epoch=epoch)))


def decode_share_group_metadata_value(data: bytes) -> int:
    _, obj = _decode_versioned(data, _SHARE_GROUP_METADATA_VALUE, "ShareGroupMetadataValue")
    return int(obj.epoch)
