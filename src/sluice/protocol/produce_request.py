"""The common Produce request (flexible versions by topic name, v9-v12) read in place.

A producer that sends each message on its own (linger 0: latency-bound clients, the gateway's per-message
produce) sends the same shape every time: no transactional id, one topic, one partition, one record set, no
tagged fields. This reads that shape, header included, with a few byte reads and no objects; every other
shape, and every request that is not exactly that shape, gives None and goes through the generated decoder,
which reads it (and names what is wrong with it). tests/protocol/test_fast_paths.py holds both to the same
reading.
"""

from __future__ import annotations

import struct

FIRST_FLEXIBLE = 9
LAST_BY_NAME = 12
_INT16 = struct.Struct(">h")
_CLIENT_ID_AT = 8  # after api key, api version and correlation id
_ACKS = _INT16  # then timeout_ms (int32), which the broker does not use
_INDEX = struct.Struct(">i")
_ONE = 2  # a compact array of one element
_TAIL = b"\x00\x00\x00"  # no tagged fields in the partition, the topic and the request


# What the common request asks: (acks, topic, partition, records), a tuple (cheaper to make than an object).
OnePartition = tuple[int, str, int, memoryview]


def read_one_partition(body: memoryview) -> OnePartition | None:
    """What a whole request (header v2 included) asks when it has the common shape, else None. The header's
    client id is skipped, not decoded: nothing on this path uses it."""
    try:
        (size,) = _INT16.unpack_from(body, _CLIENT_ID_AT)
        pos = _CLIENT_ID_AT + 2 + max(size, 0)
        if body[pos]:
            return None  # tagged fields in the header
        pos += 1
        if body[pos]:
            return None  # a transactional id (0 is a null compact string)
        (acks,) = _ACKS.unpack_from(body, pos + 1)
        pos += 7
        if body[pos] != _ONE:
            return None
        size = body[pos + 1] - 1  # the topic name: a compact string with a one-byte length
        if not 0 <= size < 0x7F:
            return None
        name_start = pos + 2
        name_end = pos = name_start + size
        if body[pos] != _ONE:
            return None
        (index,) = _INDEX.unpack_from(body, pos + 1)
        pos += 5
        size = body[pos]  # the records: compact bytes with a one- or two-byte length
        if size >= 0x80:
            pos += 1
            if body[pos] >= 0x80:
                return None
            size = (size & 0x7F) | (body[pos] << 7)
        if not size:
            return None  # null records
        pos += 1
        end = pos + size - 1
        if len(body) != end + 3 or body[end : end + 3] != _TAIL:
            return None
        topic = str(body[name_start:name_end], "utf-8")
    except (IndexError, struct.error, UnicodeDecodeError):
        return None  # cut short or not UTF-8: the generated decoder names the fault
    return acks, topic, index, body[pos:end]
