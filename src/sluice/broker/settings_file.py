"""A JSON file of settings an operator made through the Kafka APIs (`{"version": N, ...}`), kept in the data
dir: replaced atomically, so a kill -9 leaves the old or the new file, and refused when damaged, naming the
file, since dropping it silently would lose what was set."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sluice.storage.files import write_atomically
from sluice.storage.metadata import storage_error

T = TypeVar("T")


def damaged(path: Path, problem: object, what: str) -> ValueError:
    return ValueError(f"{path} is damaged ({problem}); fix it or remove it to drop {what}")


@dataclass(frozen=True)
class SettingsFile:
    """`<data dir>/<name>` holding `what` (words for the messages: "the group configs"); `path` None keeps
    nothing on disk (a broker without a data dir)."""

    path: Path | None
    version: int
    what: str
    mode: int = 0o644

    @classmethod
    def in_data_dir(
        cls, data_dir: Path | None, name: str, version: int, what: str, mode: int = 0o644
    ) -> SettingsFile:
        return cls(Path(data_dir) / name if data_dir is not None else None, version, what, mode)

    def load(self, parse: Callable[[dict[str, Any]], T]) -> T | None:
        """`parse` of the kept object (None when there is no file); a file that is not JSON, has another
        version, or that `parse` fails on (KeyError, TypeError, AttributeError, ValueError) raises."""
        if self.path is None or not self.path.exists():
            return None
        try:
            raw = json.loads(self.path.read_text())
            if not isinstance(raw, dict) or raw.get("version") != self.version:
                found = raw.get("version") if isinstance(raw, dict) else None
                raise ValueError(f"version {found!r} is not {self.version}")
        except ValueError as exc:
            raise damaged(self.path, exc, self.what) from None
        try:
            return parse(raw)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise damaged(self.path, exc, self.what) from None

    def save(self, body: dict[str, Any]) -> None:
        """Replace the file with `body` and the version, durably; KafkaError (KAFKA_STORAGE_ERROR) when the
        disk refuses. Nothing is written without a path."""
        if self.path is None:
            return
        data = json.dumps({"version": self.version, **body}, indent=1, sort_keys=True).encode()
        try:
            write_atomically(self.path, data, mode=self.mode)
        except OSError as exc:
            raise storage_error(f"saving {self.what}", exc) from None
