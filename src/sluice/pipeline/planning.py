"""Offset arithmetic for planning reads: resolve offset specs, split ranges, rate-limit, detect loss.

Pure functions over plain dicts so they are tested without a broker or Spark; the broker facts
(partitions, watermarks, offsets for a timestamp) are passed in.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from sluice.pipeline.options import EARLIEST, LATEST, OffsetSpec, PipelineOptionError

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]
Watermarks = Mapping[TopicPartition, tuple[int, int]]
OffsetsForTimestamp = Callable[[list[TopicPartition], int], PartitionOffsets]

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Offsets Spark still has to read are gone from the broker (retention, deletion, recreation)."""


@dataclass(frozen=True)
class OffsetRange:
    """Half-open range [start, end) of one topic partition; one Spark task reads one range."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def serialize_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's JSON offset layout, built in a stable order because Spark compares the serialized text."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return result


def deserialize_offsets(serialized: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    return {
        (topic, int(partition)): int(offset)
        for topic, by_partition in serialized.items()
        for partition, offset in by_partition.items()
    }


def resolve_spec(
    spec: OffsetSpec,
    partitions: Iterable[TopicPartition],
    watermarks: Watermarks,
    offsets_for_timestamp: OffsetsForTimestamp,
    option: str,
) -> PartitionOffsets:
    """Turn earliest/latest/JSON/timestamp into a concrete offset for every partition."""
    partitions = sorted(partitions)
    if spec.kind == "earliest":
        return {tp: watermarks[tp][0] for tp in partitions}
    if spec.kind == "latest":
        return {tp: watermarks[tp][1] for tp in partitions}
    if spec.kind == "timestamp":
        assert spec.timestamp_ms is not None
        found = offsets_for_timestamp(partitions, spec.timestamp_ms)
        # No message at or after the timestamp means "from the end", as in Kafka's ListOffsets.
        return {tp: found[tp] if found.get(tp, -1) >= 0 else watermarks[tp][1] for tp in partitions}
    unknown = sorted(set(spec.per_partition) - set(partitions))
    if unknown:
        raise PipelineOptionError(f"option {option} names partitions that do not exist or are not subscribed: {unknown}")
    missing = sorted(set(partitions) - set(spec.per_partition))
    if missing:
        raise PipelineOptionError(
            f"option {option} gives specific offsets but leaves out partitions {missing}; "
            "list every partition (use -2 for earliest, -1 for latest)"
        )
    resolved: PartitionOffsets = {}
    for tp in partitions:
        wanted = spec.per_partition[tp]
        low, high = watermarks[tp]
        resolved[tp] = low if wanted == EARLIEST else high if wanted == LATEST else wanted
    return resolved


def check_range_start(
    tp: TopicPartition, start: int, watermarks: Watermarks, fail_on_data_loss: bool
) -> int:
    """Where reading of ``tp`` can really start; raise or warn when offsets have gone missing."""
    low, high = watermarks[tp]
    if start < low:
        message = (
            f"{tp[0]}-{tp[1]}: offsets {start}..{low - 1} are no longer on the broker "
            f"(deleted by retention or DeleteRecords); earliest available is {low}"
        )
        return _data_loss(message, fail_on_data_loss, resume_at=low)
    if start > high:
        message = (
            f"{tp[0]}-{tp[1]}: offset {start} is beyond the end of the partition ({high}); "
            "the topic was probably deleted and recreated"
        )
        return _data_loss(message, fail_on_data_loss, resume_at=low)
    return start


def _data_loss(message: str, fail_on_data_loss: bool, resume_at: int) -> int:
    if fail_on_data_loss:
        raise DataLossError(
            message + ". Set option failOnDataLoss=false to skip the missing data with a warning."
        )
    log.warning("%s; skipping to offset %d (failOnDataLoss=false)", message, resume_at)
    return resume_at


def plan_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], min_partitions: int | None
) -> list[OffsetRange]:
    """One range per partition with data, split further so there are at least ``min_partitions``."""
    ranges = [
        OffsetRange(topic, partition, start[(topic, partition)], end[(topic, partition)])
        for topic, partition in sorted(end)
        if (topic, partition) in start and end[(topic, partition)] > start[(topic, partition)]
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    split: list[OffsetRange] = []
    for whole in ranges:
        pieces = max(1, math.ceil(whole.size * min_partitions / total))
        step = math.ceil(whole.size / pieces)
        for piece_start in range(whole.start, whole.end, step):
            split.append(OffsetRange(whole.topic, whole.partition, piece_start, min(whole.end, piece_start + step)))
    return split


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> PartitionOffsets:
    """Advance at most ``max_rows`` offsets in total, shared in proportion to each partition's backlog.

    Every partition with a backlog moves when the budget allows it, so a busy partition cannot
    starve a quiet one.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in sorted(latest)}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    share = {tp: min(lag, (lag * max_rows) // total) for tp, lag in backlog.items()}
    leftover = max_rows - sum(share.values())
    for tp in sorted(backlog, key=lambda tp: (share[tp] > 0, tp)):
        if leftover == 0:
            break
        if share[tp] < backlog[tp]:
            share[tp] += 1
            leftover -= 1
    return {tp: start.get(tp, latest[tp]) + share[tp] for tp in backlog}
