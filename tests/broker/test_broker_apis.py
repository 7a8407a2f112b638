"""Topic admin, configs, long-poll fetch, list offsets, delete records, idempotent produce and clean shutdown,
exercised with confluent-kafka's AdminClient and sluice's wire client against a real broker."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, encode_batch
from sluice.testing import BrokerProcess


def admin_for(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = admin_for(bootstrap)  # the future needs its client alive until it resolves
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(10)


def test_topic_admin_configs_and_partitions(bootstrap: str, topic_name: str) -> None:
    admin = admin_for(bootstrap)
    admin.create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "3600000"})])[topic_name].result(10)
    with pytest.raises(KafkaException) as exists:
        admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(10)
    assert exists.value.args[0].code() == ErrorCode.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as replicas:
        admin.create_topics([NewTopic(topic_name + "-r3", 1, 3)])[topic_name + "-r3"].result(10)
    assert replicas.value.args[0].code() == ErrorCode.INVALID_REPLICATION_FACTOR

    resource = ConfigResource("topic", topic_name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == "1073741824" and configs["segment.bytes"].is_default

    change = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([change])[change].result(10)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.bytes"].value == "1048576"
    assert configs["retention.ms"].value == "604800000" and configs["retention.ms"].is_default

    bad = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("segment.bytes", "ten", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as invalid:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert invalid.value.args[0].code() == ErrorCode.INVALID_CONFIG

    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(10)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 5
    with pytest.raises(KafkaException) as shrink:
        admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(10)
    assert shrink.value.args[0].code() == ErrorCode.INVALID_PARTITIONS

    cluster = admin.describe_cluster().result(10)
    assert len(cluster.nodes) == 1 and cluster.controller.id == cluster.nodes[0].id

    admin.delete_topics([topic_name])[topic_name].result(10)
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_auto_create_on_metadata_and_invalid_names(bootstrap: str, topic_name: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic_name, value=b"auto")
    assert producer.flush(20) == 0
    meta = admin_for(bootstrap).list_topics(topic_name, timeout=10).topics[topic_name]
    assert meta.error is None and len(meta.partitions) == 1
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("Metadata")
        response = client.call("Metadata", 12, cls(topics=[cls.MetadataRequestTopic(name="bad topic!")]))
        assert response.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def wire_produce(client: WireClient, topic: str, batch: bytes, version: int = 9) -> tuple[int, int]:
    cls = client.request_class("Produce")
    request = cls(acks=-1, timeout_ms=10000, topic_data=[cls.TopicProduceData(
        name=topic, partition_data=[cls.PartitionProduceData(index=0, records=batch)])])
    part = client.call("Produce", version, request).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def wire_fetch(client: WireClient, topic: str, offset: int, max_wait_ms: int, min_bytes: int = 1) -> object:
    cls = client.request_class("Fetch")
    request = cls(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, topics=[cls.FetchTopic(
        topic=topic, partitions=[cls.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    return client.call("Fetch", 11, request).responses[0].partitions[0]


def test_long_poll_returns_as_soon_as_data_arrives(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    waited: dict[str, float] = {}

    def long_poll() -> None:
        with WireClient.connect(bootstrap) as client:
            start = time.monotonic()
            part = wire_fetch(client, topic_name, 0, max_wait_ms=10_000)
            waited["seconds"] = time.monotonic() - start
            waited["bytes"] = len(part.records)

    thread = threading.Thread(target=long_poll)
    thread.start()
    time.sleep(0.5)
    with WireClient.connect(bootstrap) as client:
        assert wire_produce(client, topic_name, encode_batch([Record(0, 0, b"k", b"wake up", [])],
                                                             base_timestamp=int(time.time() * 1000)))[0] == 0
    thread.join(15)
    assert waited["bytes"] > 0
    assert 0.4 < waited["seconds"] < 8.0, waited  # woken by the produce, well before max_wait_ms (10 s)

    with WireClient.connect(bootstrap) as client:
        start = time.monotonic()
        part = wire_fetch(client, topic_name, 1, max_wait_ms=600)
        assert len(part.records) == 0 and part.high_watermark == 1
        assert time.monotonic() - start >= 0.5
        assert wire_fetch(client, topic_name, 5, max_wait_ms=0).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        # An error is an answer: a long poll does not wait to tell it.
        start = time.monotonic()
        assert wire_fetch(client, topic_name, 5, max_wait_ms=60_000).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert time.monotonic() - start < 30


def test_acks_zero_records_become_visible_without_any_acknowledged_produce(bootstrap: str, topic_name: str) -> None:
    """acks=0 appends wait for no response, but they still need the fsync that moves the high watermark."""
    create_topic(bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "0", "linger.ms": 0})
    for i in range(20):
        producer.produce(topic_name, b"fire and forget %d" % i)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic_name, "auto.offset.reset": "earliest"})
    try:
        deadline = time.monotonic() + 10
        high = 0
        while high < 20 and time.monotonic() < deadline:
            high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=5)[1]
            time.sleep(0.05)
        assert high == 20
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        values = [m.value() for m in consumer.consume(20, timeout=10)]
        assert values == [b"fire and forget %d" % i for i in range(20)]
    finally:
        consumer.close()


def test_list_offsets_delete_records_and_max_timestamp(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    base = int(time.time() * 1000)
    stamps = [base - 5000, base - 1000, base - 3000, base]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, ts in enumerate(stamps):
        producer.produce(topic_name, value=f"m{i}".encode(), timestamp=ts, partition=0)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lo"})
    tp = TopicPartition(topic_name, 0)
    assert consumer.get_watermark_offsets(tp, timeout=10) == (0, 4)
    by_time = consumer.offsets_for_times([TopicPartition(topic_name, 0, base - 2000)], timeout=10)[0]
    assert by_time.offset == 1
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("ListOffsets")
        request = cls(replica_id=-1, topics=[cls.ListOffsetsTopic(name=topic_name, partitions=[
            cls.ListOffsetsPartition(partition_index=0, timestamp=-3)])])
        max_ts = client.call("ListOffsets", 7, request).topics[0].partitions[0]
        assert (max_ts.offset, max_ts.timestamp) == (3, base)

        delete = client.request_class("DeleteRecords")
        result = client.call("DeleteRecords", 2, delete(timeout_ms=5000, topics=[delete.DeleteRecordsTopic(
            name=topic_name, partitions=[delete.DeleteRecordsPartition(partition_index=0, offset=2)])]))
        assert result.topics[0].partitions[0].low_watermark == 2
    assert consumer.get_watermark_offsets(tp, timeout=10) == (2, 4)
    consumer.close()


def test_idempotent_retries_are_deduplicated(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    with WireClient.connect(bootstrap) as client:
        init = client.request_class("InitProducerId")
        ids = client.call("InitProducerId", 4, init(transactional_id=None, transaction_timeout_ms=60000))
        assert ids.error_code == 0 and ids.producer_id >= 0

        def batch(seq: int, value: bytes) -> bytes:
            return encode_batch([Record(0, 0, None, value, []), Record(1, 0, None, value, [])],
                                base_timestamp=int(time.time() * 1000), producer_id=ids.producer_id,
                                producer_epoch=ids.producer_epoch, base_sequence=seq)

        assert wire_produce(client, topic_name, batch(0, b"a")) == (0, 0)
        assert wire_produce(client, topic_name, batch(0, b"a")) == (0, 0)  # the retry: same offset, no copy
        assert wire_produce(client, topic_name, batch(2, b"b")) == (0, 2)
        assert wire_produce(client, topic_name, batch(7, b"c"))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert wire_fetch(client, topic_name, 0, max_wait_ms=0).high_watermark == 4


def test_sigterm_shuts_down_cleanly_and_data_survives(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "d").start()
    create_topic(proc.bootstrap, "keep")
    producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all"})
    for i in range(50):
        producer.produce("keep", value=str(i).encode())
    assert producer.flush(10) == 0
    assert proc.stop() == 0
    assert (tmp_path / "d" / ".clean-shutdown").exists()
    proc.restart()
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "k"})
    assert consumer.get_watermark_offsets(TopicPartition("keep", 0), timeout=10) == (0, 50)
    consumer.close()
    proc.stop()


def test_retention_deletes_old_segments(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("retention_check_interval_ms: 200\n")
    with BrokerProcess(tmp_path / "d", config=config) as proc:
        admin = admin_for(proc.bootstrap)
        admin.create_topics([NewTopic("short", 1, 1, config={"segment.bytes": "2000", "retention.bytes": "4000"})])[
            "short"].result(10)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0})
        for _ in range(100):
            producer.produce("short", value=b"x" * 200)
            producer.flush(10)
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "r"})
        deadline = time.monotonic() + 15
        low = 0
        while time.monotonic() < deadline:
            low, high = consumer.get_watermark_offsets(TopicPartition("short", 0), timeout=10)
            # A retention pass may run while the messages are still arriving; wait for one that saw them all.
            if low > 50:
                break
            time.sleep(0.2)
        consumer.close()
        assert low > 50 and high == 100
