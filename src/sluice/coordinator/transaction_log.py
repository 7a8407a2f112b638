"""`__transaction_state` records in Kafka's layout: key TransactionLogKey v0, value TransactionLogValue v1
(the definitions are in sluice.protocol.messages.transactions; every key and value starts with an int16
version). Byte layout, field by field: docs/storage.md.

Kafka's value has no room for three things sluice's coordinator keeps across a restart: the previous
producer epoch, the groups of the transaction and the offsets committed inside it (Kafka writes those to
`__consumer_offsets` as they come; sluice writes them when the transaction commits). They travel in tagged
fields 1000-1002, which a Kafka reader skips.

Reading also accepts what sluice wrote before it used Kafka's layout: keys without the string's length
prefix and JSON values. `TransactionCoordinator.load` then rewrites those ids once in the new layout.
"""

from __future__ import annotations

import json
import struct

from sluice.coordinator.txn_metadata import PendingOffset, TxnMetadata, TxnState
from sluice.errors import SluiceError
from sluice.protocol.messages import struct_codecs
from sluice.protocol.primitives import DecodeError

KEY_VERSION = 0
VALUE_VERSION = 1  # the flexible one: sluice's own fields are tagged
_KEY = struct_codecs("TransactionLogKey")
_VALUE = struct_codecs("TransactionLogValue")
_INT16 = struct.Struct(">h")
# Kafka's TransactionState ids, as written in TransactionStatus.
STATUS_IDS = {
    TxnState.EMPTY: 0,
    TxnState.ONGOING: 1,
    TxnState.PREPARE_COMMIT: 2,
    TxnState.PREPARE_ABORT: 3,
    TxnState.COMPLETE_COMMIT: 4,
    TxnState.COMPLETE_ABORT: 5,
    TxnState.DEAD: 6,
    TxnState.PREPARE_EPOCH_FENCE: 7,
}
_STATES = {number: state for state, number in STATUS_IDS.items()}


class TransactionLogError(SluiceError):
    """A `__transaction_state` value that does not parse."""


def state_key(transactional_id: str) -> bytes:
    return _INT16.pack(KEY_VERSION) + _KEY[KEY_VERSION].encode(_KEY.cls(transactional_id=transactional_id))


def decode_key(key: bytes) -> tuple[str, bool] | None:
    """(transactional id, whether the key is in sluice's earlier layout), or None for a key of another
    version. The earlier layout put the id's bytes right after the version, without a length."""
    if len(key) < 2 or _INT16.unpack_from(key)[0] != KEY_VERSION:
        return None
    if len(key) >= 4 and _INT16.unpack_from(key, 2)[0] == len(key) - 4:
        return key[4:].decode(), False
    return key[2:].decode(), True


def encode_value(meta: TxnMetadata) -> bytes:
    cls = _VALUE.cls
    partitions: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        partitions.setdefault(topic, []).append(index)
    value = cls(
        producer_id=meta.producer_id,
        previous_producer_id=meta.last_producer_id,
        producer_epoch=meta.epoch,
        transaction_timeout_ms=meta.timeout_ms,
        transaction_status=STATUS_IDS[meta.state],
        transaction_partitions=[
            cls.PartitionsSchema(topic=t, partition_ids=p) for t, p in partitions.items()
        ],
        transaction_last_update_timestamp_ms=meta.last_update_ms,
        transaction_start_timestamp_ms=meta.start_ms,
        previous_producer_epoch=meta.last_epoch,
        offset_groups=sorted(meta.groups),
        pending_offsets=[
            cls.PendingOffset(
                group_id=group,
                topic=topic,
                partition=index,
                offset=pending.offset,
                leader_epoch=pending.leader_epoch,
                metadata=pending.metadata,
            )
            for group, offsets in sorted(meta.offsets.items())
            for (topic, index), pending in sorted(offsets.items())
        ],
    )
    return _INT16.pack(VALUE_VERSION) + _VALUE[VALUE_VERSION].encode(value)


def decode_value(transactional_id: str, value: bytes) -> tuple[TxnMetadata, bool]:
    """The metadata a value holds, and whether it was in sluice's earlier JSON layout."""
    if value[:1] == b"{":
        return _decode_json(transactional_id, value), True
    try:
        (version,) = _INT16.unpack_from(value)
        obj, _ = _VALUE[version].decode(value, _INT16.size)
    except (struct.error, KeyError, DecodeError) as exc:
        raise TransactionLogError(f"unreadable TransactionLogValue of {transactional_id!r}: {exc}") from exc
    state = _STATES.get(obj.transaction_status)
    if state is None:
        raise TransactionLogError(f"{transactional_id!r}: unknown TransactionStatus {obj.transaction_status}")
    offsets: dict[str, dict[tuple[str, int], PendingOffset]] = {}
    for entry in obj.pending_offsets:
        offsets.setdefault(entry.group_id, {})[(entry.topic, entry.partition)] = PendingOffset(
            entry.offset, entry.leader_epoch, entry.metadata
        )
    meta = TxnMetadata(
        transactional_id,
        obj.producer_id,
        obj.producer_epoch,
        obj.transaction_timeout_ms,
        state,
        obj.previous_producer_id,
        obj.previous_producer_epoch,
        {(p.topic, index) for p in obj.transaction_partitions or () for index in p.partition_ids},
        offsets,
        set(obj.offset_groups),
        obj.transaction_start_timestamp_ms,
        obj.transaction_last_update_timestamp_ms,
    )
    return meta, False


def _decode_json(transactional_id: str, value: bytes) -> TxnMetadata:
    """A value as sluice wrote it before using Kafka's layout (short JSON keys)."""
    d = json.loads(value)
    return TxnMetadata(
        transactional_id,
        d["pid"],
        d["epoch"],
        d["timeout"],
        TxnState(d["state"]),
        d["last_pid"],
        d["last_epoch"],
        {(t, p) for t, p in d["partitions"]},
        {g: {(t, p): PendingOffset(o, e, m) for t, p, o, e, m in parts} for g, parts in d["offsets"].items()},
        set(d["groups"]),
        d["start"],
        d["updated"],
    )
