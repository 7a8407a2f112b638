"""Key -> partition functions of the clients the gateway must agree with.

`sarama_hash_partition` reproduces kafka-pixy (Go, sarama's default hash
partitioner), so keys land where kafka-pixy put them; `murmur2_partition`
reproduces the Java client's default partitioner; `Partitioner` adds sarama's
round robin, the one choice that keeps state.
"""

from __future__ import annotations

import random

_FNV_OFFSET_BASIS = 0x811C9DC5
_FNV_PRIME = 0x01000193
_MASK32 = 0xFFFFFFFF


def fnv1a_32(data: bytes) -> int:
    hash_value = _FNV_OFFSET_BASIS
    for byte in data:
        hash_value = ((hash_value ^ byte) * _FNV_PRIME) & _MASK32
    return hash_value


def _as_int32(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


def sarama_hash_partition(key: bytes, partition_count: int) -> int:
    """sarama: int32(fnv1a) % n with Go's truncating remainder, then negated if negative."""
    signed = _as_int32(fnv1a_32(key))
    # Go's % keeps the dividend's sign, so |signed| % n is the magnitude it then negates back.
    return abs(signed) % partition_count


def murmur2(data: bytes) -> int:
    """The Java client's murmur2 (Utils.murmur2), as an unsigned 32-bit value."""
    seed, multiplier = 0x9747B28C, 0x5BD1E995
    length = len(data)
    hash_value = (seed ^ length) & _MASK32
    whole = length & ~3
    for index in range(0, whole, 4):
        k = int.from_bytes(data[index : index + 4], "little")
        k = (k * multiplier) & _MASK32
        k ^= k >> 24
        k = (k * multiplier) & _MASK32
        hash_value = ((hash_value * multiplier) & _MASK32) ^ k
    remainder = length & 3
    if remainder == 3:
        hash_value ^= data[whole + 2] << 16
    if remainder >= 2:
        hash_value ^= data[whole + 1] << 8
    if remainder >= 1:
        hash_value ^= data[whole]
        hash_value = (hash_value * multiplier) & _MASK32
    hash_value ^= hash_value >> 13
    hash_value = (hash_value * multiplier) & _MASK32
    hash_value ^= hash_value >> 15
    return hash_value


def murmur2_partition(key: bytes, partition_count: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partition_count


def choose_partition(key: bytes | None, partition_count: int, partitioner: str) -> int:
    """kafka-pixy's rule: no key -> random partition, else the configured hash."""
    if key is None or partitioner == "random":
        return random.randrange(partition_count)
    if partitioner == "murmur2":
        return murmur2_partition(key, partition_count)
    return sarama_hash_partition(key, partition_count)


class Partitioner:
    """One producer's partition choice: a stateless `choose_partition` rule, or round robin.

    Round robin follows sarama's: a counter per topic hands out partitions 0, 1, ... in turn, keys
    ignored, and starts over at 0 once it reaches the topic's current partition count.
    """

    def __init__(self, partitioner: str) -> None:
        self.partitioner = partitioner
        self._next_partition_by_topic: dict[str, int] = {}

    def choose(self, topic: str, key: bytes | None, partition_count: int) -> int:
        if self.partitioner != "roundrobin":
            return choose_partition(key, partition_count, self.partitioner)
        partition = self._next_partition_by_topic.get(topic, 0)
        if partition >= partition_count:
            partition = 0
        self._next_partition_by_topic[topic] = partition + 1
        return partition
