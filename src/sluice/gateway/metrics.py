"""Prometheus metrics of one gateway.

Each `Gateway` owns a private registry, so several gateways (tests, or a
gateway embedded next to other sluice parts) never collide on metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "sluice_gateway_requests",
            "API requests by api (grpc/http), operation and outcome",
            ["api", "operation", "outcome"],
            registry=self.registry,
        )
        self.produced = Counter(
            "sluice_gateway_produced_messages",
            "Messages produced",
            ["cluster", "mode"],
            registry=self.registry,
        )
        self.handed_out = Counter(
            "sluice_gateway_handed_out_messages",
            "Messages handed out to consumers (redeliveries included)",
            ["cluster", "group", "topic", "redelivery"],
            registry=self.registry,
        )
        self.acked = Counter(
            "sluice_gateway_acked_messages",
            "Messages acknowledged",
            ["cluster", "group", "topic"],
            registry=self.registry,
        )
        self.late_acks = Counter(
            "sluice_gateway_late_acks",
            "Acks that came after the message's share-group lock ran out (it is delivered again)",
            ["cluster", "group", "topic"],
            registry=self.registry,
        )
        self.refused_acks = Counter(
            "sluice_gateway_refused_acks",
            "Share-group acks the broker refused (those messages are delivered again)",
            ["cluster", "group", "topic"],
            registry=self.registry,
        )
        self.dead_lettered = Counter(
            "sluice_gateway_dead_lettered_messages",
            "Messages given up after max_retries",
            ["cluster", "group", "topic"],
            registry=self.registry,
        )
        self.partition_pauses = Counter(
            "sluice_gateway_partition_pauses",
            "Partitions paused because callers left their fetched messages untaken",
            ["cluster", "group", "topic"],
            registry=self.registry,
        )
        self.active_consumers = Gauge(
            "sluice_gateway_active_consumers",
            "Group/topic consumers running",
            ["cluster"],
            registry=self.registry,
        )
        self.produce_latency = Histogram(
            "sluice_gateway_produce_seconds",
            "Synchronous produce latency",
            ["cluster"],
            registry=self.registry,
        )
