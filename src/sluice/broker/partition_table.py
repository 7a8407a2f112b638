"""The broker's partitions by (topic, index), each loaded on first use.

Start-up only learns which partitions exist (from the topic metadata); a partition's state (its log,
recovered after a crash, its producers and aborted transactions) is built the first time anything looks
it up, so the port opens in the same time for 50 partitions or 50,000. Membership tests and iteration over
the keys never load; `items()`/`values()` load everything (the server's warm-up does that in slices,
after the port opened).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Generic, TypeVar

Key = tuple[str, int]
State = TypeVar("State")


class PartitionTable(MutableMapping[Key, State], Generic[State]):
    def __init__(self, load: Callable[[Key], State]) -> None:
        self._states: dict[Key, State | None] = {}
        self._load = load

    def add(self, key: Key) -> None:
        """Know `key` without loading it (a no-op when it is known)."""
        self._states.setdefault(key, None)

    def _loaded(self, key: Key) -> State:
        state = self._load(key)
        if key in self._states:  # not deleted while it loaded
            self._states[key] = state
        return state

    def get(self, key: Key, default: State | None = None) -> State | None:  # type: ignore[override]
        state = self._states.get(key)
        if state is not None:
            return state
        if key not in self._states:
            return default
        return self._loaded(key)

    def __getitem__(self, key: Key) -> State:
        state = self._states[key]
        return state if state is not None else self._loaded(key)

    def peek(self, key: Key) -> State | None:
        """The state if loaded, else None, never loading."""
        return self._states.get(key)

    def peeker(self) -> Callable[[Key], State | None]:
        """`peek` as the table's own dict lookup: for a pass over thousands of keys, no Python call each."""
        return self._states.get

    def is_loaded(self, key: Key) -> bool:
        return self._states.get(key) is not None

    def unloaded(self) -> list[Key]:
        return [key for key, state in self._states.items() if state is None]

    def loaded_items(self) -> list[tuple[Key, State]]:
        return [(key, state) for key, state in self._states.items() if state is not None]

    def __setitem__(self, key: Key, state: State) -> None:
        self._states[key] = state

    def __delitem__(self, key: Key) -> None:
        del self._states[key]

    def pop(self, key: Key, default: State | None = None) -> State | None:  # type: ignore[override]
        """Forget `key` without loading it; its state if it was loaded."""
        return self._states.pop(key, None) if key in self._states else default

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def __iter__(self) -> Iterator[Key]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)
