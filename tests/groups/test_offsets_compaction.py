"""__consumer_offsets is rewritten down to its live records, and committed offsets survive it and kill -9."""

from __future__ import annotations

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


def test_offsets_log_is_compacted_and_commits_survive(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("offsets_compaction_min_records: 200\n")
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
        assert start > 0, "the rewrite should have dropped the superseded commits"
        assert end - start < 150
        assert committed(proc.bootstrap, "billing", "orders") == {0: 300, 1: 600}

        proc.kill()
        proc.restart()
        assert committed(proc.bootstrap, "billing", "orders") == {0: 300, 1: 600}
    finally:
        proc.stop()
