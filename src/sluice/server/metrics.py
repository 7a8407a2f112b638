"""Prometheus view of a running broker, built at scrape time from its plain counters and live state.

A custom collector rather than labelled Counter objects: the hot paths only add to ints
(:mod:`sluice.broker.metrics`), and partition sizes, offsets and group lag are read from the broker when
someone asks. Every series is listed in the README ("Broker metrics").
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from sluice.broker.metrics import LATENCY_BUCKETS, Histogram
from sluice.coordinator.share.partition import RecordState, SharePartition
from sluice.protocol.messages import APIS_BY_KEY
from sluice.server.admission import DESCRIPTORS, MAX_CONNECTIONS, PER_IP

if TYPE_CHECKING:
    from sluice.server.kafka import KafkaServer


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    cumulative = 0
    out = []
    for bound, count in zip((*LATENCY_BUCKETS, float("inf")), histogram.counts, strict=True):
        cumulative += count
        out.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return out


def committed_offsets(broker: Any) -> Iterator[tuple[str, str, int, int]]:
    """(group, topic, partition, committed offset) of every group the coordinator holds."""
    service = broker.groups
    if service is None:
        return
    coordinator = service.coordinator
    for groups in (coordinator.groups, coordinator.consumer.groups):
        for group_id, group in list(groups.items()):
            for (topic, partition), value in list(group.offsets.items()):
                yield group_id, topic, partition, value.offset


class BrokerCollector(Collector):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Any]:
        broker = self.server.broker
        metrics = broker.metrics
        families = {
            name: CounterMetricFamily(f"sluice_topic_{name}", help_, labels=["topic"])
            for name, help_ in (
                ("bytes_in", "Record batch bytes appended by produce requests"),
                ("messages_in", "Records appended by produce requests"),
                ("bytes_out", "Record batch bytes sent in fetch responses"),
                ("messages_out", "Records sent in fetch responses (from the fetch offset on)"),
            )
        }
        for topic, counters in sorted(metrics.topics.items()):
            families["bytes_in"].add_metric([topic], counters.bytes_in)
            families["messages_in"].add_metric([topic], counters.messages_in)
            families["bytes_out"].add_metric([topic], counters.bytes_out)
            families["messages_out"].add_metric([topic], counters.messages_out)
        yield from families.values()

        requests = HistogramMetricFamily(
            "sluice_request_duration_seconds",
            "Kafka requests by API: time from decoding to the response being ready (_count is the request count)",
            labels=["api"],
        )
        for key, histogram in sorted(metrics.requests.items()):
            api = APIS_BY_KEY.get(key)
            requests.add_metric([api.name if api else str(key)], _buckets(histogram), histogram.total)
        yield requests

        fsync = HistogramMetricFamily(
            "sluice_fsync_duration_seconds", "One group commit's fsync of its partitions"
        )
        fsync.add_metric([], _buckets(metrics.fsync), metrics.fsync.total)
        yield fsync

        yield GaugeMetricFamily(
            "sluice_connections", "Open client connections", value=len(self.server.connections)
        )
        accepted = CounterMetricFamily("sluice_connections_accepted", "Client connections accepted")
        accepted.add_metric([], metrics.connections_accepted)
        yield accepted
        refused = CounterMetricFamily(
            "sluice_connections_refused", "Connections refused at a connection bound", labels=["limit"]
        )
        for limit in (PER_IP, MAX_CONNECTIONS, DESCRIPTORS):
            refused.add_metric([limit], metrics.connections_refused[limit])
        yield refused
        made_room = CounterMetricFamily(
            "sluice_connections_closed_for_room",
            "Idle connections closed to let a new one in at the open-file bound",
        )
        made_room.add_metric([], metrics.connections_closed_for_room)
        yield made_room

        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "sluice_partition_size_bytes", "Bytes of a partition's log on disk", labels=labels
        )
        start = GaugeMetricFamily(
            "sluice_partition_log_start_offset", "First offset still in the log", labels=labels
        )
        end = GaugeMetricFamily(
            "sluice_partition_log_end_offset", "Next offset to be appended", labels=labels
        )
        high = GaugeMetricFamily(
            "sluice_partition_high_watermark",
            "Offset up to which consumers may read (durable)",
            labels=labels,
        )
        for (topic, index), state in sorted(broker.partitions.items()):
            label = [topic, str(index)]
            size.add_metric(label, state.log.size_bytes)
            start.add_metric(label, state.log.log_start_offset)
            end.add_metric(label, state.log.log_end_offset)
            high.add_metric(label, state.high_watermark)
        yield from (size, start, end, high)

        glabels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily(
            "sluice_consumer_group_committed_offset", "A group's committed offset", labels=glabels
        )
        lag = GaugeMetricFamily(
            "sluice_consumer_group_lag",
            "High watermark minus the committed offset (0 at least)",
            labels=glabels,
        )
        for group, topic, partition, offset in sorted(committed_offsets(broker)):
            state = broker.partitions.get((topic, partition))
            label = [group, topic, str(partition)]
            committed.add_metric(label, offset)
            if state is not None:
                lag.add_metric(label, max(state.high_watermark - offset, 0))
        yield from (committed, lag)

        yield from _share_metrics(broker)
        yield from _cleaner_metrics(broker)

        data_dir = broker.config.data_dir
        if data_dir is not None:
            try:
                free = shutil.disk_usage(data_dir).free
            except OSError:
                return
            yield GaugeMetricFamily(
                "sluice_storage_free_bytes", "Free bytes on the data directory's file system", value=free
            )


def _share_metrics(broker: Any) -> Iterator[Any]:
    """Share groups (KIP-932): what happened to their records since the broker started, and each
    share-partition's state now. Kafka has no broker metric for records acquired, redelivered or archived,
    nor for a share-partition's lag (DescribeShareGroupOffsets v1 gives that); sluice counts them here."""
    counters = broker.metrics.share
    for name, help_, value in (
        (
            "acquired",
            "Records handed to share-group members (first deliveries and redeliveries)",
            counters.acquired,
        ),
        ("redelivered", "Records handed out again (a delivery count above 1)", counters.redelivered),
        (
            "archived_at_limit",
            "Records archived at their group's share.delivery.count.limit",
            counters.archived_at_limit,
        ),
        (
            "lock_timeouts",
            "Records whose acquisition lock ran out before they were acknowledged",
            counters.lock_timeouts,
        ),
    ):
        yield _counter(f"sluice_share_records_{name}", help_, value)
    acknowledged = CounterMetricFamily(
        "sluice_share_records_acknowledged",
        "Records acknowledged by share-group members, by type (accept, release, reject, gap, renew)",
        labels=["type"],
    )
    for kind, count in sorted(counters.acknowledged.items()):
        acknowledged.add_metric([kind], count)
    yield acknowledged

    labels = ["group", "topic", "partition"]
    start = GaugeMetricFamily(
        "sluice_share_partition_start_offset", "First offset not yet delivered to completion", labels=labels
    )
    in_flight = GaugeMetricFamily(
        "sluice_share_partition_in_flight_records",
        "Records from the start offset to the next never-acquired one (Kafka's InFlightMessageCount)",
        labels=labels,
    )
    acquired = GaugeMetricFamily(
        "sluice_share_partition_acquired_records", "Records held by members under a lock now", labels=labels
    )
    lag = GaugeMetricFamily(
        "sluice_share_partition_lag",
        "Records up to the high watermark not yet acknowledged or archived (KIP-1226's lag)",
        labels=labels,
    )
    for group, topic, index, partition in share_partitions(broker):
        label = [group, topic, str(index)]
        start.add_metric(label, partition.start_offset)
        in_flight.add_metric(label, partition.in_flight)
        acquired.add_metric(label, partition.count(RecordState.ACQUIRED))
        state = broker.partitions.get((topic, index))
        if state is not None:
            lag.add_metric(label, partition.lag(state.high_watermark))
    yield from (start, in_flight, acquired, lag)


def share_partitions(broker: Any, group_id: str | None = None) -> list[tuple[str, str, int, SharePartition]]:
    """(group, topic, partition, its state) of every share-partition the broker holds (of one group when
    `group_id` is given), sorted; none while the share state is not loaded."""
    shares = broker.shares
    if shares is None or not shares.loaded:
        return []
    held = shares.states.partitions.items() if group_id is None else shares.states.of_group(group_id)
    rows = []
    for key, partition in list(held):
        meta = broker.storage.topic_by_id(key.topic_id)
        if meta is not None:  # else its topic is being deleted, and its state with it
            rows.append((key.group_id, meta.name, key.partition, partition))
    return sorted(rows, key=lambda row: row[:3])


def _cleaner_metrics(broker: Any) -> Iterator[Any]:
    """The log cleaner's totals and Kafka's cleaner gauges (max-dirty-percent, max-compaction-delay-secs),
    plus each compacted partition's dirty ratio."""
    cleaner = broker.cleaner
    if cleaner is None:
        return
    stats = cleaner.stats
    for name, help_, value in (
        ("passes", "Cleaning passes completed", stats.passes),
        ("bytes_read", "Segment bytes the cleaner read", stats.bytes_read),
        ("bytes_written", "Bytes of cleaned segments swapped in", stats.bytes_written),
        ("records_removed", "Records (and markers) the cleaner removed", stats.records_removed),
        ("failures", "Cleaning passes that failed (logged)", stats.failures),
    ):
        yield _counter(f"sluice_log_cleaner_{name}", help_, value)
    yield GaugeMetricFamily(
        "sluice_log_cleaner_uncleanable_partitions",
        "Partitions the cleaner gave up on until restart (a batch failed its CRC)",
        value=stats.uncleanable_partitions,
    )
    yield GaugeMetricFamily(
        "sluice_log_cleaner_last_pass_seconds",
        "Duration of the last pass",
        value=stats.last_pass_duration_ms / 1000,
    )
    yield GaugeMetricFamily(
        "sluice_log_cleaner_max_dirty_ratio",
        "Dirtiest compacted partition at the last look",
        value=stats.max_dirty_ratio,
    )
    yield GaugeMetricFamily(
        "sluice_log_cleaner_max_compaction_delay_seconds",
        "Wait since its last pass of the most overdue partition (max.compaction.lag.ms, tombstones due)",
        value=stats.max_compaction_delay_ms / 1000,
    )
    dirty = GaugeMetricFamily(
        "sluice_partition_dirty_ratio",
        "A compacted partition's dirty bytes over its cleanable bytes",
        labels=["topic", "partition"],
    )
    for topic, index in sorted(broker.partitions):
        meta = broker.storage.topic(topic)
        if meta is None or not meta.config.compacts:
            continue
        log = broker.storage.compactable_log(topic, index)
        if log is not None:
            dirty.add_metric([topic, str(index)], cleaner.dirty_ratio(log))
    yield dirty


def _counter(name: str, help_: str, value: int) -> CounterMetricFamily:
    counter = CounterMetricFamily(name, help_)
    counter.add_metric([], value)
    return counter


def broker_registry(server: KafkaServer) -> CollectorRegistry:
    """A private registry (several brokers in one process, as in tests, never collide)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    return registry
