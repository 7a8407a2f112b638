"""What one librdkafka fetch brings a group consumer: its records as `Batch`es, and the partitions it cannot
read past."""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Iterable

from confluent_kafka import Message as Record

from sluice.client.stuck import stuck_at

from .batches import Batch, Headers
from .errors import Failure, GatewayError

log = logging.getLogger(__name__)

_partition, _offset = Record.partition, Record.offset
_key, _value, _headers, _timestamp = Record.key, Record.value, Record.headers, Record.timestamp
_second = operator.itemgetter(1)


def batches_of(records: list[Record], attempts: list[int] | None = None) -> list[Batch]:
    """librdkafka's messages as one `Batch` per run of one partition, column by column; with `attempts`
    (each message's redeliveries so far, a share group's delivery count less one), per run of one partition
    and attempt.

    Mapping the accessors over the list runs the loops in C: about a third of the cost of building one
    tuple per message, which is what the stream path's rate is made of.
    """
    partitions = list(map(_partition, records))
    offsets = list(map(_offset, records))
    keys = list(map(_key, records))
    values = list(map(_value, records))
    timestamps = list(map(_second, map(_timestamp, records)))
    raw_headers = list(map(_headers, records))
    count = len(records)
    if raw_headers.count(None) == count:
        headers: list[Headers] = [()] * count
    else:
        headers = [tuple((name, value or b"") for name, value in h) if h else () for h in raw_headers]
    if attempts is None:
        attempts = [0] * count
    if partitions.count(partitions[0]) == count and attempts.count(attempts[0]) == count:
        return [Batch(partitions[0], offsets, keys, values, headers, timestamps, attempts[0])]
    changes = (
        i for i in range(1, count) if partitions[i] != partitions[i - 1] or attempts[i] != attempts[i - 1]
    )
    bounds = [0, *changes, count]
    return [
        Batch(partitions[a], offsets[a:b], keys[a:b], values[a:b], headers[a:b], timestamps[a:b], attempts[a])
        for a, b in itertools.pairwise(bounds)
    ]


class UnreadablePartitions:
    """Partitions of one topic that a consumer cannot read past (`stuck_at`), and why. A caller
    that would otherwise wait out its long poll is told instead (`failure`), as Kafka's Java consumer stops
    there with an error, until the group's offset is moved past it or records come from the partition again.

    Noted from the consumer's thread and read on the event loop: single dict operations, atomic in CPython.
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._why: dict[int, str] = {}

    def __bool__(self) -> bool:
        return bool(self._why)

    def note(self, record: Record) -> bool:
        """Note `record`'s error if it is one of these (logged once per partition and offset); False for any
        other error."""
        stuck = stuck_at(record)
        if stuck is None:
            return False
        partition = record.partition()
        why = f"partition {partition} of {self.topic} {stuck}; move the group's offset past it to go on"
        if self._why.get(partition) != why:
            log.error("%s", why)
            self._why[partition] = why
        return True

    def clear(self, partitions: Iterable[int]) -> None:
        """These partitions are readable again (records came from them) or no longer this consumer's."""
        for partition in partitions:
            self._why.pop(partition, None)

    def failure(self) -> GatewayError | None:
        if not self._why:
            return None
        return GatewayError(Failure.DATA_LOSS, "; ".join(self._why[p] for p in sorted(self._why)))
