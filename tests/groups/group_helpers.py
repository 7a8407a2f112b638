"""Shared by the group tests: topics, producing, committed offsets, and waiting for conditions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient, NewTopic

T = TypeVar("T")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, *,
            timestamp_of: Callable[[int, int], int] | None = None, start: int = 0) -> None:
    """`per_partition` messages to each partition; the value names its partition and sequence number."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for seq in range(start, start + per_partition):
        for partition in range(partitions):
            extra = {} if timestamp_of is None else {"timestamp": timestamp_of(partition, seq)}
            producer.produce(topic, value=f"{partition}:{seq}".encode(), partition=partition, **extra)
    assert producer.flush(30) == 0


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def group_state(bootstrap: str, group: str) -> tuple[str, int]:
    """(state name, member count) as DescribeGroups reports them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(30)
    return description.state.name, len(description.members)


def wait_for(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll until `condition()` is truthy and return it; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
