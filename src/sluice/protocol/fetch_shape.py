"""What a Fetch request asks, whatever the order it names its partitions in, read straight from its bytes.

librdkafka sends an idle consumer's Fetch again every fetch.wait.max.ms, naming every assigned partition,
and moves the start of its partition list on by one each time: two such requests differ in order only.
`fetch_shape` reads a request's bytes (after the request header) into a value that is equal for two
requests exactly when they carry the same top-level fields and the same partitions with the same fields,
in any order, so the broker can tell a repeat without decoding it (sluice.broker.dispatch).

It reads versions 4 to 18, where every partition entry has one size per version (in the flexible versions,
12 and later, when no partition carries tagged fields: the entry then ends in one zero byte). For anything
else it returns None and the request is simply decoded. The value is (the fixed fields before the topic array,
{topic name or id bytes: that topic's partition entries}, the bytes after the topic array), where a topic
named twice (the list's start falls inside it) or whose partitions are not in ascending order (the start
falls inside the only topic) has its entries sorted.
"""

from __future__ import annotations

import functools
import struct

from sluice.protocol.primitives import read_uvarint

# Per version: bytes of the fixed-width top-level fields before the topic array (replica id up to v14, max
# wait, min bytes, max bytes, isolation level from v4, session id and epoch from v7), and bytes per partition
# entry (partition, current leader epoch from v9, fetch offset, last fetched epoch from v12, log start offset
# from v5, partition max bytes; from v12 one more for the empty tagged-field section).
_LAYOUT = {
    4: (17, 16),
    5: (17, 24),
    6: (17, 24),
    7: (25, 24),
    8: (25, 24),
    9: (25, 28),
    10: (25, 28),
    11: (25, 28),
    12: (25, 33),
    13: (25, 33),
    14: (25, 33),
    15: (21, 33),
    16: (21, 33),
    17: (21, 33),
    18: (21, 33),
}
_FLEXIBLE_FROM = 12
_TOPIC_IDS_FROM = 13
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

FetchShape = tuple[bytes, dict[bytes, bytes], bytes]


def fetch_shape(body: bytes, version: int) -> FetchShape | None:
    """The order-free shape of a Fetch request body at `version`, or None when it is not read here."""
    layout = _LAYOUT.get(version)
    if layout is None or len(body) <= layout[0]:
        return None
    try:
        return _read(body, version, *layout)
    except (IndexError, struct.error):
        return None  # cut short: the decoder will say what is wrong with it


def _read(body: bytes, version: int, start: int, size: int) -> FetchShape | None:
    flexible = version >= _FLEXIBLE_FROM
    if flexible:
        count, pos = read_uvarint(body, start)
        count -= 1
    else:
        (count,), pos = _INT32.unpack_from(body, start), start + 4
    topics: dict[bytes, bytes] = {}
    # Topics named twice or not in partition order: their entries are sorted at the end.
    unordered: dict[bytes, list[bytes]] = {}
    for _ in range(count):
        if version >= _TOPIC_IDS_FROM:
            key_end = pos + 16
        elif flexible:
            length, after = read_uvarint(body, pos)
            key_end = after + length - 1
        else:
            key_end = pos + 2 + _INT16.unpack_from(body, pos)[0]
        key = body[pos:key_end]
        if flexible:
            partitions, pos = read_uvarint(body, key_end)
            partitions -= 1
        else:
            (partitions,), pos = _INT32.unpack_from(body, key_end), key_end + 4
        end = pos + size * partitions
        if partitions < 0 or key_end > len(body) or end > len(body) - flexible:
            return None
        entries = body[pos:end]
        if flexible:
            if entries[size - 1 :: size].count(0) != partitions or body[end] != 0:
                return None  # tagged fields somewhere: entries are not `size` bytes each
            end += 1
        pos = end
        first = topics.get(key)
        if first is not None:
            unordered.setdefault(key, [first]).append(entries)
        else:
            topics[key] = entries
            if not _in_order(entries, partitions, size):
                unordered[key] = [entries]
    for key, parts in unordered.items():
        joined = b"".join(parts)
        topics[key] = b"".join(sorted(joined[i : i + size] for i in range(0, len(joined), size)))
    return body[:start], topics, body[pos:]


def _in_order(entries: bytes, count: int, size: int) -> bool:
    """Whether the partition numbers of `count` entries ascend (then their bytes are already sorted)."""
    if count < 2:
        return True
    numbers = _partition_numbers(count, size).unpack_from(entries)
    return list(numbers) == sorted(numbers)


@functools.lru_cache(maxsize=64)
def _partition_numbers(count: int, size: int) -> struct.Struct:
    return struct.Struct(">" + f"i{size - 4}x" * count)
