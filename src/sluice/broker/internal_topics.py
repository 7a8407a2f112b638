"""Internal topics: a compacted topic the broker writes itself and replays into a pure state machine on start.

`__consumer_offsets` (the group coordinator) and `__transaction_state` (the transaction coordinator) are
both this shape, as the schema registry's `_schemas` will be:
- `open` creates the topic on first start (one partition, cleanup.policy=compact, its own segment.bytes);
- `replay` reads every keyed record back, in log order, for the machine's `load`;
- `append` writes the (key, value) records the machine returned as one batch, through the broker's public
  `append_internal` (producer state, high watermark and group commit as for any append);
- a full disk met while appending is reported to the broker's free-space guard, so produce and the
  coordinators' timers stop writing until space is back, and the error goes to the caller.

The layouts of the two topics' records are in docs/storage.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from sluice.broker.broker import Broker, PartitionState
from sluice.errors import CorruptRecordError
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches
from sluice.storage.api import PartitionLog
from sluice.storage.log import DiskFull

_log = logging.getLogger("sluice.broker")

# How much of the log one read during replay takes.
REPLAY_CHUNK_BYTES = 1 << 20

KeyValue = tuple[bytes, bytes | None]
Machine = TypeVar("Machine")


@dataclass
class InternalTopic:
    broker: Broker
    name: str
    segment_bytes: int

    @classmethod
    def open(cls, broker: Broker, name: str, segment_bytes: int) -> InternalTopic:
        """The topic, created if this data directory has never had it."""
        if broker.storage.topic(name) is None:
            broker.create_topic(
                name, 1, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}, internal=True
            )
        return cls(broker, name, segment_bytes)

    @property
    def partition(self) -> PartitionState:
        return self.broker.partition(self.name, 0)

    def replay(self) -> list[KeyValue]:
        """Every keyed record of the topic, oldest first (the last one of a key is its state)."""
        return list(read_keyed_records(self.partition.log, self.name, REPLAY_CHUNK_BYTES))

    def append(self, records: list[KeyValue], now_ms: int) -> None:
        """Append `records` as one batch (a None value is a tombstone). Raises KafkaError or DiskFull."""
        if not records:
            return
        batch = encode_batch(
            [Record(i, 0, key, value, []) for i, (key, value) in enumerate(records)], base_timestamp=now_ms
        )
        try:
            self.broker.append_internal(self.name, 0, batch, now_ms)
        except DiskFull:
            if self.broker.free_space is not None:
                self.broker.free_space.disk_full(now_ms)
            raise

    def flush(self) -> None:
        """fsync the topic now (a record that must be durable before anything it allows is written)."""
        self.partition.log.flush()


class InternalTopicService(Generic[Machine]):
    """A coordinator whose state lives in an internal topic: the pure state machine (`coordinator`) and the
    topic its records go to. The group and transaction services build on this."""

    def __init__(self, broker: Broker, coordinator: Machine, topic: InternalTopic) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.topic = topic

    def persist(self, records: list[KeyValue], now_ms: int) -> None:
        """Append the records the machine returned (nothing to do for none)."""
        self.topic.append(records, now_ms)


def read_keyed_records(log: PartitionLog, name: str, chunk_bytes: int) -> Iterator[KeyValue]:
    """Every keyed record of an internal topic's log, for replay at start. A batch that fails its CRC (a
    flipped byte after a clean stop is not caught by recovery) is skipped with an error line: the records
    before and after it still count, and the broker still comes up."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, chunk_bytes)
        if not data:
            break
        for pos, header in iter_batches(data):
            try:
                _, records = decode_batch(data, pos)
            except CorruptRecordError as exc:
                _log.error(
                    "%s: skipping damaged batch at offsets %d-%d: %s",
                    name,
                    header.base_offset,
                    header.last_offset,
                    exc.message,
                )
                records = []
            for record in records:
                if record.key is not None:
                    yield record.key, record.value
            offset = header.last_offset + 1
