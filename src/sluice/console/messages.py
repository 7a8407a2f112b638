"""Messages of one topic through a Cluster's consumers and producer: the browser's pages (seek by offset,
never a scan from the start), the server-side filter scan, and producing one message."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from sluice.console.cluster import Cluster, ClusterError, as_cluster_error

MAX_BROWSE_LIMIT = 500
MAX_PRODUCE_BYTES = 1024 * 1024
SCAN_ABANDONED_S = 30.0


@dataclass
class Message:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class Page:
    messages: list[Message]
    # partition -> next position: an exclusive upper bound when browsing newest-first, else the next start.
    next_cursor: dict[int, int] | None


@dataclass
class ScanJob:
    """A server-side filter scan; the page polls it for progress."""

    id: str
    topic: str
    needle: str
    total: int
    scanned: int = 0
    matches: list[Message] = field(default_factory=list)
    done: bool = False
    error: ClusterError | None = None
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    polled: float = field(default_factory=time.monotonic)

    def abandoned(self, now: float) -> bool:
        """Nobody has asked for progress for a while: the page was closed, so the scan stops."""
        return now - self.polled > SCAN_ABANDONED_S

    @property
    def rate(self) -> float:
        elapsed = (self.finished or time.monotonic()) - self.started
        return self.scanned / elapsed if elapsed > 0 else 0.0


def parse_cursor(text: str | None) -> dict[int, int] | None:
    """ "0:120,1:98" -> {0: 120, 1: 98}; the message browser's paging position, carried in the URL."""
    if not text:
        return None
    cursor = {}
    for part in text.split(","):
        partition, _, offset = part.partition(":")
        cursor[int(partition)] = int(offset)
    return cursor


def format_cursor(cursor: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))


def _message(msg: Any) -> Message:
    ts_type, ts = msg.timestamp()
    return Message(
        partition=msg.partition(),
        offset=msg.offset(),
        timestamp_ms=ts if ts_type != 0 and ts >= 0 else None,
        key=msg.key(),
        value=msg.value(),
        headers=list(msg.headers() or []),
    )


def _positions(
    cluster: Cluster, topic: str, partition: int | None, mode: str, value: int | None
) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """Each partition's (start, end) offsets, and where reading starts for `mode`."""
    partitions = cluster.topic(topic)
    chosen = [row for row in partitions if partition is None or row.partition == partition]
    if partition is not None and not chosen:
        raise ClusterError("UNKNOWN_TOPIC_OR_PART", f"topic {topic!r} has no partition {partition}")
    bounds = {row.partition: (row.start or 0, row.end or 0) for row in chosen}
    if mode == "newest":
        return bounds, {p: end for p, (_, end) in bounds.items()}
    if mode == "beginning":
        return bounds, {p: start for p, (start, _) in bounds.items()}
    if mode == "offset":
        return bounds, {p: min(max(value or 0, start), end) for p, (start, end) in bounds.items()}
    if mode == "timestamp":
        return bounds, offsets_for_time(cluster, topic, bounds, value or 0)
    raise ClusterError("INVALID_REQUEST", f"unknown browse mode {mode!r}")


def offsets_for_time(
    cluster: Cluster, topic: str, bounds: dict[int, tuple[int, int]], ts_ms: int
) -> dict[int, int]:
    with cluster.consumer() as consumer:
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, ts_ms) for p in bounds], timeout=cluster.timeout_s
            )
        except Exception as exc:
            raise as_cluster_error(exc) from None
    out = {}
    for tp in found:
        if tp.error is not None:
            raise ClusterError(tp.error.name(), tp.error.str())
        out[tp.partition] = bounds[tp.partition][1] if tp.offset < 0 else tp.offset
    return out


def read_ranges(cluster: Cluster, topic: str, ranges: dict[int, tuple[int, int]]) -> list[Message]:
    """Every message with start <= offset < stop of each partition's range: seek, never scan."""
    ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
    if not ranges:
        return []
    found: dict[tuple[int, int], Message] = {}
    open_parts = set(ranges)
    deadline = time.monotonic() + cluster.timeout_s
    with cluster.consumer() as consumer:
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
        expected = sum(stop - start for start, stop in ranges.values())
        while open_parts and time.monotonic() < deadline:
            # consume() waits until it has `num_messages` or its timeout: ask for no more than are left
            # (fewer may come: compaction leaves gaps), or a range at the log end would wait it out.
            wanted = max(1, min(500, expected - len(found)))
            for msg in consumer.consume(wanted, timeout=0.1):
                p = msg.partition()
                if msg.topic() != topic or p not in ranges:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(p)
                        continue
                    raise ClusterError(error.name(), error.str())
                start, stop = ranges[p]
                offset = msg.offset()
                if offset >= stop - 1:
                    open_parts.discard(p)
                if start <= offset < stop:
                    found[(p, offset)] = _message(msg)
    if open_parts and not found:
        raise ClusterError("_TIMED_OUT", f"no messages arrived from {topic} within {cluster.timeout_s:g}s")
    return list(found.values())


def browse(
    cluster: Cluster,
    topic: str,
    *,
    partition: int | None,
    mode: str,
    value: int | None,
    limit: int,
    cursor: dict[int, int] | None,
) -> Page:
    limit = max(1, min(limit, MAX_BROWSE_LIMIT))
    bounds, positions = _positions(cluster, topic, partition, mode, value)
    if cursor:
        positions = {p: cursor.get(p, pos) for p, pos in positions.items()}
    newest = mode == "newest"
    if newest:
        ranges = {p: (max(bounds[p][0], pos - limit), pos) for p, pos in positions.items()}
    else:
        ranges = {p: (pos, min(bounds[p][1], pos + limit)) for p, pos in positions.items()}
    read = read_ranges(cluster, topic, ranges)
    order = sorted(read, key=lambda m: (m.timestamp_ms or 0, m.offset, m.partition), reverse=newest)
    taken = order[:limit]
    next_cursor = dict(positions)
    for m in taken:
        if newest:
            next_cursor[m.partition] = min(next_cursor[m.partition], m.offset)
        else:
            next_cursor[m.partition] = max(next_cursor[m.partition], m.offset + 1)
    more = any((next_cursor[p] > bounds[p][0]) if newest else (next_cursor[p] < bounds[p][1]) for p in bounds)
    return Page(taken, next_cursor if more and taken else None)


def scan(cluster: Cluster, job: ScanJob, ranges: dict[int, tuple[int, int]], max_matches: int) -> None:
    """Read every message of `ranges` once, keeping those whose key or value holds the needle."""
    needle = job.needle.encode()
    ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
    consumer = cluster.new_consumer(**{"fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 262144})
    try:
        consumer.assign([TopicPartition(job.topic, p, start) for p, (start, _) in ranges.items()])
        open_parts = set(ranges)
        idle_deadline = time.monotonic() + cluster.timeout_s
        while open_parts and not job.stop.is_set():
            if job.abandoned(time.monotonic()):
                break
            batch = consumer.consume(10000, timeout=0.5)
            if batch:
                idle_deadline = time.monotonic() + cluster.timeout_s
            elif time.monotonic() > idle_deadline:
                raise ClusterError("_TIMED_OUT", f"no messages for {cluster.timeout_s:g}s mid-scan")
            scanned = 0
            for msg in batch:
                error = msg.error()
                p = msg.partition()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(p)
                        continue
                    raise ClusterError(error.name(), error.str())
                stop = ranges[p][1]
                offset = msg.offset()
                if offset >= stop:
                    open_parts.discard(p)
                    continue
                if offset == stop - 1:
                    open_parts.discard(p)
                scanned += 1
                key = msg.key()
                val = msg.value()
                if (val is not None and needle in val) or (key is not None and needle in key):
                    job.matches.append(_message(msg))
                    if len(job.matches) >= max_matches:
                        job.stop.set()
                        break
            job.scanned += scanned
    except Exception as exc:
        job.error = as_cluster_error(exc)
    finally:
        consumer.close()
        job.finished = time.monotonic()
        job.done = True


def scan_ranges(
    cluster: Cluster, topic: str, partition: int | None, mode: str, value: int | None
) -> dict[int, tuple[int, int]]:
    """What a filter scans: from the chosen start (the beginning when browsing newest-first) to the end."""
    bounds, positions = _positions(
        cluster, topic, partition, "beginning" if mode == "newest" else mode, value
    )
    return {p: (positions[p], bounds[p][1]) for p in bounds}


def produce(
    cluster: Cluster,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    partition: int | None,
) -> tuple[int, int]:
    """Produce one message and wait for its acknowledgement: (partition, offset)."""
    producer = cluster.producer()
    outcome: dict[str, Any] = {}

    def delivered(err: KafkaError | None, msg: Any) -> None:
        outcome["error"] = err
        outcome["msg"] = msg

    kwargs: dict[str, Any] = {"key": key, "value": value, "headers": headers, "on_delivery": delivered}
    if partition is not None:
        kwargs["partition"] = partition
    try:
        producer.produce(topic, **kwargs)
    except Exception as exc:
        raise as_cluster_error(exc) from None
    deadline = time.monotonic() + cluster.timeout_s + 15
    while "msg" not in outcome and time.monotonic() < deadline:
        producer.poll(0.1)
    if "msg" not in outcome:
        raise ClusterError("_MSG_TIMED_OUT", "the message was not acknowledged in time")
    if outcome["error"] is not None:
        raise ClusterError(outcome["error"].name(), outcome["error"].str())
    return outcome["msg"].partition(), outcome["msg"].offset()
