"""Every share-partition of every share group: the state machine `__share_group_state` is replayed into.

Pure, like the other coordinators: the broker's share service reads the log and hands batches in, and
persists what `record` returns after each change. Replay (`apply`) takes records one at a time in log order:
a snapshot replaces a share-partition's state, an update (Kafka's delta record) is laid over it, a
tombstone forgets it. A record that does not parse raises (ShareRecordError), and the replay skips it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sluice.coordinator.share.partition import SharePartition, StateBatch
from sluice.coordinator.share.records import (
    NO_START_OFFSET,
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    SharePartitionKey,
    ShareState,
    decode_key,
    decode_value,
    encode_key,
    encode_snapshot,
)

KeyValue = tuple[bytes, bytes | None]


class ShareStates:
    def __init__(self, delivery_limit: Callable[[str], int]) -> None:
        # The group's share.delivery.count.limit, asked for when a state is restored.
        self.delivery_limit = delivery_limit
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self.snapshot_epochs: dict[SharePartitionKey, int] = {}
        # Kafka's updates are laid over the snapshot they follow; kept only while replaying such a log.
        self._replayed: dict[SharePartitionKey, ShareState] = {}

    # ----- replay -----

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        record_type, share_key = decode_key(key)
        if value is None:
            if record_type == SNAPSHOT_TYPE:
                self.forget(share_key)
            return
        state = decode_value(record_type, value)
        if state.is_update:
            base = self._replayed.get(share_key)
            if base is None or base.snapshot_epoch != state.snapshot_epoch:
                return  # an update of a snapshot that is gone: nothing to lay it over
            state = _laid_over(base, state)
        self._replayed[share_key] = state
        self.snapshot_epochs[share_key] = state.snapshot_epoch
        self.partitions[share_key] = SharePartition.restore(
            state.start_offset, list(state.batches), self.delivery_limit(share_key.group_id), state.state_epoch
        )

    def loaded(self, now_ms: int) -> list[KeyValue]:
        """Replay is over: the replayed snapshots were only needed to lay Kafka's updates over. Nothing to
        append."""
        self._replayed.clear()
        return []

    # ----- state -----

    def get(self, key: SharePartitionKey) -> SharePartition | None:
        return self.partitions.get(key)

    def start(self, key: SharePartitionKey, start_offset: int) -> SharePartition:
        partition = self.partitions[key] = SharePartition(start_offset)
        return partition

    def forget(self, key: SharePartitionKey) -> None:
        self.partitions.pop(key, None)
        self.snapshot_epochs.pop(key, None)
        self._replayed.pop(key, None)

    def of_group(self, group_id: str) -> Iterator[tuple[SharePartitionKey, SharePartition]]:
        for key, partition in list(self.partitions.items()):
            if key.group_id == group_id:
                yield key, partition

    def groups(self) -> set[str]:
        return {key.group_id for key in self.partitions}

    # ----- records -----

    def record(self, key: SharePartitionKey) -> KeyValue:
        """The snapshot record of `key`'s current state (a tombstone once it is forgotten)."""
        partition = self.partitions.get(key)
        if partition is None:
            return encode_key(key), None
        epoch = self.snapshot_epochs.get(key, -1) + 1
        self.snapshot_epochs[key] = epoch
        state = ShareState(epoch, partition.state_epoch, partition.start_offset, tuple(partition.state_batches()))
        return encode_key(key), encode_snapshot(state)

    @staticmethod
    def tombstones(key: SharePartitionKey) -> list[KeyValue]:
        """What removes a share-partition from the topic for good (Kafka's update key too)."""
        return [(encode_key(key, SNAPSHOT_TYPE), None), (encode_key(key, UPDATE_TYPE), None)]


def _laid_over(base: ShareState, update: ShareState) -> ShareState:
    """Kafka's update record applied to the snapshot it follows: its batches replace the offsets they cover."""
    batches = list(base.batches)
    for new in update.batches:
        kept: list[StateBatch] = []
        for old in batches:
            if old.last < new.first or old.first > new.last:
                kept.append(old)
                continue
            if old.first < new.first:
                kept.append(StateBatch(old.first, new.first - 1, old.state, old.delivery_count))
            if old.last > new.last:
                kept.append(StateBatch(new.last + 1, old.last, old.state, old.delivery_count))
        kept.append(new)
        batches = sorted(kept, key=lambda b: b.first)
    start = base.start_offset if update.start_offset == NO_START_OFFSET else update.start_offset
    batches = [b for b in batches if b.last >= start]
    return ShareState(base.snapshot_epoch, base.state_epoch, start, tuple(batches))
