"""The broker as the log cleaner (sluice.storage.compaction) sees it: which partitions to look at now, and what
it may assume of their transactions and producers. Both run on the event loop (the cleaner's threads ask
through it), so they read the broker's state as requests leave it."""

from __future__ import annotations

from sluice.broker.broker import Broker
from sluice.storage.api import CompactableLog
from sluice.storage.compaction.offset_map import TxnFacts
from sluice.storage.config import TopicConfig


def compacted_logs(broker: Broker, now_ms: int) -> list[tuple[str, int, TopicConfig, CompactableLog]]:
    """Runs on the loop: the partitions the cleaner should look at now (cleanup.policy read afresh).
    None of them while writes are refused (free space below min_free_bytes, or a full disk): a pass needs room for
    a cleaned copy of up to segment.bytes before it frees anything."""
    found: list[tuple[str, int, TopicConfig, CompactableLog]] = []
    if broker.write_refusal(now_ms):
        return found
    storage = broker.storage
    configs: dict[str, TopicConfig | None] = {}  # parsed once per topic, not once per partition
    for topic, index in broker.partitions:
        if topic not in configs:
            meta = storage.topic(topic)
            configs[topic] = meta.config if meta is not None else None
        config = configs[topic]
        if config is None:
            continue
        if config.compacts and (log := storage.compactable_log(topic, index)) is not None:
            found.append((topic, index, config, log))
    return found


def txn_facts(broker: Broker, topic: str, index: int) -> TxnFacts:
    """Runs on the loop: what the cleaner may assume about the partition's transactions and producers."""
    state = broker.partitions.get((topic, index))
    if state is None:
        return TxnFacts()
    return TxnFacts(
        state.last_stable_offset,
        tuple((e.producer_id, e.first_offset, e.last_offset) for e in state.txn_index.entries),
        frozenset(p.recent[-1].base_offset for p in state.producers.producers.values() if p.recent),
    )
