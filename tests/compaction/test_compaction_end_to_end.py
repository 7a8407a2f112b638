"""Compacted topics through a real broker and real clients: what readers see after the cleaner ran."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
from compaction_helpers import (
    Record,
    check_compacted,
    cleaner_status,
    create_compacted,
    latest,
    produce_updates,
    read_all,
    updates,
    wait_cleaned,
    wait_for,
    wait_settled,
)
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from sluice.testing import BrokerProcess


def test_last_value_per_key_stays_at_its_original_offset(
    cleaner_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name)
    written = produce_updates(bootstrap, topic_name, updates(20, 30))
    # Passes run while the producer still writes; the one after its last segment closed brings it down.
    wait_for(lambda: len(read_all(bootstrap, topic_name)) < len(written) / 3, 30, "the topic to shrink")
    read = read_all(bootstrap, topic_name)
    check_compacted(read, written)
    # The partition is not renumbered: the end offset is where the producer left it.
    assert read[-1][0] == written[-1][0]


def test_keyless_produce_to_a_compacted_topic_is_refused(
    cleaner_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "retries": 0})
    outcomes: list[tuple[bytes | None, KafkaError | None]] = []
    producer.produce(
        topic_name, key=b"k", value=b"keyed", on_delivery=lambda e, m: outcomes.append((m.key(), e))
    )
    producer.produce(topic_name, value=b"no key", on_delivery=lambda e, m: outcomes.append((m.key(), e)))
    producer.flush(30)
    keyless = [error for key, error in outcomes if key is None]
    assert keyless and keyless[0] is not None and keyless[0].code() == KafkaError.INVALID_RECORD
    assert read_all(bootstrap, topic_name) == [] or all(
        r[1] is not None for r in read_all(bootstrap, topic_name)
    )


def test_tombstones_go_after_delete_retention(cleaner_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name, delete_retention_ms="8000")
    items = updates(10, 10) + [(f"key-{k}".encode(), None) for k in range(5)] + updates(3, 60, 80, "other")
    written = produce_updates(bootstrap, topic_name, [(k, v) for k, v in items])
    deleted = {f"key-{k}".encode() for k in range(5)}
    first: list[Record] = []

    def deleted_values_cleaned() -> bool:
        # A pass can run while the producer still writes and clean only the segments closed by then: the
        # one to wait for is the pass that reached the tombstones and dropped what they delete.
        first[:] = read_all(bootstrap, topic_name)
        return not [r for r in first if r[1] in deleted and r[2] is not None]

    wait_cleaned(bootstrap, topic_name)
    wait_for(deleted_values_cleaned, 30, "the deleted keys' earlier values to be cleaned")
    tombstones = [r for r in first if r[2] is None]
    assert len(tombstones) == 5, "tombstones stay for delete.retention.ms after they were cleaned"
    wait_for(lambda: not [r for r in read_all(bootstrap, topic_name) if r[2] is None], 30, "tombstones to go")
    check_compacted(read_all(bootstrap, topic_name), written)


def test_compact_delete_also_drops_old_segments(tmp_path, topic_name: str) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("log_cleaner_backoff_ms: 100\nretention_check_interval_ms: 200\n")
    with BrokerProcess(tmp_path / "data", config=config) as proc:
        create_compacted(proc.bootstrap, topic_name, cleanup_policy="compact,delete", retention_ms="2000")
        written = produce_updates(proc.bootstrap, topic_name, updates(5, 40))
        wait_cleaned(proc.bootstrap, topic_name)
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "w"})
        try:
            wait_for(
                lambda: consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)[0] > 0,
                30,
                "retention to move the log start",
            )
        finally:
            consumer.close()
        read = read_all(proc.bootstrap, topic_name)
        assert read and read[-1][0] == written[-1][0]


def test_changing_cleanup_policy_live_starts_compaction(
    cleaner_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = cleaner_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"segment.bytes": "4096"})])[topic_name].result(30)
    written = produce_updates(bootstrap, topic_name, updates(10, 30))
    time.sleep(0.5)
    assert len(read_all(bootstrap, topic_name)) == len(written), "cleanup.policy=delete: nothing compacted"
    resource = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)
    wait_cleaned(bootstrap, topic_name)
    check_compacted(read_all(bootstrap, topic_name), written)
    assert len(read_all(bootstrap, topic_name)) < len(written) / 2


def test_consumer_in_the_middle_of_a_segment_keeps_going(
    cleaner_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name, min_compaction_lag_ms="1500")
    written = produce_updates(bootstrap, topic_name, updates(8, 40))
    # Tiny fetches and almost no prefetch, so the client's fetch position really is inside the old segments.
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "slow",
            "enable.auto.commit": False,
            "fetch.max.bytes": 1024,
            "message.max.bytes": 1000,
            "max.partition.fetch.bytes": 1024,
            "queued.min.messages": 1,
            "queued.max.messages.kbytes": 1,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    got = []
    try:
        while len(got) < 37:  # stop inside the first segments, before the lag lets the cleaner in
            got += [(m.offset(), m.key(), m.value()) for m in consumer.consume(1, 5) if not m.error()]
        wait_cleaned(bootstrap, topic_name)
        end = written[-1][0]
        deadline = time.monotonic() + 30
        while got[-1][0] < end and time.monotonic() < deadline:
            got += [(m.offset(), m.key(), m.value()) for m in consumer.consume(100, 0.5) if not m.error()]
    finally:
        consumer.close()
    offsets = [r[0] for r in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] == end
    by_offset = {r[0]: r for r in written}
    assert all(by_offset[r[0]] == r for r in got)
    assert set(latest(written).values()) <= set(got)
    assert len(got) < len(written), "the part read after the cleaning was compacted"


def test_restart_after_cleaning_reads_the_same_log(tmp_path, topic_name: str) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("log_cleaner_backoff_ms: 100\n")
    proc = BrokerProcess(tmp_path / "data", config=config).start()
    try:
        create_compacted(proc.bootstrap, topic_name)
        written = produce_updates(proc.bootstrap, topic_name, updates(12, 25))
        before = wait_settled(proc.bootstrap, topic_name)
        check_compacted(before, written)
        proc.stop()
        proc.start()
        assert read_all(proc.bootstrap, topic_name) == before
        proc.kill()
        proc.start()
        assert read_all(proc.bootstrap, topic_name) == before
    finally:
        proc.stop()


def test_topics_describe_shows_dirty_ratio_and_last_cleaning(
    cleaner_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name)
    assert cleaner_status(bootstrap, topic_name)[1] == -1
    produce_updates(bootstrap, topic_name, updates(5, 40))
    wait_cleaned(bootstrap, topic_name)
    run = subprocess.run(
        [sys.executable, "-m", "sluice", "topics", "describe", topic_name, "--json", "-b", bootstrap],
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    described = json.loads(run.stdout)
    partition = described["partitions"][0]
    assert 0.0 <= partition["dirty_ratio"] < 0.5
    assert partition["last_cleaned_ms"] > time.time() * 1000 - 120_000
    # The status is listed only to a request that names it: a describe of every config (what confluent-kafka
    # sends, and what clients compare with what they set) lists Kafka's topic configs alone.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    every = admin.describe_configs([ConfigResource("topic", topic_name)])
    names = set(next(iter(every.values())).result(30))
    assert "cleanup.policy" in names and not {n for n in names if n.startswith("sluice.")}
    assert not {n for n in described["configs"] if n.startswith("sluice.")}
    table = subprocess.run(
        [sys.executable, "-m", "sluice", "topics", "describe", topic_name, "-b", bootstrap],
        text=True,
        capture_output=True,
        timeout=60,
        env={"COLUMNS": "200", **__import__("os").environ},
    )
    assert "dirty ratio" in table.stdout and "last cleaned" in table.stdout
    # The status entries are the broker's, not settings: altering them is refused.
    resource = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("sluice.cleaner.dirty.ratio", "0", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception, match="read-only"):
        admin.incremental_alter_configs([resource])[resource].result(30)


def test_schema_registry_like_topic_stays_small(cleaner_broker: BrokerProcess, topic_name: str) -> None:
    """Every "start" reads the whole topic from offset 0, then registers a few updates of the same
    subjects: the read at each start stays bounded instead of growing with the history."""
    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name)
    subjects = 15
    reads = []
    written = []
    for _ in range(12):
        reads.append(len(read_all(bootstrap, topic_name)))
        written += produce_updates(bootstrap, topic_name, updates(subjects, 4, size=120))
        time.sleep(0.3)
    wait_cleaned(bootstrap, topic_name)
    final = read_all(bootstrap, topic_name)
    check_compacted(final, written)
    # Live subjects plus what sits in the active segment (4 KiB) and the segments not yet cleaned.
    assert len(final) < subjects + 3 * 4096 // 150
    assert max(reads[-4:]) < len(written) / 3


def test_other_readers_read_across_the_gaps(cleaner_broker: BrokerProcess, topic_name: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name)
    written = produce_updates(bootstrap, topic_name, updates(10, 30))
    # Settled: a pass between this read and the other readers' would make them see less.
    expected = wait_settled(bootstrap, topic_name)
    check_compacted(expected, written)
    end = written[-1][0] + 1

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTP(topic_name, 0)])
    consumer.seek_to_beginning()
    got = []
    deadline = time.monotonic() + 30
    while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.offset, r.key, r.value) for r in records]
    consumer.close()
    assert got == expected, "kafka-python"

    async def with_aiokafka() -> list:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([ATP(topic_name, 0)])
            await consumer.seek_to_beginning()
            out: list = []
            deadline = time.monotonic() + 30
            while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    out += [(r.offset, r.key, r.value) for r in records]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(with_aiokafka()) == expected, "aiokafka"
