"""Records the coordinator asks the broker to append to ``__consumer_offsets``, in Kafka's own layout.

Every key and value starts with a big-endian int16 version; strings are int16 length + UTF-8
(length -1 = null), bytes are int32 length + data (-1 = null), arrays are int32 count + items.
Value versions from 4 on are "flexible": compact strings/bytes/arrays (unsigned varint length + 1,
0 = null) and a tagged-field section after every struct. We write the non-flexible versions and
read all of them, so a log written by Kafka itself loads too.

Keys:
  OffsetCommitKey   version 0 or 1: group string, topic string, partition int32
  GroupMetadataKey  version 2:      group string
  (versions 3+ belong to the KIP-848 consumer-group records, which a classic coordinator skips)

Values (``None`` is a tombstone: the key is deleted):
  OffsetCommitValue v3: offset int64, leader_epoch int32, metadata string, commit_timestamp int64
    (v0: no leader epoch; v1: + expire_timestamp int64 after commit_timestamp; v4: flexible v3)
  GroupMetadataValue v3: protocol_type string, generation int32, protocol string?, leader string?,
    current_state_timestamp int64, members [member_id string, group_instance_id string?,
    client_id string, client_host string, rebalance_timeout int32, session_timeout int32,
    subscription bytes, assignment bytes]
    (v0: no current_state_timestamp, rebalance_timeout, group_instance_id; v1: + rebalance_timeout;
     v2: + current_state_timestamp; v4: flexible v3)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from sluice.errors import SluiceError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
_FIRST_FLEXIBLE_VALUE_VERSION = 4


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


# --- writing ---------------------------------------------------------------------------------


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _nullable_string(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    return (
        struct.pack(">h", OFFSET_COMMIT_KEY_VERSION)
        + _string(key.group)
        + _string(key.topic)
        + struct.pack(">i", key.partition)
    )


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return struct.pack(">h", GROUP_METADATA_KEY_VERSION) + _string(key.group)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    return (
        struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, value.offset, value.leader_epoch)
        + _string(value.metadata)
        + struct.pack(">q", value.commit_timestamp)
    )


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    parts = [
        struct.pack(">h", GROUP_METADATA_VALUE_VERSION),
        _string(value.protocol_type),
        struct.pack(">i", value.generation),
        _nullable_string(value.protocol),
        _nullable_string(value.leader),
        struct.pack(">qi", value.current_state_timestamp, len(value.members)),
    ]
    for member in value.members:
        parts += [
            _string(member.member_id),
            _nullable_string(member.group_instance_id),
            _string(member.client_id),
            _string(member.client_host),
            struct.pack(">ii", member.rebalance_timeout, member.session_timeout),
            _bytes(member.subscription),
            _bytes(member.assignment),
        ]
    return b"".join(parts)


# --- reading ---------------------------------------------------------------------------------


class _Reader:
    """Sequential big-endian reader; ``flexible`` switches strings/bytes/arrays to compact forms."""

    __slots__ = ("data", "flexible", "position")

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.position = 0
        self.flexible = flexible

    def _take(self, size: int) -> bytes:
        end = self.position + size
        if size < 0 or end > len(self.data):
            raise RecordFormatError(f"truncated record: need {size} bytes at {self.position}")
        chunk = self.data[self.position : end]
        self.position = end
        return chunk

    def _unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        (number,) = struct.unpack(fmt, self._take(size))
        return number

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def int64(self) -> int:
        return self._unpack(">q")

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            byte = self._take(1)[0]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def _length(self, fixed_format: str) -> int:
        # -1 means null in both encodings (compact stores length + 1, so 0 becomes -1).
        return self.uvarint() - 1 if self.flexible else self._unpack(fixed_format)

    def nullable_string(self) -> str | None:
        length = self._length(">h")
        return None if length < 0 else self._take(length).decode()

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise RecordFormatError("null where a string is required")
        return text

    def bytes(self) -> bytes:
        length = self._length(">i")
        return b"" if length < 0 else self._take(length)

    def array_length(self) -> int:
        return max(self._length(">i"), 0)

    def skip_tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


def decode_key(key: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """Parse a key; ``None`` for record types a classic coordinator does not own."""
    reader = _Reader(key)
    version = reader.int16()
    if version in (0, 1):
        return OffsetCommitKey(reader.string(), reader.string(), reader.int32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(reader.string())
    return None


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    reader = _Reader(data)
    version = reader.int16()
    if not 0 <= version <= _FIRST_FLEXIBLE_VALUE_VERSION:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    reader.flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.int64()
    if version == 1:
        reader.int64()  # expire timestamp: retention is a broker setting now
    reader.skip_tagged_fields()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    reader = _Reader(data)
    version = reader.int16()
    if not 0 <= version <= _FIRST_FLEXIBLE_VALUE_VERSION:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    reader.flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    current_state_timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.array_length()):
        member_id = reader.string()
        group_instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        session_timeout_first = version == 0
        rebalance_timeout = -1 if session_timeout_first else reader.int32()
        session_timeout = reader.int32()
        if session_timeout_first:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadataValue(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.bytes(),
                reader.bytes(),
            )
        )
        reader.skip_tagged_fields()
    reader.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, current_state_timestamp, members)


def offset_commit_record(key: OffsetCommitKey, value: OffsetCommitValue | None) -> PersistRecord:
    encoded = None if value is None else encode_offset_commit_value(value)
    return PersistRecord(encode_offset_commit_key(key), encoded)


def group_metadata_record(key: GroupMetadataKey, value: GroupMetadataValue | None) -> PersistRecord:
    encoded = None if value is None else encode_group_metadata_value(value)
    return PersistRecord(encode_group_metadata_key(key), encoded)
