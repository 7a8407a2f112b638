"""__consumer_offsets is compacted by the log cleaner (offsets kept), and committed offsets survive it and
kill -9."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.testing import BrokerProcess


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        consumer.close()


def offsets_log_range(bootstrap: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "inspect"})
    try:
        return consumer.get_watermark_offsets(TopicPartition("__consumer_offsets", 0), timeout=10)
    finally:
        consumer.close()


def offsets_log_records(bootstrap: str) -> list[int]:
    """Offsets of every record __consumer_offsets still holds, read from its start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "inspect-records", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("__consumer_offsets", 0), timeout=10)
        consumer.assign([TopicPartition("__consumer_offsets", 0, low)])
        offsets: list[int] = []
        deadline = time.monotonic() + 30
        while consumer.position([TopicPartition("__consumer_offsets", 0)])[0].offset < high:
            assert time.monotonic() < deadline, "could not read __consumer_offsets to its end"
            offsets += [m.offset() for m in consumer.consume(500, 0.5) if not m.error()]
        return offsets
    finally:
        consumer.close()


def test_offsets_log_is_compacted_and_commits_survive(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("offsets_topic_segment_bytes: 4096\nlog_cleaner_backoff_ms: 100\n")
    proc = BrokerProcess(tmp_path / "data", config=config).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(10)
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "billing"})
        for i in range(1, 301):
            consumer.commit(offsets=[TopicPartition("orders", 0, i), TopicPartition("orders", 1, 2 * i)],
                            asynchronous=False)
        consumer.close()
        start, end = offsets_log_range(proc.bootstrap)
        assert start == 0 and end >= 600, "300 commits of 2 offsets each"
        # The cleaner keeps only the latest commit per partition in closed segments (offsets unchanged, so
        # the log has gaps); what is left is those and the active 4 KiB segment.
        deadline = time.monotonic() + 30
        while len(records := offsets_log_records(proc.bootstrap)) >= 150:
            assert time.monotonic() < deadline, f"__consumer_offsets still holds {len(records)} records"
            time.sleep(0.2)
        assert records == sorted(set(records)) and records[-1] == end - 1
        assert committed(proc.bootstrap, "billing", "orders") == {0: 300, 1: 600}

        proc.kill()
        proc.restart()
        assert committed(proc.bootstrap, "billing", "orders") == {0: 300, 1: 600}
    finally:
        proc.stop()
