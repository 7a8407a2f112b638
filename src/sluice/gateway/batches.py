"""Messages as the gateway hands them out: `Batch` (one partition's messages, column by column), and the
byte budget that bounds one reply."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

Headers = tuple[tuple[str, bytes], ...]


class Message(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int = 0


class Delivery(NamedTuple):
    message: Message
    # 0 for the first hand-out, n for the n-th redelivery.
    attempt: int


# A fetched message as a plain tuple in `Message`'s field order (what tests and single messages feed in).
RawMessage = tuple[int, int, bytes | None, bytes | None, Headers, int]


class Batch(NamedTuple):
    """Messages of one partition in offset order, column by column.

    Fetches arrive and batches leave in this shape so that the hot path handles one object per run of
    messages, not one per message: at stream rates the per-message objects and their bookkeeping were
    most of the gateway's CPU.
    """

    partition: int
    offsets: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers]
    timestamps: list[int]
    # 0 for the first hand-out, n for the n-th redelivery.
    attempt: int = 0

    @classmethod
    def of(cls, messages: Sequence[RawMessage | Message]) -> Batch:
        """A batch from messages of one partition."""
        return cls(
            messages[0][0],
            [m[1] for m in messages],
            [m[2] for m in messages],
            [m[3] for m in messages],
            [m[4] for m in messages],
            [m[5] for m in messages],
        )

    @property
    def contiguous(self) -> bool:
        offsets = self.offsets
        return offsets[-1] - offsets[0] == len(offsets) - 1

    def cut(self, start: int, stop: int) -> Batch:
        return Batch(
            self.partition,
            self.offsets[start:stop],
            self.keys[start:stop],
            self.values[start:stop],
            self.headers[start:stop],
            self.timestamps[start:stop],
            self.attempt,
        )

    def select(self, indexes: Sequence[int]) -> Batch:
        return Batch(
            self.partition,
            [self.offsets[i] for i in indexes],
            [self.keys[i] for i in indexes],
            [self.values[i] for i in indexes],
            [self.headers[i] for i in indexes],
            [self.timestamps[i] for i in indexes],
            self.attempt,
        )

    def messages(self) -> list[Message]:
        partition = self.partition
        return [
            Message(partition, offset, key, value, headers, timestamp)
            for offset, key, value, headers, timestamp in zip(
                self.offsets, self.keys, self.values, self.headers, self.timestamps, strict=True
            )
        ]

    def deliveries(self) -> list[Delivery]:
        return [Delivery(message, self.attempt) for message in self.messages()]


def deliveries_of(batches: Iterable[Batch]) -> list[Delivery]:
    return [delivery for batch in batches for delivery in batch.deliveries()]


class HandsOut:
    """What hands messages out, a partition's tracker or every partition of a topic (gateway.core): its
    `take_batches`, and the same as deliveries, one message at a time or up to `limit`."""

    def take_batches(
        self, now: float, limit: int, max_pending: int | None = None, max_bytes: int | None = None
    ) -> list[Batch]:
        raise NotImplementedError

    def next_delivery(self, now: float) -> Delivery | None:
        deliveries = self.take(now, 1)
        return deliveries[0] if deliveries else None

    def take(self, now: float, limit: int, max_pending: int | None = None) -> list[Delivery]:
        return deliveries_of(self.take_batches(now, limit, max_pending))


def count_messages(batches: Iterable[Batch]) -> int:
    return sum(len(batch.offsets) for batch in batches)


# What a message adds to a reply beyond its key, value and headers: offset, timestamp, field framing.
MESSAGE_OVERHEAD_BYTES = 32


def _message_bytes(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    size = MESSAGE_OVERHEAD_BYTES + (len(key) if key else 0) + (len(value) if value else 0)
    for name, data in headers:
        size += len(name) + len(data)
    return size


def reply_bytes(batch: Batch) -> int:
    """About what `batch` adds to a reply; sums run in C, the common case costs no Python per message."""
    total = sum(map(len, filter(None, batch.values))) + sum(map(len, filter(None, batch.keys)))
    if any(batch.headers):
        total += sum(len(name) + len(data) for headers in batch.headers for name, data in headers)
    return total + MESSAGE_OVERHEAD_BYTES * len(batch.offsets)


class ByteBudget:
    """Reply bytes left for one take (None: no limit).

    A reply stops before the message that would take it past the limit, except that its first message
    always goes: a message larger than the limit would otherwise never be handed out at all.
    """

    __slots__ = ("first_free", "left", "limit")

    def __init__(self, limit: int | None, first_free: bool = True) -> None:
        self.limit = self.left = limit
        self.first_free = first_free

    @property
    def exhausted(self) -> bool:
        return self.left is not None and self.left <= 0 and not self.first_free

    def part(self, portion: int | None) -> ByteBudget:
        """At most `portion` of what is left, for one of several takers; `charge` it back afterwards."""
        if self.left is None or portion is None:
            return self
        return ByteBudget(min(portion, self.left), self.first_free)

    def charge(self, part: ByteBudget) -> None:
        if part is self or part.left is None or part.limit is None or self.left is None:
            return
        self.left -= part.limit - part.left
        self.first_free = self.first_free and part.first_free

    def fit(self, batch: Batch) -> int:
        """How many leading messages of `batch` fit; they are charged to the budget."""
        count = len(batch.offsets)
        left = self.left
        if left is None or not count:
            return count
        total = reply_bytes(batch)
        if total > left:
            ends = list(itertools.accumulate(map(_message_bytes, batch.keys, batch.values, batch.headers)))
            count = bisect.bisect_right(ends, left)
            if count == 0 and self.first_free:
                count = 1
            total = ends[count - 1] if count else 0
        if count:
            self.left = left - total
            self.first_free = False
        return count
