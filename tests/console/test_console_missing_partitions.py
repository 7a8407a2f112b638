"""Lag of offsets committed on partitions that do not exist (issue #42), in the console and `sluice groups
describe`, as kafka-consumer-groups shows them: the row stays with its committed offset, its log end and
lag are "-", and it counts in no total. Such offsets are what a data dir written before DeleteTopics took
offsets with it still holds (or any cluster that keeps them); the test plants them there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from console_helpers import ConsoleThread

from sluice.console.app import ConsoleConfig
from sluice.coordinator.records import OffsetCommitKey, OffsetCommitValue, offset_commit_record
from sluice.protocol.records import Record, encode_batch, iter_batches
from sluice.storage.disk import DiskStorage
from sluice.testing import BrokerProcess, create_topic, free_port

GROUP = "stale-offsets"


def plant_offsets(data_dir: Path, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Append offset commits to a stopped broker's __consumer_offsets, as a broker of an earlier version left
    them for a topic it deleted."""
    now = int(time.time() * 1000)
    records = [
        offset_commit_record(OffsetCommitKey(group, topic, partition), OffsetCommitValue(offset, -1, "", now))
        for (topic, partition), offset in offsets.items()
    ]
    batch = encode_batch([Record(i, 0, r.key, r.value) for i, r in enumerate(records)], base_timestamp=now)
    _, header = next(iter_batches(batch))
    storage = DiskStorage(data_dir)
    try:
        log = storage.log("__consumer_offsets", 0)
        log.append(batch, header, append_time_ms=now)
        log.flush()
    finally:
        storage.close()


def page_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        html = response.read().decode()
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_offsets_of_missing_partitions_show_without_lag_in_console_and_cli(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(proc.bootstrap, partitions=1, name="live")
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for n in range(10):
            producer.produce("live", b"%d" % n, partition=0)
        assert producer.flush(10) == 0
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(GROUP, [TopicPartition("live", 0, 4)])]
        )[GROUP].result(30)
        proc.stop()
        # Partition 2 of a topic with one partition, and a topic that is gone.
        plant_offsets(proc.data_dir, GROUP, {("live", 2): 5, ("gone", 0): 9})
        proc.start()

        described = subprocess.run(
            [
                sys.executable,
                "-m",
                "sluice",
                "groups",
                "describe",
                GROUP,
                "--json",
                "--bootstrap",
                proc.bootstrap,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert described.returncode == 0, described.stderr
        rows = {(r["topic"], r["partition"]): r for r in json.loads(described.stdout)["offsets"]}
        assert {key: (r["current_offset"], r["log_end_offset"], r["lag"]) for key, r in rows.items()} == {
            ("gone", 0): (9, None, None),
            ("live", 0): (4, 10, 6),
            ("live", 2): (5, None, None),
        }
        console = ConsoleThread(
            ConsoleConfig({"bootstrap.servers": proc.bootstrap}, port=free_port())
        ).start()
        try:
            detail = page_text(f"{console.url}/groups/{GROUP}")
            assert re.search(r"Total lag 6\b", detail), detail
            assert re.search(r"gone 0 9 — —", detail) and re.search(r"live 2 5 — —", detail), detail
            assert re.search(r"live 0 4 10 6", detail), detail
            listed = page_text(f"{console.url}/groups")
            assert re.search(rf"{GROUP} Empty .*? 0 6\b", listed), listed
        finally:
            console.stop()
    finally:
        proc.stop()
