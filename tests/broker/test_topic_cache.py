"""PerTopicCache: a part is rebuilt when storage replaces the topic's TopicMeta, and deleted topics' parts
are dropped once the cache reaches its limit."""

from __future__ import annotations

import uuid

from sluice.broker.topic_cache import PerTopicCache
from sluice.storage.api import TopicMeta


def test_parts_follow_the_current_topic_meta_and_deleted_topics_are_dropped() -> None:
    built: list[str] = []

    def build(meta: TopicMeta) -> int:
        built.append(meta.name)
        return meta.partitions

    storage = {f"t{i}": TopicMeta(f"t{i}", uuid.uuid4(), 1) for i in range(600)}
    cache = PerTopicCache(build)
    assert [cache.get(meta, storage.get) for meta in storage.values()] == [1] * 600
    assert cache.get(storage["t0"], storage.get) == 1 and len(built) == 600  # the second call is cached
    grown = storage["t0"] = TopicMeta("t0", storage["t0"].topic_id, 3)
    assert cache.get(grown, storage.get) == 3 and len(built) == 601
    for i in range(1, 600):
        del storage[f"t{i}"]
    for i in range(500):
        fresh = storage[f"n{i}"] = TopicMeta(f"n{i}", uuid.uuid4(), 7)
        assert cache.get(fresh, storage.get) == 7
    assert set(cache._entries) == {"t0"} | {f"n{i}" for i in range(500)}
