"""What a Fetch request asks, whatever the order it names its partitions in, read straight from its bytes.

librdkafka sends an idle consumer's Fetch again every fetch.wait.max.ms, naming every assigned partition,
and moves the start of its partition list on by one each time: two such requests differ in order only.
`fetch_shape` reads a request's bytes (after the request header) into a value that is equal for two
requests exactly when they carry the same top-level fields and the same partitions with the same fields,
in any order, so the broker can tell a repeat without decoding it: `read_fetch`, the request pipeline's
Fetch case (sluice.broker.dispatch), hands back the connection's last sessionless Fetch, the same object,
when the next one asks the same, so its kept answer can be found (sluice.broker.fetch_repeat).

It reads versions 4 to 18, where every partition entry has one size per version (in the flexible versions,
12 and later, when no partition carries tagged fields: the entry then ends in one zero byte), with counts and
lengths of up to three varint bytes read in place, as produce_request reads its request. For anything else
it returns None and the request is simply decoded. The value is (the fixed fields before the topic array,
{topic name or id bytes: that topic's partition entries}, the bytes after the topic array), where a topic
named twice (the list's start falls inside it) or whose partitions are not in ascending order (the start
falls inside the only topic) has its entries sorted.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Protocol

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
_SESSIONS_FROM = 7
_FLEXIBLE_FROM = 12
_TOPIC_IDS_FROM = 13
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

FetchShape = tuple[bytes, dict[bytes, bytes], bytes]
# A sessionless Fetch kept for comparison with the connection's next one: (version, shape, decoded request).
Kept = tuple[int, FetchShape, Any]
# A Fetch this large or larger is not kept for comparison with the next one.
MAX_KEPT_BYTES = 4 << 20
# The session epoch of a Fetch outside any fetch session (KIP-227: FINAL_EPOCH).
SESSIONLESS = -1


class Decoder(Protocol):
    """The Fetch request's codec at one version (sluice.protocol.codec.VersionCodec)."""

    version: int

    def decode(self, buf: Any, pos: int = 0) -> tuple[Any, int]: ...


def read_fetch(codec: Decoder, frame: Any, pos: int, last: Kept | None) -> tuple[Any, Kept | None]:
    """The body of a Fetch (at `pos` in `frame`), and what to keep for the connection's next one. When it asks
    what `last`, the connection's previous sessionless Fetch, asked (librdkafka's idle consumer, twice a
    second, naming every partition, its list started one partition further on), it is that request again:
    not decoded a second time, and the same object, so its kept answer can be found. A request is never
    changed once decoded (only an authorizer takes items out, and with one this is not used)."""
    version = codec.version
    layout = _LAYOUT.get(version)
    if layout is None or not _sessionless(frame, pos + layout[0], version):
        request, _ = codec.decode(frame, pos)  # a session's fetch (or too old a version): never kept
        return request, None
    shape = _shape(frame, pos, version)
    if shape is not None and last is not None and last[0] == version and last[1] == shape:
        return last[2], last
    request, _ = codec.decode(frame, pos)
    return request, (version, shape, request) if shape is not None else None


def _sessionless(frame: Any, fixed_end: int, version: int) -> bool:
    """Whether a Fetch is outside any fetch session: before v7, always; from v7 the session epoch, the last
    of the fixed-width fields before the topic array, says so."""
    if version < _SESSIONS_FROM:
        return True
    try:
        return bool(_INT32.unpack_from(frame, fixed_end - 4)[0] == SESSIONLESS)
    except struct.error:
        return False  # cut short: the decoder says what is wrong with it


def _shape(frame: Any, pos: int, version: int) -> FetchShape | None:
    return fetch_shape(bytes(frame[pos:]), version) if len(frame) - pos <= MAX_KEPT_BYTES else None


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
        count, pos = _uvarint(body, start)
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
            length, after = _uvarint(body, pos)
            key_end = after + length - 1
        else:
            key_end = pos + 2 + _INT16.unpack_from(body, pos)[0]
        key = body[pos:key_end]
        if flexible:
            partitions, pos = _uvarint(body, key_end)
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


def _uvarint(body: bytes, pos: int) -> tuple[int, int]:
    """A count or length of up to three varint bytes (below 2,097,152: more than any Fetch names) and the
    position after it; a longer one raises IndexError, and the request is simply decoded."""
    value = body[pos]
    if value < 0x80:
        return value, pos + 1
    second = body[pos + 1]
    value = (value & 0x7F) | (second & 0x7F) << 7
    if second < 0x80:
        return value, pos + 2
    third = body[pos + 2]
    if third >= 0x80:
        raise IndexError("a varint of more than three bytes")
    return value | third << 14, pos + 3


def _in_order(entries: bytes, count: int, size: int) -> bool:
    """Whether the partition numbers of `count` entries ascend (then their bytes are already sorted)."""
    if count < 2:
        return True
    numbers = _partition_numbers(count, size).unpack_from(entries)
    return list(numbers) == sorted(numbers)


@functools.lru_cache(maxsize=64)
def _partition_numbers(count: int, size: int) -> struct.Struct:
    return struct.Struct(">" + f"i{size - 4}x" * count)
