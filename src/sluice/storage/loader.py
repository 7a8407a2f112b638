"""Opening a partition directory: find the segments, decide which to trust, recover the rest
(after Kafka's LogLoader).

Trust rules:
- After a clean shutdown every segment's indexes were written and fsynced, so each is adopted after a
  structural check of its index files and of the few batches after the last index entry.
- After a crash, segments at or after the checkpointed recovery point (everything not known to be fsynced,
  always including the active segment) are scanned batch by batch, checking lengths, magic, increasing
  offsets and CRC-32C; the scan rebuilds the indexes. Earlier segments get the structural check, and the
  full scan only if it fails.
- Damage never costs intact data (unlike Kafka, which truncates a corrupt segment and drops what follows):
  the scan resynchronises on the next intact batch and records the damaged bytes in `damaged.json` (see
  damage.py), logged at ERROR. Only a damaged stretch at the very end of the active segment, a torn write
  that was never acknowledged, is truncated.

The checkpoint file (`partition.checkpoint`, JSON) holds the log start offset and the recovery point.

`partition.checkpoint` and the recovery of segment files: layouts in docs/storage.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sluice.storage.damage import DAMAGE_FILE, DamagedRange, read_damage, write_damage
from sluice.storage.files import sync_directory, write_atomically
from sluice.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileSegment,
    segment_file_name,
)

CHECKPOINT_FILE = "partition.checkpoint"
# The cleaner writes a cleaned segment into this subdirectory, then commits its swap by creating
# SWAP_MANIFEST (naming the cleaned base and the segments it replaces) in the partition directory.
CLEANING_DIR = ".cleaning"
SWAP_MANIFEST = "cleaner.swap"
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    log_start_offset: int = 0
    # Segments with a base offset at or above this may hold data that was never fsynced.
    recovery_point: int = 0
    # The active segment's first `active_position` bytes were fsynced (with index files describing them)
    # when this was written: after a crash only the bytes after them need a full check.
    active_segment: int = -1
    active_position: int = 0


def read_checkpoint(directory: Path) -> Checkpoint:
    try:
        raw = json.loads((directory / CHECKPOINT_FILE).read_bytes())
        return Checkpoint(
            int(raw["log_start_offset"]),
            int(raw["recovery_point"]),
            int(raw.get("active_segment", -1)),
            int(raw.get("active_position", 0)),
        )
    except FileNotFoundError:
        return Checkpoint()
    except (ValueError, KeyError, TypeError):
        # Written atomically, so this means outside damage; recovering everything is the safe answer.
        _log.warning("unreadable checkpoint in %s; recovering every segment", directory)
        return Checkpoint()


def write_checkpoint(directory: Path, checkpoint: Checkpoint, *, sync: bool = True) -> None:
    document = {
        "log_start_offset": checkpoint.log_start_offset,
        "recovery_point": checkpoint.recovery_point,
        "active_segment": checkpoint.active_segment,
        "active_position": checkpoint.active_position,
    }
    write_atomically(directory / CHECKPOINT_FILE, json.dumps(document).encode(), sync=sync)


@dataclass(slots=True)
class LoadedPartition:
    segments: list[FileSegment]
    log_start_offset: int
    recovery_point: int
    # Sealed segments whose data or indexes may not be durable yet: the first flush syncs them.
    not_durable: list[FileSegment] = field(default_factory=list)
    truncated_bytes: int = 0
    damaged: list[DamagedRange] = field(default_factory=list)
    # After a clean stop, every segment and index passed its checks: the files are as that stop left them.
    as_stopped: bool = False


def _segment_bases(directory: Path, names: list[str]) -> list[int]:
    """Base offsets of the `.log` files among `names` (the directory's entries); index files without a
    log and temporary files are removed."""
    bases: set[int] = set()
    index_files: list[tuple[int, str]] = []
    for name in names:
        if name.endswith(".tmp"):
            (directory / name).unlink()
            continue
        match = _SEGMENT_FILE.match(name)
        if not match:
            continue
        base = int(match.group(1))
        if match.group(2) == LOG_SUFFIX:
            bases.add(base)
        else:
            index_files.append((base, name))
    for base, name in index_files:
        if base not in bases:
            (directory / name).unlink()
    return sorted(bases)


def read_swap_manifest(path: Path) -> tuple[int, list[int]]:
    raw = json.loads(path.read_bytes())
    return int(raw["base"]), [int(base) for base in raw["replaced"]]


def settle_cleaner_swap(directory: Path) -> None:
    """Finish a swap the cleaner committed, or roll back one it had not: after this the directory holds
    either every replaced segment or the cleaned one, never both and never neither.

    The manifest is the commit point. Without it, whatever sits in CLEANING_DIR is discarded. With it, the
    cleaned files still in CLEANING_DIR are moved in (indexes first, the log last, each `rename` replacing
    the old segment of the same base), and the other replaced segments are removed. Every step is
    idempotent, so a crash during this repair is repaired by the next start.
    """
    manifest = directory / SWAP_MANIFEST
    cleaning = directory / CLEANING_DIR
    if manifest.exists():
        try:
            base, replaced = read_swap_manifest(manifest)
        except (ValueError, KeyError, TypeError):
            # Written atomically, so only outside damage gets here; the replaced segments are still whole
            # unless the cleaned log was moved in, and the scan of every segment sorts out overlaps.
            _log.warning("unreadable cleaner swap manifest in %s; discarding it", directory)
            manifest.unlink()
        else:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
                source = cleaning / segment_file_name(base, suffix)
                if source.exists():
                    os.replace(source, directory / source.name)
            for old in replaced:
                if old != base:
                    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                        (directory / segment_file_name(old, suffix)).unlink(missing_ok=True)
            sync_directory(directory)
            manifest.unlink()
            _log.info("finished an interrupted cleaner swap of %d segments in %s", len(replaced), directory)
    if cleaning.exists():
        shutil.rmtree(cleaning, ignore_errors=True)
        sync_directory(directory)


def _entries(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        directory.mkdir(parents=True)
        return []


def _reported(
    segment: FileSegment, known: set[DamagedRange], truncated: int, found: list[DamagedRange]
) -> int:
    """Log what recovering `segment` did (a torn tail cut off, damage not recorded before); returns the bytes
    truncated."""
    if truncated:
        _log.warning("truncated %d bytes of torn data from the end of %s", truncated, segment.log_path)
    for damage in found:
        if damage not in known:
            _log.error("%s; every intact batch around it is kept", damage.describe(segment.log_path))
    return truncated


def load_partition(directory: Path, index_interval_bytes: int, *, clean: bool) -> LoadedPartition:
    # One listing answers which of the partition's optional files exist: a first use of each of 50,000
    # partitions pays no failed open or stat for files that are normally absent.
    names = _entries(directory)
    if SWAP_MANIFEST in names or CLEANING_DIR in names:
        settle_cleaner_swap(directory)
        names = _entries(directory)
    checkpoint = read_checkpoint(directory) if CHECKPOINT_FILE in names else Checkpoint()
    segments = [
        FileSegment(directory, base, index_interval_bytes, create=False)
        for base in _segment_bases(directory, names)
    ]
    recorded = read_damage(directory) if DAMAGE_FILE in names else []
    damaged: list[DamagedRange] = []
    truncated_bytes = 0
    as_stopped = clean and bool(segments)
    for n, segment in enumerate(segments):
        is_last = n == len(segments) - 1
        expected_next = None if is_last else segments[n + 1].base_offset
        must_scan = not clean and (is_last or segment.base_offset >= checkpoint.recovery_point)
        segment.set_damage([r for r in recorded if r.segment == segment.base_offset])
        trusted = (
            not must_scan
            and segment.load_indexes(sealed=not is_last)
            and segment.resume_after_index(expected_next)
        )
        checked_prefix = (
            must_scan
            and is_last
            and checkpoint.active_segment == segment.base_offset
            and 0 < checkpoint.active_position <= segment.size_bytes
            and segment.load_indexes(sealed=False)
            and segment.resume_after_index(None, stop_at=checkpoint.active_position)
        )
        if checked_prefix:
            # Only what was written after the last active-segment checkpoint can be torn.
            known = set(segment.damaged)
            truncated_bytes += _reported(segment, known, *segment.recover_tail(checkpoint.active_position))
        elif not trusted:
            as_stopped = False
            known = set(segment.damaged)
            truncated_bytes += _reported(segment, known, *segment.recover(expected_next))
            if not is_last:
                # Rebuilt indexes of a segment that will stay sealed; written now so the next start trusts them.
                segment.seal()
                segment.write_indexes(sync=False, unless_same=True)
        damaged += segment.damaged

    log_start = checkpoint.log_start_offset
    if segments and log_start > segments[-1].next_offset:
        # Recovery lost data below the log start; keep offsets monotonic by starting over at log start.
        for segment in segments:
            segment.delete()
        segments = []
        as_stopped = False
    if not segments:
        segments = [FileSegment(directory, log_start, index_interval_bytes, create=True)]
    # Whole segments below the log start: a deletion that the crash interrupted.
    while len(segments) > 1 and segments[1].base_offset <= log_start:
        segments.pop(0).delete()
        as_stopped = False
    log_start = max(log_start, segments[0].base_offset)
    kept = {segment.base_offset for segment in segments}
    damaged = [damage for damage in damaged if damage.segment in kept]
    if damaged != recorded:
        write_damage(directory, damaged)
        as_stopped = False

    active = segments[-1]
    if clean:
        not_durable: list[FileSegment] = []
        recovery_point = active.base_offset
    else:
        # Recovered from the page cache, perhaps, but not known to be on disk until the first flush.
        not_durable = [s for s in segments[:-1] if s.base_offset >= checkpoint.recovery_point]
        recovery_point = min(checkpoint.recovery_point, active.base_offset)
    return LoadedPartition(
        segments, log_start, recovery_point, not_durable, truncated_bytes, damaged, as_stopped
    )
