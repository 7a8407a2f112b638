"""The common Produce request (flexible versions by topic name, v9-v12) read in place.

A producer that sends each message on its own (linger 0: latency-bound clients, the gateway's per-message
produce) sends the same shape every time: no transactional id, one topic, one partition, one record set, no
tagged fields. This reads that shape, header included, with a few byte reads and no objects; every other
shape, and every request that is not exactly that shape, gives None and goes through the generated decoder,
which reads it (and names what is wrong with it). tests/protocol/test_fast_paths.py holds both to the same
reading.

The other way, `one_topic_v3` writes the request the batch producer (sluice.client.batch_producer) sends:
Produce v3, which every Kafka from 0.11 to 4.x takes, one topic, one batch per partition.
"""

from __future__ import annotations

import struct

FIRST_FLEXIBLE = 9
LAST_BY_NAME = 12
_CLIENT_ID = struct.Struct(">h")  # its length, after api key, api version and correlation id
_CLIENT_ID_AT = 8
# After the client id: the header's tagged fields (0: none), the transactional id (0: null), acks,
# timeout_ms (which the broker does not use), the topic count and the topic name's length (compact: + 1).
_AFTER_CLIENT_ID = struct.Struct(">BBhiBB")
# After the name: the partition count, the partition index and the first byte of the records' length.
_AFTER_NAME = struct.Struct(">BiB")
_ONE = 2  # a compact array of one element

# Produce v3 after the header: no transactional id, acks, timeout, one topic, its name's length.
_PRODUCE_HEAD = struct.Struct(">hhiih")
_PARTITION_HEAD = struct.Struct(">ii")  # partition index, then the record set's length
_INT32 = struct.Struct(">i")

# What the common request asks: (acks, topic, partition, records), a tuple (cheaper to make than an object).
OnePartition = tuple[int, str, int, memoryview]


def read_one_partition(body: memoryview) -> OnePartition | None:
    """What a whole request (header v2 included) asks when it has the common shape, else None. The header's
    client id is checked (the general path refuses one that is not UTF-8) but not kept: nothing on this
    path uses it."""
    try:
        (size,) = _CLIENT_ID.unpack_from(body, _CLIENT_ID_AT)
        pos = _CLIENT_ID_AT + 2
        if size > 0:
            str(body[pos : pos + size], "utf-8")
            pos += size
        elif size < -1:
            return None
        tags, transactional_id, acks, _, topics, size = _AFTER_CLIENT_ID.unpack_from(body, pos)
        if tags or transactional_id or topics != _ONE or not 0 < size < 0x80:
            return None  # (a name of 127 bytes or more: its length takes a second varint byte)
        name_start = pos + _AFTER_CLIENT_ID.size
        name_end = name_start + size - 1
        partitions, index, size = _AFTER_NAME.unpack_from(body, name_end)
        if partitions != _ONE:
            return None
        pos = name_end + _AFTER_NAME.size
        if size >= 0x80:  # the records' length takes a second varint byte (a third: not here)
            if body[pos] >= 0x80:
                return None
            size = (size & 0x7F) | (body[pos] << 7)
            pos += 1
        if not size:
            return None  # null records
        end = pos + size - 1
        # Then no tagged fields in the partition, the topic and the request, and nothing more.
        if len(body) != end + 3 or body[end] or body[end + 1] or body[end + 2]:
            return None
        topic = str(body[name_start:name_end], "utf-8")
    except (IndexError, struct.error, UnicodeDecodeError):
        return None  # cut short or not UTF-8: the generated decoder names the fault
    return acks, topic, index, body[pos:end]


def one_topic_v3(acks: int, timeout_ms: int, topic: bytes, batches: list[tuple[int, bytes]]) -> bytes:
    """The body of a Produce v3 request (no transactional id) of one topic: one record batch per partition,
    (partition, batch) in `batches`."""
    parts = [_PRODUCE_HEAD.pack(-1, acks, timeout_ms, 1, len(topic)), topic, _INT32.pack(len(batches))]
    for partition, batch in batches:
        parts.append(_PARTITION_HEAD.pack(partition, len(batch)))
        parts.append(batch)
    return b"".join(parts)
