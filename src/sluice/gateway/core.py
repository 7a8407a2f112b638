"""Consume-and-ack semantics of the gateway, free of I/O.

Nothing here touches sockets, threads or clocks: time is passed in as a float
(seconds, any monotonic origin). The Kafka side feeds fetched messages in and
takes commit points out; the API side takes messages to hand out and reports
acknowledgements.

Offsets are tracked per (group, topic, partition) by a `PartitionTracker`:

* a message handed out ("offered") must be acknowledged within `ack_timeout`,
  otherwise it is handed out again, possibly to another caller;
* at most `max_pending` messages of a partition are offered and un-acked at
  once; past that the partition hands out nothing new until acks arrive;
* after `max_retries` re-deliveries a message is dead-lettered: reported so the
  caller can park it elsewhere (-1: retry forever). With `hold_dead_letters` it
  stays un-acknowledged (and is never handed out again) until the caller
  confirms that the dead-letter topic has it; a failed dead-letter produce is
  offered again after a growing backoff. Without it (nowhere to park them) it
  is acknowledged at once;
* the committed offset is the lowest un-acked offset, and the acknowledged
  ranges above it travel in the commit metadata string, encoded as kafka-pixy
  does, so that a restarted gateway (or a kafka-pixy) redelivers only what was
  not acknowledged.

The pieces: `sparse_acks` (the metadata codec), `batches` (what is handed out, and the reply byte
budget), `tracker` (one partition) and, here, `GroupTopicCore` (every partition of a topic for a group).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .batches import Batch, ByteBudget, HandsOut, Message, RawMessage, count_messages
from .tracker import AckOutcome, CommitPoint, PartitionTracker, TrackerSettings


@dataclass
class GroupTopicCore(HandsOut):
    """All partitions of one topic that this gateway holds for one group."""

    settings: TrackerSettings = field(default_factory=TrackerSettings)
    trackers: dict[int, PartitionTracker] = field(default_factory=dict)
    # partition -> highest offset handed out before the partition was revoked
    released: dict[int, int] = field(default_factory=dict)
    _rotation: int = 0

    def assign(self, partition: int, committed_offset: int, metadata: str = "") -> PartitionTracker:
        tracker = PartitionTracker(
            partition,
            committed_offset,
            metadata,
            ack_timeout=self.settings.ack_timeout,
            max_pending=self.settings.max_pending,
            max_retries=self.settings.max_retries,
            max_metadata_length=self.settings.max_metadata_length,
            hold_dead_letters=self.settings.hold_dead_letters,
            dead_letter_backoff=self.settings.dead_letter_backoff,
            dead_letter_max_backoff=self.settings.dead_letter_max_backoff,
        )
        self.trackers[partition] = tracker
        return tracker

    def revoke(self, partition: int) -> CommitPoint | None:
        tracker = self.trackers.pop(partition, None)
        if tracker is None:
            return None
        self.released[partition] = max(self.released.get(partition, -1), tracker.highest_handed_out)
        return tracker.commit_point()

    def pending_count(self) -> int:
        return sum(tracker.pending_count for tracker in self.trackers.values())

    def parked_count(self) -> int:
        return sum(tracker.parked_count for tracker in self.trackers.values())

    def add_fetched(self, messages: Iterable[RawMessage | Message]) -> None:
        for message in messages:
            tracker = self.trackers.get(message[0])
            if tracker is not None:
                tracker.add_fetched(message)

    def add_batches(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            tracker = self.trackers.get(batch.partition)
            if tracker is not None:
                tracker.add_batch(batch)

    def take_batches(
        self, now: float, limit: int, max_pending: int | None = None, max_bytes: int | None = None
    ) -> list[Batch]:
        """Up to `limit` messages, in turns over the partitions starting after the last one served.

        A first turn takes an even share from each partition, so one busy partition cannot starve the
        rest; a second turn fills what room is left from whichever partitions still have messages. Two
        turns, not shrinking shares until the room is used up: those cut the batches into ever smaller
        runs, and every run costs a reply entry, an offer and an acknowledgement of its own.
        `max_pending` overrides the trackers' own limit of un-acked messages (batch and stream calls);
        `max_bytes` bounds the reply (see `ByteBudget`), shared by all partitions.
        """
        partitions = sorted(self.trackers)
        count = len(partitions)
        batches: list[Batch] = []
        if not count:
            return batches
        start, last_served = self._rotation, -1
        room = limit
        budget = ByteBudget(max_bytes)
        # The first turn's even share is one of messages and one of bytes alike.
        byte_share = None if max_bytes is None else max(max_bytes // count, 1)
        for share, byte_portion in ((max(limit // count, 1), byte_share), (limit, None)):
            for step in range(count):
                if room <= 0 or budget.exhausted:
                    break
                index = (start + step) % count
                part = budget.part(byte_portion)
                taken = self.trackers[partitions[index]].take_within(now, min(share, room), max_pending, part)
                budget.charge(part)
                if taken:
                    batches.extend(taken)
                    room -= count_messages(taken)
                    last_served = index
            if room <= 0 or budget.exhausted:
                break
        if last_served >= 0:
            self._rotation = (last_served + 1) % count
        return batches

    def has_waiting(self, now: float) -> bool:
        return any(tracker.has_waiting(now) for tracker in self.trackers.values())

    def ack(self, partition: int, offset: int) -> AckOutcome:
        tracker = self.trackers.get(partition)
        if tracker is None:
            # A partition that moved to another group member after we handed out
            # messages of it: their late acks are expected and simply too late.
            if offset <= self.released.get(partition, -1):
                return AckOutcome.DUPLICATE
            return AckOutcome.NOT_HANDED_OUT
        return tracker.ack(offset)

    def ack_range(self, partition: int, begin: int, end: int) -> tuple[int, int]:
        """Acknowledge offsets [begin, end) of a partition: (newly acked, never handed out)."""
        tracker = self.trackers.get(partition)
        if tracker is None:
            # As in `ack`: late acks of a revoked partition are too late, not wrong.
            if end - 1 <= self.released.get(partition, -1):
                return 0, 0
            return 0, max(end - max(begin, self.released.get(partition, -1) + 1), 0)
        return tracker.ack_range(begin, end)

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (t.next_deadline() for t in self.trackers.values()) if d is not None]
        return min(deadlines) if deadlines else None

    def take_commits(self) -> dict[int, CommitPoint]:
        commits: dict[int, CommitPoint] = {}
        for partition, tracker in self.trackers.items():
            point = tracker.take_commit_if_changed()
            if point is not None:
                commits[partition] = point
        return commits

    def forget_last_commits(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            tracker = self.trackers.get(partition)
            if tracker is not None:
                tracker.forget_last_commit()

    def take_dead_letters(self, now: float | None = None) -> list[Message]:
        """Messages given up after max_retries; with `now`, expired ones are collected first."""
        letters: list[Message] = []
        for tracker in self.trackers.values():
            if now is not None:
                tracker.expire(now)
            letters.extend(tracker.take_dead_letters())
        return letters

    def take_dead_letter_retries(self, now: float) -> list[Message]:
        """Held dead letters due for another produce attempt (see `PartitionTracker.dead_letter_failed`)."""
        letters: list[Message] = []
        for tracker in self.trackers.values():
            letters.extend(tracker.take_dead_letter_retries(now))
        return letters

    def dead_letter_confirmed(self, partition: int, offset: int) -> bool:
        tracker = self.trackers.get(partition)
        # A revoked partition: its next owner starts from the last commit and gives the message up again.
        return tracker is not None and tracker.dead_letter_confirmed(offset)

    def dead_letter_failed(self, partition: int, offset: int, now: float) -> bool:
        tracker = self.trackers.get(partition)
        return tracker is not None and tracker.dead_letter_failed(offset, now)

    def buffered_counts(self) -> dict[int, int]:
        return {partition: tracker.buffered_count for partition, tracker in self.trackers.items()}
