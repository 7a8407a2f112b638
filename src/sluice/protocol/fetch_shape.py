"""What a Fetch request asks, whatever the order it names its partitions in, read straight from its bytes.

librdkafka sends an idle consumer's Fetch again every fetch.wait.max.ms, naming every assigned partition,
and moves the start of its partition list on by one each time: two such requests differ in order only.
`fetch_shape` reads a request's bytes (after the request header) into a value that is equal for two
requests exactly when they carry the same top-level fields and the same partitions with the same fields,
in any order, so the broker can tell a repeat without decoding it (sluice.broker.dispatch).

It reads the flexible versions (12 and later) when no partition carries tagged fields, so that each
partition is 33 bytes: partition, current leader epoch, fetch offset, last fetched epoch, log start offset,
partition max bytes (32 bytes) and an empty tagged-field section (one zero byte). For anything else it
returns None and the request is simply decoded. The value is (the fixed fields before the topic array,
{topic name or id bytes: that topic's partition entries}, the bytes after the topic array), where a topic
named twice (the list's start falls inside it) or whose partitions are not in ascending order (the start
falls inside the only topic) has its entries sorted.
"""

from __future__ import annotations

import functools
import struct

from sluice.protocol.primitives import read_uvarint

# Bytes of fixed-width top-level fields before the topic array: replica id (up to v14), max wait, min bytes,
# max bytes, isolation level, session id, session epoch.
_FIXED_BEFORE_TOPICS = {12: 25, 13: 25, 14: 25, 15: 21, 16: 21, 17: 21, 18: 21}
_PARTITION = 33
_TOPIC_IDS_FROM = 13

FetchShape = tuple[bytes, dict[bytes, bytes], bytes]


def fetch_shape(body: bytes, version: int) -> FetchShape | None:
    """The order-free shape of a Fetch request body at `version`, or None when it is not read here."""
    pos = _FIXED_BEFORE_TOPICS.get(version)
    if pos is None or len(body) <= pos:
        return None
    try:
        return _read(body, version, pos)
    except IndexError:
        return None  # cut short: the decoder will say what is wrong with it


def _read(body: bytes, version: int, start: int) -> FetchShape | None:
    count, pos = read_uvarint(body, start)
    topics: dict[bytes, bytes] = {}
    # Topics named twice or not in partition order: their entries are sorted at the end.
    unordered: dict[bytes, list[bytes]] = {}
    for _ in range(count - 1):
        if version >= _TOPIC_IDS_FROM:
            key_end = pos + 16
        else:
            length, pos_after = read_uvarint(body, pos)
            key_end = pos_after + length - 1
        key = body[pos:key_end]
        partitions, pos = read_uvarint(body, key_end)
        partitions -= 1
        end = pos + _PARTITION * partitions
        if partitions < 0 or end >= len(body):
            return None
        entries = body[pos:end]
        if entries[_PARTITION - 1 :: _PARTITION].count(0) != partitions or body[end] != 0:
            return None  # tagged fields somewhere: entries are not 33 bytes each
        pos = end + 1
        first = topics.get(key)
        if first is not None:
            unordered.setdefault(key, [first]).append(entries)
        else:
            topics[key] = entries
            if not _in_order(entries, partitions):
                unordered[key] = [entries]
    for key, parts in unordered.items():
        joined = b"".join(parts)
        topics[key] = b"".join(sorted(joined[i : i + _PARTITION] for i in range(0, len(joined), _PARTITION)))
    return body[:start], topics, body[pos:]


def _in_order(entries: bytes, count: int) -> bool:
    """Whether the partition numbers of `count` entries ascend (then their bytes are already sorted)."""
    if count < 2:
        return True
    numbers = _partition_numbers(count).unpack_from(entries)
    return list(numbers) == sorted(numbers)


@functools.lru_cache(maxsize=64)
def _partition_numbers(count: int) -> struct.Struct:
    return struct.Struct(">" + f"i{_PARTITION - 4}x" * count)
