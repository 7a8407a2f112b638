from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sluice.storage import DiskStorage, MemoryStorage, PartitionLog, Storage

StorageFactory = Callable[[], Storage]


@pytest.fixture(params=["memory", "disk"])
def open_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StorageFactory]:
    """Opens the engine under test; the disk engine reopens the same directory each call."""
    opened: list[Storage] = []
    memory: list[MemoryStorage] = []

    def factory() -> Storage:
        if request.param == "memory":
            if not memory:
                memory.append(MemoryStorage())
            return memory[0]
        storage = DiskStorage(tmp_path / "data")
        opened.append(storage)
        return storage

    yield factory
    for storage in opened:
        storage.close(clean=False)
    for storage in memory:
        storage.close()


@pytest.fixture
def make_log(open_engine: StorageFactory) -> Callable[..., PartitionLog]:
    """A fresh single-partition topic's log with the given topic configs."""
    storage = open_engine()
    created = [0]

    def factory(**configs: str) -> PartitionLog:
        created[0] += 1
        name = f"topic{created[0]}"
        storage.create_topic(name, 1, {key.replace("_", "."): value for key, value in configs.items()})
        return storage.log(name, 0)

    return factory
