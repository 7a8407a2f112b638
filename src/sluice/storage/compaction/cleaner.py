"""One cleaning pass over one partition (Kafka's Cleaner): plan -> map -> rewrite -> swap -> checkpoint.
How each step works is told in the package docstring (sluice.storage.compaction)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sluice.storage.api import CompactableLog
from sluice.storage.compaction.checkpoint import CleanerCheckpoint, PartitionCleanerState
from sluice.storage.compaction.offset_map import NO_FACTS, TxnFacts
from sluice.storage.compaction.plan import Plan, plan_cleaning
from sluice.storage.compaction.reader import SegmentRef
from sluice.storage.compaction.rewrite import CleaningJob, Prepare, prepare_cleaning
from sluice.storage.compaction.swap import RunOnOwner, discard, open_cleaned, swap_in
from sluice.storage.config import TopicConfig
from sluice.storage.loader import CLEANING_DIR

T = TypeVar("T")


class CleaningAborted(Exception):
    """The cleaner is stopping, or the log changed under it; the pass leaves the log as it was."""


@dataclass
class CleanerStats:
    """Counters for the metrics engineer to publish (all totals since start, or latest values)."""

    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    segments_swapped: int = 0
    failures: int = 0
    uncleanable_partitions: int = 0
    last_pass_duration_ms: int = 0
    # Kafka's max-dirty-percent and max-compaction-delay-secs: the worst partition at the last look.
    max_dirty_ratio: float = 0.0
    max_compaction_delay_ms: int = 0


def _direct(fn: Callable[[], T]) -> T:
    return fn()


def clean_partition(
    log: CompactableLog,
    config: TopicConfig,
    now_ms: int,
    *,
    dedupe_buffer_size: int = 128 * 1024 * 1024,
    io_max_bytes_per_second: float = 0,
    run_on_owner: RunOnOwner[Any] = _direct,
    crash_point: Callable[[str], None] = lambda step: None,
    stats: CleanerStats | None = None,
    plan: Plan | None = None,
    prepare: Prepare = prepare_cleaning,
    facts: TxnFacts = NO_FACTS,
    state: PartitionCleanerState | None = None,
) -> bool:
    """One cleaning pass over `log` if its plan says it is due; True when it ran.

    `prepare` does the reading and writing (`prepare_cleaning`, in this thread or a worker process);
    each swap then runs through `run_on_owner` on the thread that owns the log. `crash_point(step)` is
    called between the steps of the swap protocol (tests raise there to simulate a crash). `state` is the
    manager's record of the partition (read from its `cleaner.checkpoint` when not given); the pass moves
    its checkpoint on.
    """
    stats = stats if stats is not None else CleanerStats()
    state = state if state is not None else PartitionCleanerState.read(log.directory)
    checkpoint = state.checkpoint
    plan = plan or plan_cleaning(log, config, now_ms, checkpoint)
    if not plan.worth_cleaning(config):
        return False
    started = time.monotonic()
    first_dirty = plan.first_dirty_offset
    refs = [SegmentRef(s.base_offset, s.next_offset, s.size_bytes, str(s.log_path)) for s in plan.segments]
    job = CleaningJob(
        str(log.directory),
        refs,
        first_dirty,
        dict(checkpoint.segments),
        config,
        now_ms,
        dedupe_buffer_size,
        io_max_bytes_per_second,
        facts,
    )
    cleaning = log.directory / CLEANING_DIR
    try:
        prepared = prepare(job)
    except BaseException:
        discard(cleaning)  # a failed pass (a full disk, corrupt data, a stop) leaves no files behind
        raise
    stats.bytes_read += prepared.bytes_read
    crash_point("cleaned-written")
    by_base = {segment.base_offset: segment for segment in plan.segments}
    cleaning = log.directory / CLEANING_DIR
    new_entries: dict[int, tuple[int, bool]] = {}
    try:
        for group in prepared.groups:
            if group.written:
                cleaned = open_cleaned(cleaning, group.replaced[0], config.index_interval_bytes)
                if not swap_in(
                    log, [by_base[base] for base in group.replaced], cleaned, run_on_owner, crash_point
                ):
                    raise CleaningAborted(f"{log.directory}: segments changed during cleaning")
                stats.bytes_written += cleaned.size_bytes
                stats.records_removed += group.records_removed
                stats.segments_swapped += len(group.replaced)
            new_entries[group.replaced[0]] = group.entry
    except CleaningAborted:
        discard(cleaning)
        raise
    discard(cleaning)
    remaining = {s.base_offset for s in log.cleanable_segments()}
    segments_state = {base: state for base, state in checkpoint.segments.items() if base in remaining}
    segments_state.update(new_entries)
    updated = CleanerCheckpoint(max(prepared.map_end, first_dirty), now_ms, segments_state)
    updated.write(log.directory)
    state.checkpoint = updated
    stats.passes += 1
    stats.last_pass_duration_ms = int((time.monotonic() - started) * 1000)
    return True
