"""The local backend of a state topic: a topic of the broker's own log, for state the broker keeps itself
(`__consumer_offsets`, `__transaction_state`); the contract is sluice.state_topic.api.

The broker is the topic's only writer, so its machine runs ahead of the log, as Kafka's coordinators do:
a call changes the machine and returns the records that describe the change; the service appends them
(`LocalStateTopic.append`, through `Broker.append_internal`: producer state, high watermark and group
commit as for any append) and holds the call's reply until the group commit made them durable. The log is
read back only to load: at start, and after an unload (`StateTopicService`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from sluice.errors import CorruptRecordError
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches
from sluice.state_topic.api import KeyValue, OffsetRecord, StateMachine, StateTopic, topic_config
from sluice.storage.api import PartitionLog, Storage

_log = logging.getLogger("sluice.state_topic")

# How much of the log one read during replay takes.
REPLAY_CHUNK_BYTES = 1 << 20


class _Partition(Protocol):
    @property
    def log(self) -> PartitionLog: ...


class LogOwner(Protocol):
    """What the local backend needs of the broker that owns the log (sluice.broker.broker.Broker)."""

    @property
    def storage(self) -> Storage: ...

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, str], *, internal: bool = False
    ) -> object: ...

    def partition(self, topic: str, index: int) -> _Partition: ...

    def append_internal(self, topic: str, index: int, batch: bytes, now_ms: int) -> int: ...

    def write_refusal(self, now_ms: int, size: int = 0) -> str | None: ...


class LocalStateTopic(StateTopic):
    def __init__(self, owner: LogOwner, name: str, machine: StateMachine) -> None:
        super().__init__(name, machine)
        self.owner = owner

    @classmethod
    def open(cls, owner: LogOwner, name: str, segment_bytes: int, machine: StateMachine) -> LocalStateTopic:
        """The topic, created if this data directory has never had it (not loaded yet: `load`)."""
        if owner.storage.topic(name) is None:
            owner.create_topic(name, 1, topic_config(segment_bytes), internal=True)
        return cls(owner, name, machine)

    @property
    def log(self) -> PartitionLog:
        return self.owner.partition(self.name, 0).log

    def load(self, machine: StateMachine, now_ms: int) -> int:
        """Replay the whole topic into `machine` (a fresh one, which becomes this topic's), tell it it is
        loaded and append what that returns. The number of records replayed. Raises as `append`."""
        self.machine, self.applied = machine, 0
        replayed = self.replay(read_records(self.log, self.name, REPLAY_CHUNK_BYTES))
        records = machine.loaded(now_ms)
        if records:
            self.append(records, now_ms)
            _log.info("%s: appended the %d records its machine returned once loaded", self.name, len(records))
        return replayed

    def append(self, records: list[KeyValue], now_ms: int) -> None:
        """Append the records the machine returned, as one batch (the machine already holds them). Raises
        KafkaError, OSError, or DiskFull (the broker's free-space guard is told: produce and the services'
        timers stop writing until space is back)."""
        if not records:
            return
        batch = encode_batch(
            [Record(i, 0, key, value, []) for i, (key, value) in enumerate(records)], base_timestamp=now_ms
        )
        self.applied = self.owner.append_internal(self.name, 0, batch, now_ms) + len(records)

    def flush(self) -> None:
        """fsync the topic now (a record that must be durable before anything it allows is written)."""
        self.log.flush()

    def refusal(self, now_ms: int) -> str | None:
        """Why the topic cannot take a write now, or None."""
        return self.log.offline_reason or self.owner.write_refusal(now_ms)


Machine = TypeVar("Machine", bound=StateMachine)


class StateTopicService(Generic[Machine]):
    """A broker service whose state is a machine (`coordinator`) kept in a local state topic `name`, made
    if missing (its segments `segment_bytes` long). The group and transaction services build on this.

    Loading and unloading, as Kafka's coordinators do when they gain or lose their partition: `load` makes
    a fresh machine, replays the topic into it and calls `on_loaded`. When the topic cannot be written
    (full disk, I/O error) the service unloads (`unload`): the machine is dropped, since it may be ahead of
    the log, `on_unloaded` answers what the service holds, and the calls it gets meanwhile are refused with
    NOT_COORDINATOR, so clients look for the coordinator again. It loads again at the first call once the
    topic can be written (`ensure_loaded`)."""

    def __init__(
        self, owner: LogOwner, name: str, segment_bytes: int, new_machine: Callable[[], Machine]
    ) -> None:
        self._new_machine = new_machine
        self.coordinator = new_machine()
        self.topic = LocalStateTopic.open(owner, name, segment_bytes, self.coordinator)
        self.loaded = False

    def load(self, now_ms: int) -> None:
        """Load a fresh machine from the topic (at start; and `ensure_loaded` after an unload)."""
        machine = self._new_machine()
        replayed = self.topic.load(machine, now_ms)
        self.coordinator = machine
        self.loaded = True
        _log.info("%s loaded: %d records replayed", self.topic.name, replayed)
        self.on_loaded(now_ms)

    def on_loaded(self, now_ms: int) -> None:
        """What a service does once loaded (finish what the log shows half done)."""

    def persist(self, records: list[KeyValue], now_ms: int) -> None:
        """Append the records the machine returned (nothing to do for none)."""
        self.topic.append(records, now_ms)

    def refusal(self, now_ms: int) -> str | None:
        """Why the topic cannot take a write now, or None."""
        return self.topic.refusal(now_ms)

    def unload(self, reason: str) -> None:
        if not self.loaded:
            return
        self.loaded = False
        _log.warning(
            "%s cannot be written (%s): its coordinator unloads until it can", self.topic.name, reason
        )
        self.coordinator = self._new_machine()
        self.on_unloaded()

    def on_unloaded(self) -> None:
        """What a service does when it unloads (answer what it holds, drop what goes with the machine)."""

    def ensure_loaded(self, now_ms: int) -> bool:
        """True when loaded, loading again first if the topic can be written again."""
        if self.loaded:
            return True
        if self.refusal(now_ms) is not None:
            return False
        self.load(now_ms)
        _log.info("%s can be written again: its coordinator is loaded", self.topic.name)
        return True


def read_records(log: PartitionLog, name: str, chunk_bytes: int) -> Iterator[OffsetRecord]:
    """Every record of a state topic's log with its offset, for replay. A batch that fails its CRC (a
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
