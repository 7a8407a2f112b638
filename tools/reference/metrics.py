"""Every Prometheus series sluice exposes, read from the registries a running broker and a gateway scrape."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable
from pathlib import Path

from reference import cell, code

INTRO = """\
# Metrics

Every series sluice serves, written when the site is built from the Prometheus registries themselves: a
broker's (built in a scratch data directory and collected once) and a gateway's. How to scrape them, the
admin listener's guard, and queries to start a dashboard with: [metrics](../guide/metrics.md).
"""

# What a scrape shows of each family: a counter's samples end in _total, a histogram's are its buckets.
_EXPOSED = {
    "counter": lambda name: [f"{name}_total"],
    "histogram": lambda name: [f"{name}_bucket", f"{name}_sum", f"{name}_count"],
}


def _rows(families: Iterable[tuple[str, str, tuple[str, ...], str]]) -> list[str]:
    rows = ["| series | type | labels | meaning |", "|---|---|---|---|"]
    for name, kind, labels, documentation in families:
        exposed = " ".join(code(series) for series in _EXPOSED.get(kind, lambda n: [n])(name))
        rows.append(f"| {exposed} | {kind} | {', '.join(labels)} | {cell(documentation)} |")
    return [*rows, ""]


async def _broker_families(data_dir: Path) -> list[tuple[str, str, tuple[str, ...], str]]:
    from sluice.broker.config import BrokerConfig
    from sluice.server.app import start_broker
    from sluice.server.metrics import broker_registry

    running = await start_broker(BrokerConfig(listen_port=0, data_dir=data_dir))
    try:
        # The families a custom collector yields carry their label names even before any sample exists.
        return [
            (family.name, family.type, tuple(getattr(family, "_labelnames", ())), family.documentation)
            for family in broker_registry(running.server).collect()
        ]
    finally:
        await running.stop()


def broker_families() -> list[tuple[str, str, tuple[str, ...], str]]:
    with tempfile.TemporaryDirectory(prefix="sluice-metrics-") as scratch:
        return asyncio.run(_broker_families(Path(scratch)))


def gateway_families() -> list[tuple[str, str, tuple[str, ...], str]]:
    from prometheus_client.metrics import MetricWrapperBase

    from sluice.gateway.metrics import GatewayMetrics

    # The metric objects themselves: a family collected before any use has no samples, so no label names;
    # prometheus_client keeps those only on the object (_labelnames).
    families = []
    for metric in vars(GatewayMetrics()).values():
        if isinstance(metric, MetricWrapperBase):
            families += [
                (f.name, f.type, tuple(metric._labelnames), f.documentation) for f in metric.describe()
            ]
    return families


def page() -> str:
    lines = [
        INTRO,
        "## Broker",
        "",
        "`sluice broker` and `sluice serve` at `/metrics` on the admin listener (127.0.0.1:9644 by default).",
        "",
        *_rows(broker_families()),
        "## Gateway",
        "",
        "The kafka-pixy gateway and the REST Proxy (`sluice gateway`, and the gateway of `sluice serve`) at "
        "`/metrics` on the gateway's HTTP listener (127.0.0.1:19092 by default). prometheus-client also writes, "
        "beside each of these counters and histograms, a `_created` gauge: when its series began (Unix seconds).",
        "",
        *_rows(gateway_families()),
    ]
    return "\n".join(lines)
