"""The gateway's consumers as the console shows them, read from a sluice gateway's Prometheus /metrics.

The gateway publishes, per cluster, group and topic, how many messages it handed out (first deliveries and
redeliveries apart), how many were acknowledged and how many it gave up on (dead-lettered). What is in
flight, handed out and not yet settled, follows from those counters. Reading the published endpoint keeps
the console a client of the gateway, as it is of Kafka, rather than a reader of its memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

_FIELDS = {
    "sluice_gateway_handed_out_messages": "handed_out",
    "sluice_gateway_acked_messages": "acked",
    "sluice_gateway_dead_lettered_messages": "dead_lettered",
}


@dataclass
class GatewayConsumer:
    cluster: str
    group: str
    topic: str
    handed_out: int = 0
    redelivered: int = 0
    acked: int = 0
    dead_lettered: int = 0

    @property
    def in_flight(self) -> int:
        return max(self.handed_out - self.acked - self.dead_lettered, 0)


def gateway_consumers(metrics_text: str) -> tuple[list[GatewayConsumer], int | None]:
    """Per group/topic consumer counts, and the number of consumers the gateway runs (None if absent)."""
    rows: dict[tuple[str, str, str], GatewayConsumer] = {}
    active: int | None = None
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "sluice_gateway_active_consumers":
            active = int(sum(s.value for s in family.samples))
            continue
        field = _FIELDS.get(family.name)
        if field is None:
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            key = (labels.get("cluster", ""), labels.get("group", ""), labels.get("topic", ""))
            row = rows.setdefault(key, GatewayConsumer(*key))
            if field == "handed_out" and labels.get("redelivery") == "true":
                row.redelivered += int(sample.value)
            else:
                setattr(row, field, getattr(row, field) + int(sample.value))
    return sorted(rows.values(), key=lambda r: (r.cluster, r.group, r.topic)), active
