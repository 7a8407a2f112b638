"""Putting a cleaned segment in place of the ones it replaces, crash-safe: the `cleaner.swap` manifest
(layout: docs/storage.md) commits the swap, `loader.settle_cleaner_swap` finishes or rolls it back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sluice.storage.files import sync_directory, write_atomically
from sluice.storage.loader import SWAP_MANIFEST
from sluice.storage.segment import FileSegment

T = TypeVar("T")
RunOnOwner = Callable[[Callable[[], T]], T]


class SwappableLog(Protocol):
    """What the swap needs of a log (sluice.storage.api.CompactableLog)."""

    @property
    def directory(self) -> Path: ...

    def swap_cleaned(
        self,
        replaced: list[FileSegment],
        cleaned: FileSegment,
        manifest_pending: Path,
        crash_point: Callable[[str], None] = ...,
    ) -> bool: ...


def discard(cleaning: Path) -> None:
    """Cleaned files that were not swapped in (a later pass or the next start would remove them too)."""
    for leftover in cleaning.iterdir() if cleaning.exists() else ():
        leftover.unlink(missing_ok=True)


def open_cleaned(cleaning: Path, base: int, index_interval_bytes: int) -> FileSegment:
    segment = FileSegment(cleaning, base, index_interval_bytes, create=False)
    if not (segment.load_indexes(sealed=True) and segment.resume_after_index(None)):
        segment.recover()  # written and fsynced by the worker, so this only rebuilds the indexes
    return segment


def swap_in(
    log: SwappableLog,
    replaced: list[FileSegment],
    cleaned: FileSegment,
    run_on_owner: RunOnOwner[Any],
    crash_point: Callable[[str], None],
) -> bool:
    manifest_pending = cleaned.directory / (SWAP_MANIFEST + ".pending")
    document = {"base": cleaned.base_offset, "replaced": [segment.base_offset for segment in replaced]}
    write_atomically(manifest_pending, json.dumps(document).encode())
    crash_point("manifest-prepared")
    try:
        swapped = run_on_owner(lambda: log.swap_cleaned(replaced, cleaned, manifest_pending, crash_point))
    except BaseException:
        cleaned.close()
        raise
    if not swapped:
        cleaned.delete()
        manifest_pending.unlink(missing_ok=True)
        return False
    crash_point("swapped")
    # The moves after the commit are redone at start until the manifest goes; make them durable first.
    sync_directory(log.directory)
    (log.directory / SWAP_MANIFEST).unlink(missing_ok=True)
    sync_directory(log.directory)
    return True
