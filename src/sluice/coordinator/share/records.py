"""`__share_group_state` records in Kafka's layout (its share coordinator's ShareSnapshot/ShareUpdate).

Key:   int16 record type (0 snapshot, 1 update), then GroupId string, TopicId uuid, Partition int32.
Value: int16 version (0), then SnapshotEpoch uint16, StateEpoch int32 (snapshots only), LeaderEpoch int32,
       StartOffset int64, StateBatches [FirstOffset int64, LastOffset int64, DeliveryState int8,
       DeliveryCount int16], tagged fields (the value is a flexible version).

sluice writes snapshots only: each is the whole state of one share-partition, so the compacted topic keeps
exactly one record per share-partition and replay needs nothing else. It reads updates too (a log written
by Kafka): an update's batches are laid over the snapshot of the same SnapshotEpoch.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from sluice.coordinator.share.partition import RecordState, StateBatch
from sluice.errors import SluiceError
from sluice.protocol.messages import struct_codecs
from sluice.protocol.primitives import DecodeError

SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0
NO_START_OFFSET = -1  # an update that leaves the start offset as it is

_VERSION = struct.Struct(">h")
_SNAPSHOT_KEY = struct_codecs("ShareSnapshotKey")
_UPDATE_KEY = struct_codecs("ShareUpdateKey")
_SNAPSHOT_VALUE = struct_codecs("ShareSnapshotValue")
_UPDATE_VALUE = struct_codecs("ShareUpdateValue")


class ShareRecordError(SluiceError):
    """A `__share_group_state` key or value that does not parse."""


@dataclass(frozen=True, slots=True, order=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareState:
    """A snapshot (or, read from Kafka's log, an update) of one share-partition."""

    snapshot_epoch: int
    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    is_update: bool = False


def encode_key(key: SharePartitionKey, record_type: int = SNAPSHOT_TYPE) -> bytes:
    codecs = _SNAPSHOT_KEY if record_type == SNAPSHOT_TYPE else _UPDATE_KEY
    version = SNAPSHOT_TYPE if record_type == SNAPSHOT_TYPE else UPDATE_TYPE
    obj = codecs.cls(group_id=key.group_id, topic_id=key.topic_id, partition=key.partition)
    return _VERSION.pack(version) + codecs[version].encode(obj)


def encode_snapshot(state: ShareState) -> bytes:
    cls = _SNAPSHOT_VALUE.cls
    obj = cls(
        snapshot_epoch=state.snapshot_epoch & 0xFFFF,
        state_epoch=state.state_epoch,
        leader_epoch=0,
        start_offset=state.start_offset,
        state_batches=[
            cls.StateBatch(
                first_offset=b.first, last_offset=b.last, delivery_state=int(b.state), delivery_count=b.delivery_count
            )
            for b in state.batches
        ],
    )
    return _VERSION.pack(VALUE_VERSION) + _SNAPSHOT_VALUE[VALUE_VERSION].encode(obj)


def decode_key(data: bytes) -> tuple[int, SharePartitionKey]:
    """(record type, key)."""
    try:
        (record_type,) = _VERSION.unpack_from(data)
        codecs = {SNAPSHOT_TYPE: _SNAPSHOT_KEY, UPDATE_TYPE: _UPDATE_KEY}[record_type]
        obj, _ = codecs[record_type].decode(data, _VERSION.size)
    except (struct.error, KeyError, DecodeError) as exc:
        raise ShareRecordError(f"unreadable __share_group_state key: {exc!r}") from exc
    return record_type, SharePartitionKey(obj.group_id, obj.topic_id, obj.partition)


def decode_value(record_type: int, data: bytes) -> ShareState:
    codecs = _SNAPSHOT_VALUE if record_type == SNAPSHOT_TYPE else _UPDATE_VALUE
    try:
        (version,) = _VERSION.unpack_from(data)
        obj, _ = codecs[version].decode(data, _VERSION.size)
        batches = tuple(
            StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
            for b in obj.state_batches
        )
    except (struct.error, KeyError, DecodeError, ValueError) as exc:
        raise ShareRecordError(f"unreadable __share_group_state value: {exc!r}") from exc
    return ShareState(
        snapshot_epoch=obj.snapshot_epoch,
        state_epoch=getattr(obj, "state_epoch", -1),
        start_offset=obj.start_offset,
        batches=batches,
        is_update=record_type == UPDATE_TYPE,
    )
