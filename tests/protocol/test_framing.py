"""Frame assembly: any chunking of the byte stream gives the same frames; limits are enforced up front."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.protocol.framing import TLS_JOIN_BYTES, FrameBuffer, FrameError, coalesce


@given(st.lists(st.binary(min_size=1, max_size=300), max_size=20), st.lists(st.integers(1, 97), min_size=1))
def test_any_chunking_yields_the_same_frames(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    buffer = FrameBuffer(1000)
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        size = cuts[i % len(cuts)]
        i += 1
        out += buffer.feed(stream[pos : pos + size])
        pos += size
    assert out == bodies
    assert buffer.buffered == 0


@pytest.mark.parametrize("prefix", [0, -1, 1001])
def test_impossible_sizes_are_refused(prefix: int) -> None:
    with pytest.raises(FrameError):
        FrameBuffer(1000).feed(struct.pack(">i", prefix) + b"x")


def test_a_claimed_size_costs_nothing_until_bytes_arrive() -> None:
    buffer = FrameBuffer(100 * 1024 * 1024)
    buffer.feed(struct.pack(">i", 100 * 1024 * 1024) + b"x" * 10)
    assert len(buffer.writable()) < 1024 * 1024


def test_coalesce_joins_small_parts_and_passes_big_ones_through_in_order() -> None:
    big = memoryview(b"B" * TLS_JOIN_BYTES)
    parts = [(7 + len(big)).to_bytes(4, "big"), b"ab", bytearray(b"c"), memoryview(b"de"), big, b"f", b"g"]
    joined = coalesce(parts)
    # The header parts become one buffer, the record batch is not copied, the tail is one buffer.
    assert [len(p) for p in joined] == [4 + 5, TLS_JOIN_BYTES, 2]
    assert joined[1] is big
    assert b"".join(joined) == b"".join(parts)


def test_coalesce_never_builds_a_buffer_over_the_join_limit() -> None:
    parts = [b"x" * (TLS_JOIN_BYTES // 3 + 1) for _ in range(7)]
    joined = coalesce(parts)
    assert all(len(p) <= TLS_JOIN_BYTES for p in joined)
    assert len(joined) < len(parts)
    assert b"".join(joined) == b"".join(parts)
    assert coalesce([]) == []
