"""The cleaner's per-partition state: `cleaner.checkpoint` on disk (byte layout: docs/storage.md) and what
the manager remembers between passes."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from sluice.storage.files import write_atomically

CHECKPOINT_FILE = "cleaner.checkpoint"
_log = logging.getLogger("sluice.cleaner")


@dataclass(slots=True)
class CleanerCheckpoint:
    """`cleaner.checkpoint` in the partition directory (JSON, written atomically; see docs/storage.md)."""

    first_dirty_offset: int = 0
    last_cleaned_ms: int = -1
    # base offset -> (time of the pass that first cleaned the segment, whether it kept tombstones)
    segments: dict[int, tuple[int, bool]] = field(default_factory=dict)

    @classmethod
    def read(cls, directory: Path) -> CleanerCheckpoint:
        try:
            raw = json.loads((directory / CHECKPOINT_FILE).read_bytes())
            return cls(
                int(raw["first_dirty_offset"]),
                int(raw["last_cleaned_ms"]),
                {int(base): (int(ms), bool(tombs)) for base, (ms, tombs) in raw["segments"].items()},
            )
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError):
            _log.warning("unreadable %s in %s; the whole log counts as dirty", CHECKPOINT_FILE, directory)
            return cls()

    def write(self, directory: Path) -> None:
        document = {
            "first_dirty_offset": self.first_dirty_offset,
            "last_cleaned_ms": self.last_cleaned_ms,
            "segments": {str(base): [ms, tombs] for base, (ms, tombs) in self.segments.items()},
        }
        write_atomically(directory / CHECKPOINT_FILE, json.dumps(document).encode())

    def tombstone_deadline_ms(self, delete_retention_ms: int) -> int | None:
        deadlines = [ms + delete_retention_ms for ms, tombs in self.segments.values() if tombs]
        return min(deadlines) if deadlines else None


@dataclass(slots=True)
class PartitionCleanerState:
    """What the cleaner knows of one partition between passes (Kafka's LogCleanerManager keeps the same):
    its checkpoint, its dirty ratio at the last look, and why it gave up on it until restart ("" if not)."""

    checkpoint: CleanerCheckpoint
    dirty_ratio: float = 0.0
    uncleanable: str = ""

    @classmethod
    def read(cls, directory: Path) -> PartitionCleanerState:
        return cls(CleanerCheckpoint.read(directory))
