"""A state topic: a compacted one-partition topic used as the log of a pure state machine — the contract.

Three services keep their state this way: the group coordinator (`__consumer_offsets`), the transaction
coordinator (`__transaction_state`) and the schema registry (`_schemas`). Each has one of two backends:
- the broker-log backend (sluice.broker.internal_topics), for state the broker keeps itself: it appends
  through the broker's own log API and replays the local log;
- the Kafka-client backend (sluice.client.internal_topic), for a service that talks to any Kafka: it
  produces with a Kafka producer and tails the topic with a consumer.

What both share is written here, once, as pure code with no I/O and no import from the rest of sluice (a
leaf every layer may use without bending the dependency direction):
- how the topic is created: one partition, `cleanup.policy=compact` (`topic_config`);
- the replay rule (`Replayer`): every record is applied to the machine in offset order, once; a record the
  machine cannot apply is skipped loudly rather than stopping the replay;
- the read-your-writes rule (`Replayer.wait` / `Replayer.feed`): a writer is answered only once the machine
  has applied everything up to and including its own last record.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from typing import Protocol

log = logging.getLogger("sluice.state_topic")

# One record of a state topic: its key and value (None is a tombstone).
KeyValue = tuple[bytes, bytes | None]
# A record as read back: its offset, key and value (a machine decides what a record without a key means).
OffsetRecord = tuple[int, bytes | None, bytes | None]


class StateMachine(Protocol):
    """What a state topic is replayed into: one record at a time, in log order."""

    def apply(self, key: bytes | None, value: bytes | None) -> None: ...


def topic_config(segment_bytes: int | None = None) -> dict[str, str]:
    """The configs a state topic is created with (the segment size only where the caller sets one)."""
    config = {"cleanup.policy": "compact"}
    if segment_bytes is not None:
        config["segment.bytes"] = str(segment_bytes)
    return config


class Replayer:
    """Feeds read-back records into a machine and tells which writers may now be answered.

    `applied` is the next offset to apply: everything below it is in the machine. A record below it (read
    twice, after a reader restarts) is not applied again."""

    def __init__(self, name: str, machine: StateMachine, applied: int = 0) -> None:
        self.name = name
        self.machine = machine
        self.applied = applied
        self._waiting: list[tuple[int, Hashable]] = []

    def feed(self, records: Iterable[OffsetRecord]) -> list[Hashable]:
        """Apply `records` (offset order); return the waiters whose target is now reached."""
        for offset, key, value in records:
            if offset < self.applied:
                continue
            try:
                self.machine.apply(key, value)
            except Exception:  # a machine bug must not stop the replay: the record is skipped, loudly
                log.exception("%s offset %d could not be applied", self.name, offset)
            self.applied = offset + 1
        return self._release()

    def wait(self, target: int, waiter: Hashable) -> bool:
        """Register `waiter` until everything below offset `target` is applied; False when it already is."""
        if self.applied >= target:
            return False
        self._waiting.append((target, waiter))
        return True

    def forget(self, waiter: Hashable) -> None:
        """Stop waiting for `waiter` (it timed out or was cancelled)."""
        self._waiting = [(t, w) for t, w in self._waiting if w is not waiter]

    def waiters(self) -> list[Hashable]:
        """Every waiter still waiting (to fail them when the reader closes)."""
        return [w for _, w in self._waiting]

    def _release(self) -> list[Hashable]:
        ready = [w for t, w in self._waiting if self.applied >= t]
        if ready:
            self._waiting = [(t, w) for t, w in self._waiting if self.applied < t]
        return ready


class Collected:
    """A machine that keeps the keyed records it is fed (a record without a key carries no state), for a
    machine loaded in one call (the coordinators' `load(records, now_ms)`)."""

    def __init__(self) -> None:
        self.records: list[KeyValue] = []

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is not None:
            self.records.append((key, value))
