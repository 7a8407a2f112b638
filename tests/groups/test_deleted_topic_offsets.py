"""DeleteTopics takes the topic's committed offsets with it, in every group, as Kafka's group coordinator does
(issue #42): tombstones in __consumer_offsets, so the offsets stay gone after kill -9, and a topic made again
under the same name starts with no committed offsets."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from group_helpers import committed_offsets, create_topic, fast_config, produce, wait_for

from sluice.testing import BrokerProcess

OFFSETS_TOPIC = "__consumer_offsets"


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", config=fast_config(tmp_path)).start()
    yield proc
    proc.stop()


def offset_tombstones(bootstrap: str) -> set[tuple[str, str, int]]:
    """(group, topic, partition) of every offset-commit tombstone in __consumer_offsets, read as any Kafka
    tool reads it: key = int16 type (0 or 1) + group + topic + int32 partition, value null."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tombstone-reader", "enable.auto.commit": False}
    )
    found: set[tuple[str, str, int]] = set()
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(OFFSETS_TOPIC, 0, 0)])
        position = 0
        while position < end:
            message = consumer.poll(10)
            assert message is not None, f"__consumer_offsets stopped at {position} of {end}"
            assert message.error() is None, message.error()
            position = message.offset() + 1
            key = message.key() or b""
            if message.value() is None and struct.unpack_from(">h", key)[0] in (0, 1):
                group_len = struct.unpack_from(">h", key, 2)[0]
                group = key[4 : 4 + group_len].decode()
                topic_len = struct.unpack_from(">h", key, 4 + group_len)[0]
                topic = key[6 + group_len : 6 + group_len + topic_len].decode()
                found.add((group, topic, struct.unpack_from(">i", key, 6 + group_len + topic_len)[0]))
    finally:
        consumer.close()
    return found


def test_deleting_a_topic_deletes_its_offsets_in_every_group_for_good(own_broker: BrokerProcess) -> None:
    bootstrap = own_broker.bootstrap
    create_topic(bootstrap, "orders", 3)
    create_topic(bootstrap, "kept", 1)
    produce(bootstrap, "orders", 3, 4)
    produce(bootstrap, "kept", 1, 4)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # An admin tool's commit ("simple" group), and a KIP-848 consumer that read and committed.
    admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("tool", [TopicPartition("orders", p, 2) for p in range(3)])]
    )["tool"].result(30)
    admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("tool", [TopicPartition("kept", 0, 1)])]
    )["tool"].result(30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "readers",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["orders", "kept"])
    read = 0
    while read < 16:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    before = committed_offsets(bootstrap, "readers")
    assert before == {("orders", 0): 4, ("orders", 1): 4, ("orders", 2): 4, ("kept", 0): 4}

    admin.delete_topics(["orders"])["orders"].result(30)

    assert committed_offsets(bootstrap, "tool") == {("kept", 0): 1}
    assert committed_offsets(bootstrap, "readers") == {("kept", 0): 4}
    assert {("tool", "orders", p) for p in range(3)} | {("readers", "orders", p) for p in range(3)} <= (
        offset_tombstones(bootstrap)
    )
    # Made again with one partition: no group finds an old offset on it.
    create_topic(bootstrap, "orders", 1)
    assert committed_offsets(bootstrap, "tool") == {("kept", 0): 1}
    own_broker.kill()
    own_broker.restart()
    assert committed_offsets(bootstrap, "tool") == {("kept", 0): 1}
    assert committed_offsets(bootstrap, "readers") == {("kept", 0): 4}
    # A consumer of the new topic in the old group starts where auto.offset.reset says, not at offset 4.
    produce(bootstrap, "orders", 1, 2)
    again = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tool",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        again.assign([TopicPartition("orders", 0)])
        first = wait_for(lambda: again.poll(0.5), 30, "a message of the new topic")
        assert first.error() is None and first.offset() == 0
    finally:
        again.close()
