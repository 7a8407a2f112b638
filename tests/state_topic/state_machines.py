"""A state machine for the state-topic tests: what it was fed, in order, and when it was loaded."""

from __future__ import annotations


class Tally:
    """Last value per key, every key in the order applied, and the times `loaded` was called. `migration`
    is what `loaded` returns (records to append); a record with the key `poison` makes `apply` raise."""

    def __init__(
        self, migration: list[tuple[bytes, bytes | None]] | None = None, poison: bytes = b""
    ) -> None:
        self.values: dict[bytes, bytes | None] = {}
        self.order: list[bytes] = []
        self.loaded_at: list[int] = []
        self.migration = migration or []
        self.poison = poison

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        assert key is not None
        if key == self.poison:
            raise ValueError("cannot apply this record")
        self.values[key] = value
        self.order.append(key)

    def loaded(self, now_ms: int) -> list[tuple[bytes, bytes | None]]:
        self.loaded_at.append(now_ms)
        return self.migration
