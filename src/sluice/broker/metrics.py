"""The broker's counters: plain ints bumped on the hot paths, read only when someone scrapes.

Nothing here knows Prometheus: :mod:`sluice.server.metrics` turns these numbers into metric families
at scrape time. Bumping a counter is an attribute add on a slotted object, so produce and fetch pay a
few tens of nanoseconds per request, not a labelled-metric lookup per record.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

# Seconds; Prometheus' default buckets minus the coarse top, plus finer ones at the bottom, where a
# loopback broker's requests and fsyncs live.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_BATCH_OVERHEAD = 12  # base offset (8) and batch length (4) precede the length-counted part
_LAST_OFFSET_DELTA_AT = 23


@dataclass(slots=True)
class TopicCounters:
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    messages_out: int = 0


@dataclass(slots=True)
class Histogram:
    """Cumulative later: here one count per bucket (the last is +Inf), and the sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds


@dataclass(slots=True)
class ShareCounters:
    """Share groups' records (KIP-932): handed out, handed out again, acknowledged by type, locks that ran
    out, and records archived because they reached their group's delivery limit."""

    acquired: int = 0
    redelivered: int = 0
    acknowledged: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("accept", "release", "reject", "gap", "renew"), 0)
    )
    lock_timeouts: int = 0
    archived_at_limit: int = 0


@dataclass
class BrokerMetrics:
    topics: dict[str, TopicCounters] = field(default_factory=dict)
    requests: dict[int, Histogram] = field(default_factory=dict)  # API key -> latency
    fsync: Histogram = field(default_factory=Histogram)
    connections_accepted: int = 0
    # By the bound that refused them: max_connections_per_ip, max_connections, open_files.
    connections_refused: Counter[str] = field(default_factory=Counter)
    # Idle connections closed to let a new one in at the open-file bound.
    connections_closed_for_room: int = 0
    share: ShareCounters = field(default_factory=ShareCounters)

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def produced(self, topic: str, size: int, messages: int) -> None:
        counters = self.topics.get(topic) or self.topic(topic)  # once per produced batch: the call only once
        counters.bytes_in += size
        counters.messages_in += messages

    def fetched(self, topic: str, data: bytes | memoryview, from_offset: int) -> None:
        """Count a fetch's record bytes, and its records from `from_offset` to the end of its last batch."""
        if not data:
            return
        counters = self.topic(topic)
        counters.bytes_out += len(data)
        first_base = _OFFSET_AND_LENGTH.unpack_from(data, 0)[0]
        pos = 0
        end = len(data)
        last = 0
        # Batch headers only: walk the lengths to the last whole batch (a fetch may end in a partial one).
        while pos + _LAST_OFFSET_DELTA_AT + 4 <= end:
            _, length = _OFFSET_AND_LENGTH.unpack_from(data, pos)
            if pos + _BATCH_OVERHEAD + length > end:
                break
            last = pos
            pos += _BATCH_OVERHEAD + length
        last_base = _OFFSET_AND_LENGTH.unpack_from(data, last)[0]
        last_offset = last_base + _LAST_OFFSET_DELTA.unpack_from(data, last + _LAST_OFFSET_DELTA_AT)[0]
        counters.messages_out += max(last_offset + 1 - max(from_offset, first_base), 0)

    def request_done(self, api_key: int, seconds: float) -> None:
        histogram = self.requests.get(api_key)
        if histogram is None:
            histogram = self.requests[api_key] = Histogram()
        histogram.observe(seconds)
