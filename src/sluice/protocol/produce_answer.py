"""The common Produce answer (flexible versions, v9+) in one struct call.

A producer that sends one partition per request (linger 0, latency-bound clients, the gateway's per-message
produce) gets the same shape of answer every time: one topic, one partition, no record errors, no error
message, no tagged fields. The generated encoder walks three nested structs and a dozen parts for it; this one
packs the whole answer at once and hands every other shape to the generated encoder, so both always write the
same bytes (tests/protocol/test_fast_paths.py holds them to that).

The other way, `read_one_topic_v3` reads the answer to the batch producer's request (produce_request.one_topic_v3)
in place; any other shape is left to the generated decoder.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from sluice.protocol.primitives import ZERO_UUID, uvarint_bytes

Encoder = Callable[[Any, list[Any]], None]

FIRST_FLEXIBLE = 9
FIRST_BY_TOPIC_ID = 13
# After the topic's name (or id): one partition (0x02), index, error code, base offset, log append time,
# log start offset, no record errors (0x01), a null error message (0x00), no tagged fields in the partition
# and in the topic (0x00 0x00), the throttle time and no tagged fields in the response (0x00).
_REST = struct.Struct(">BihqqqBBBBiB")
_ONE = b"\x02"  # a compact array of one element
_LONGEST_ONE_BYTE_NAME = 0x7E  # the length prefix (length + 1) stays a one-byte varint
_MAX_HEADS = 4096  # encoded topic names kept (emptied when full: a bound, not a cache policy)
# Topic name -> the answer's bytes up to its partition (the same in every version that names topics).
_heads: dict[str, bytes] = {}
# A partition in a Produce v3 answer: index, error code, base offset, log append time.
_ANSWERED_PARTITION = struct.Struct(">ihqq")
_INT32 = struct.Struct(">i")
_STRING_LENGTH = struct.Struct(">h")


def _head(name: str) -> bytes | None:
    """The answer's bytes up to its partition for topic `name`; None when the name's length prefix would
    take more than one byte."""
    head = _heads.get(name)
    if head is None:
        data = name.encode()
        if len(data) > _LONGEST_ONE_BYTE_NAME:
            return None
        if len(_heads) >= _MAX_HEADS:
            _heads.clear()
        head = _heads[name] = _ONE + uvarint_bytes(len(data) + 1) + data
    return head


def accepted_answer(topic: str, index: int, base_offset: int, log_start_offset: int) -> bytes | None:
    """The body of the answer that accepts one partition's records at `base_offset`, for a request by topic
    name (v9-v12): what the encoder below writes for that answer, without building it first. None when the
    topic name is too long for it."""
    head = _heads.get(topic) or _head(topic)
    if head is None:
        return None
    return head + _REST.pack(2, index, 0, base_offset, -1, log_start_offset, 1, 0, 0, 0, 0, 0)


def produce_response_encoder(version: int, general: Encoder, classes: dict[str, type]) -> Encoder:
    """The ProduceResponse encoder of `version`: the one-call path for the common answer, `general` for the
    rest (and for every version before v9)."""
    if version < FIRST_FLEXIBLE:
        return general
    by_id = version >= FIRST_BY_TOPIC_ID
    leader_class = classes["LeaderIdAndEpoch"]
    pack = _REST.pack

    def encode(o: Any, out: list[Any]) -> None:
        responses = o.responses
        if responses is not None and len(responses) == 1 and o.node_endpoints == []:
            topic = responses[0]
            partitions = topic.partition_responses
            if partitions is not None and len(partitions) == 1:
                p = partitions[0]
                leader = p.current_leader
                if (
                    p.error_message is None
                    and p.record_errors == []
                    and type(leader) is leader_class
                    and leader.leader_id == -1
                    and leader.leader_epoch == -1
                ):
                    if by_id:
                        head = _ONE + (topic.topic_id or ZERO_UUID).bytes
                    elif topic.name is None or (head := _head(topic.name)) is None:
                        general(o, out)
                        return
                    out.append(
                        head
                        + pack(
                            2,
                            p.index,
                            p.error_code,
                            p.base_offset,
                            p.log_append_time_ms,
                            p.log_start_offset,
                            1,
                            0,
                            0,
                            0,
                            o.throttle_time_ms,
                            0,
                        )
                    )
                    return
        general(o, out)

    return encode


def read_one_topic_v3(body: bytes, topic: bytes, partitions: int) -> dict[int, tuple[int, int]] | None:
    """A Produce v3 answer (after its correlation id) of one topic, `topic`, and `partitions` partitions, read
    with struct: partition -> (error code, base offset). None when it has another shape."""
    expected = 4 + 2 + len(topic) + 4 + partitions * _ANSWERED_PARTITION.size + 4
    if len(body) != expected or body[4 : 6 + len(topic)] != _STRING_LENGTH.pack(len(topic)) + topic:
        return None
    count, size = _INT32.unpack_from(body)[0], _INT32.unpack_from(body, 6 + len(topic))[0]
    if count != 1 or size != partitions:
        return None
    read = _ANSWERED_PARTITION.unpack_from
    at = 10 + len(topic)
    return {
        index: (error, base)
        for index, error, base, _ in (
            read(body, at + i * _ANSWERED_PARTITION.size) for i in range(partitions)
        )
    }
