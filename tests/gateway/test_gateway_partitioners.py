from __future__ import annotations

import pytest

from sluice.gateway.partitioners import (
    Partitioner,
    choose_partition,
    fnv1a_32,
    murmur2,
    murmur2_partition,
    sarama_hash_partition,
)


@pytest.mark.parametrize("data,expected", [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)])
def test_fnv1a_reference_vectors(data: bytes, expected: int) -> None:
    assert fnv1a_32(data) == expected


def test_sarama_negative_hash_is_negated_after_truncating_remainder() -> None:
    # int32(0xbf9cf968) = -1080231576; Go: -1080231576 % 7 = -4 -> 4.
    assert sarama_hash_partition(b"foobar", 7) == 4
    # int32(0x811c9dc5) = -2128831035; % 3 = -0 in Go -> 0; % 10 = -5 -> 5.
    assert sarama_hash_partition(b"", 3) == 0
    assert sarama_hash_partition(b"", 10) == 5
    # 0xe40c292c is negative too: -468965076 % 6 = -0 -> 0; % 5 = -1 -> 1.
    assert sarama_hash_partition(b"a", 6) == 0
    assert sarama_hash_partition(b"a", 5) == 1


@pytest.mark.parametrize(
    "data,expected_signed",
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_java_client(data: bytes, expected_signed: int) -> None:
    assert murmur2(data) == expected_signed & 0xFFFFFFFF


def test_murmur2_partition_uses_positive_mask() -> None:
    assert murmur2_partition(b"21", 4) == (-973932308 & 0x7FFFFFFF) % 4


def test_no_key_goes_to_any_partition() -> None:
    seen = {choose_partition(None, 4, "hash") for _ in range(200)}
    assert seen == {0, 1, 2, 3}
    assert choose_partition(b"k", 4, "hash") == sarama_hash_partition(b"k", 4)
    assert choose_partition(b"k", 4, "murmur2") == murmur2_partition(b"k", 4)


def test_round_robin_takes_each_partition_in_turn_per_topic_ignoring_keys() -> None:
    partitioner = Partitioner("roundrobin")
    orders = [partitioner.choose("orders", b"same-key", 3) for _ in range(7)]
    assert orders == [0, 1, 2, 0, 1, 2, 0]
    # Another topic has its own counter; the first keeps going where it stopped.
    assert [partitioner.choose("audit", None, 2) for _ in range(3)] == [0, 1, 0]
    assert partitioner.choose("orders", None, 3) == 1
    # Fewer partitions than the counter reached (sarama starts over at 0).
    assert partitioner.choose("orders", None, 2) == 0
    assert partitioner.choose("orders", None, 2) == 1


def test_partitioner_delegates_stateless_rules() -> None:
    assert Partitioner("hash").choose("t", b"k", 4) == sarama_hash_partition(b"k", 4)
    assert Partitioner("murmur2").choose("t", b"k", 4) == murmur2_partition(b"k", 4)
