"""Control batches: the transaction markers (COMMIT, ABORT) the broker appends when a transaction ends, in
Kafka's layout. A control record's key is version int16 (0) and type int16; an end-transaction marker's
value is version int16 (0) and the coordinator epoch int32. They travel in a record batch with the control
and transactional attributes set (sluice.protocol.records)."""

from __future__ import annotations

import struct
from enum import IntEnum

from sluice.errors import CorruptRecordError
from sluice.protocol.records import Record, encode_batch


class ControlRecordType(IntEnum):
    # Newer types (KRaft's leader change, snapshots) read as UNKNOWN, as older Kafka does.
    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


def encode_control_key(kind: ControlRecordType) -> bytes:
    return _CONTROL_KEY.pack(CONTROL_KEY_VERSION, kind)


def decode_control_key(key: bytes | None) -> ControlRecordType:
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record key is shorter than 4 bytes")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    try:
        return ControlRecordType(kind)
    except ValueError:
        return ControlRecordType.UNKNOWN


def encode_end_txn_marker(coordinator_epoch: int) -> bytes:
    """The value of a COMMIT/ABORT control record."""
    return _END_TXN_MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_end_txn_marker(value: bytes | None) -> int:
    """Return the coordinator epoch carried by a COMMIT/ABORT control record's value."""
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise CorruptRecordError("transaction marker value is shorter than 6 bytes")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"transaction marker has negative version {version}")
    return int(coordinator_epoch)


def encode_end_txn_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A control batch holding one COMMIT or ABORT marker, as the broker appends at a transaction's end."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    marker = Record(0, 0, encode_control_key(kind), encode_end_txn_marker(coordinator_epoch))
    return encode_batch(
        [marker],
        base_offset=base_offset,
        base_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )
