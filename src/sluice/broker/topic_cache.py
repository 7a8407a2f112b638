"""Answer parts built once per TopicMeta. Storage replaces a topic's TopicMeta on every change (partitions,
configs, a delete and re-create), so an entry is current exactly while it was built from the TopicMeta that
storage holds now; the answers that share the parts only read them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from sluice.storage.api import TopicMeta

T = TypeVar("T")


class PerTopicCache(Generic[T]):
    def __init__(self, build: Callable[[TopicMeta], T]) -> None:
        self._build = build
        self._entries: dict[str, tuple[TopicMeta, T]] = {}
        self._limit = 1024

    def get(self, meta: TopicMeta, current: Callable[[str], TopicMeta | None]) -> T:
        """The part for `meta`; `current` looks a name up in storage, to drop deleted topics' entries."""
        cached = self._entries.get(meta.name)
        if cached is not None and cached[0] is meta:
            return cached[1]
        if len(self._entries) >= self._limit:
            self._entries = {n: e for n, e in self._entries.items() if current(n) is e[0]}
            self._limit = max(1024, 2 * len(self._entries))
        value = self._build(meta)
        self._entries[meta.name] = (meta, value)
        return value
