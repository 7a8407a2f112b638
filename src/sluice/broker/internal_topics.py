"""Internal topics: the broker-log backend of a state topic (the contract both backends share, and the
Kafka-client backend the schema registry's `_schemas` uses, are described in sluice.state_topic).

`__consumer_offsets` (the group coordinator) and `__transaction_state` (the transaction coordinator) are
kept this way:
- `open` creates the topic on first start (one partition, cleanup.policy=compact, its own segment.bytes);
- `replay` reads every record back through the shared `Replayer`, in log order, and hands the keyed ones
  to the machine's `load`;
- `append` writes the (key, value) records the machine returned as one batch, through the broker's public
  `append_internal` (producer state, high watermark and group commit as for any append);
- a full disk met while appending is reported to the broker's free-space guard, so produce and the
  coordinators' timers stop writing until space is back, and the error goes to the caller.

The layouts of the two topics' records are in docs/storage.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from sluice.broker.broker import Broker, PartitionState
from sluice.errors import CorruptRecordError
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches
from sluice.state_topic import Collected, KeyValue, OffsetRecord, Replayer, topic_config
from sluice.storage.api import PartitionLog
from sluice.storage.log import DiskFull

_log = logging.getLogger("sluice.broker")

# How much of the log one read during replay takes.
REPLAY_CHUNK_BYTES = 1 << 20

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
            broker.create_topic(name, 1, topic_config(segment_bytes), internal=True)
        return cls(broker, name, segment_bytes)

    @property
    def partition(self) -> PartitionState:
        return self.broker.partition(self.name, 0)

    def replay(self) -> list[KeyValue]:
        """Every keyed record of the topic, oldest first (the last one of a key is its state)."""
        log = self.partition.log
        collected = Collected()
        replayer = Replayer(self.name, collected)
        replayer.feed(read_records(log, self.name, REPLAY_CHUNK_BYTES))
        return collected.records

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
    topic its records go to. The group and transaction services build on this.

    Loading and unloading, as Kafka's coordinators do when they gain or lose their partition: when the
    topic cannot be written (full disk, I/O error) the service unloads (`unload`): the machine's state is
    dropped, since it may be ahead of the log, and the calls it gets are refused with NOT_COORDINATOR, so
    clients look for the coordinator again. It loads again (`ensure_loaded`: a fresh machine, the topic
    replayed into it) at the first call once the topic can be written."""

    def __init__(
        self, broker: Broker, coordinator: Machine, topic: InternalTopic, load: Callable[[int], Machine]
    ) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.topic = topic
        self.loaded = True
        self._load = load

    def persist(self, records: list[KeyValue], now_ms: int) -> None:
        """Append the records the machine returned (nothing to do for none)."""
        self.topic.append(records, now_ms)

    def refusal(self, now_ms: int) -> str | None:
        """Why the topic cannot take a write now, or None."""
        return self.topic.partition.log.offline_reason or self.broker.write_refusal(now_ms)

    def unload(self, reason: str) -> None:
        if not self.loaded:
            return
        self.loaded = False
        _log.warning(
            "%s cannot be written (%s): its coordinator unloads until it can", self.topic.name, reason
        )
        self.unloaded()

    def unloaded(self) -> None:
        """What a service does when it unloads (answer what it holds, drop its state)."""

    def ensure_loaded(self, now_ms: int) -> bool:
        """True when loaded, loading again first if the topic can be written again."""
        if self.loaded:
            return True
        if self.refusal(now_ms) is not None:
            return False
        self.coordinator = self._load(now_ms)
        self.loaded = True
        _log.info("%s can be written again: its coordinator is loaded", self.topic.name)
        self.reloaded(now_ms)
        return True

    def reloaded(self, now_ms: int) -> None:
        """What a service does once loaded again (finish what the log shows half done)."""


def read_records(log: PartitionLog, name: str, chunk_bytes: int) -> Iterator[OffsetRecord]:
    """Every record of an internal topic's log with its offset, for replay at start. A batch that fails its CRC (a
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
                yield header.base_offset + record.offset_delta, record.key, record.value
            offset = header.last_offset + 1
