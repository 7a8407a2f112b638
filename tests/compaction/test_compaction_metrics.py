"""The cleaner's Prometheus series on the broker's /metrics."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from compaction_helpers import create_compacted, produce_updates, updates, wait_settled, write_config
from prometheus_client.parser import text_string_to_metric_families

from sluice.testing import BrokerProcess


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_cleaner_metrics_count_a_pass(tmp_path: Path, topic_name: str) -> None:
    proc = BrokerProcess(tmp_path / "data", config=write_config(tmp_path), admin=True).start()
    try:
        assert proc.admin_url is not None
        before = scrape(proc.admin_url)
        assert before["sluice_log_cleaner_passes_total"][()] == 0
        create_compacted(proc.bootstrap, topic_name)
        produce_updates(proc.bootstrap, topic_name, updates(10, 40))
        # Settled, not merely cleaned once: a pass that ran while the producer still wrote cleans only the
        # segments closed by then, and the counters below are asserted for the whole topic.
        wait_settled(proc.bootstrap, topic_name)
        after = scrape(proc.admin_url)
        assert after["sluice_log_cleaner_passes_total"][()] >= 1
        assert (
            after["sluice_log_cleaner_bytes_read_total"][()]
            > after["sluice_log_cleaner_bytes_written_total"][()]
            > 0
        )
        assert after["sluice_log_cleaner_records_removed_total"][()] > 100
        assert after["sluice_log_cleaner_failures_total"][()] == 0
        assert after["sluice_log_cleaner_uncleanable_partitions"][()] == 0
        ratio = after["sluice_partition_dirty_ratio"][(("partition", "0"), ("topic", topic_name))]
        assert 0.0 <= ratio < 1.0
        assert "sluice_log_cleaner_max_compaction_delay_seconds" in after
    finally:
        proc.stop()
