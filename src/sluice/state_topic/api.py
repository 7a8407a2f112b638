"""The state-topic contract, the same for both backends (the idea, and how to add a state topic, are in the
package's docstring: sluice.state_topic).

Pure code with no I/O and no import from the rest of sluice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

log = logging.getLogger("sluice.state_topic")

# One record of a state topic: its key and value (None is a tombstone).
KeyValue = tuple[bytes, bytes | None]
# A record as read back: its offset, key and value (a machine decides what a record without a key means).
OffsetRecord = tuple[int, bytes | None, bytes | None]


class StateMachine(Protocol):
    """What a state topic is replayed into.

    `apply` takes one record at a time, in offset order: every record of the topic at start, and on the
    Kafka-client backend every record appended later, by this process or another. A record `apply` raises
    on is skipped, loudly, and the replay goes on. `loaded` is called once the replay reached the end of
    the topic (with the time, for a machine whose timers start at load); what it returns is appended (a
    layout migration, say; usually nothing)."""

    def apply(self, key: bytes | None, value: bytes | None) -> None: ...

    def loaded(self, now_ms: int) -> list[KeyValue]: ...


def topic_config(segment_bytes: int | None = None) -> dict[str, str]:
    """The configs a state topic is created with (the segment size only where the caller sets one)."""
    config = {"cleanup.policy": "compact"}
    if segment_bytes is not None:
        config["segment.bytes"] = str(segment_bytes)
    return config


class StateTopic:
    """A compacted one-partition topic replayed into a machine: what both backends are
    (sluice.state_topic.local.LocalStateTopic, sluice.state_topic.kafka.KafkaStateTopic).

    `applied` is the next offset the machine lacks: everything below it is in the machine. A record below
    it (read twice, after a reader restarts) is not applied again."""

    def __init__(self, name: str, machine: StateMachine) -> None:
        self.name = name
        self.machine = machine
        self.applied = 0

    def replay(self, records: Iterable[OffsetRecord]) -> int:
        """Apply `records` (offset order) to the machine; the number applied."""
        count = 0
        for offset, key, value in records:
            if offset < self.applied:
                continue
            try:
                self.machine.apply(key, value)
            except Exception:  # a machine bug must not stop the replay: the record is skipped, loudly
                log.exception("%s offset %d could not be applied", self.name, offset)
            self.applied = offset + 1
            count += 1
        return count
