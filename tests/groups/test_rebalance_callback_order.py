"""aiokafka's KIP-345 tests redone (tests/test_consumer.py: test_kip_345_enabled/_disabled): when a second
consumer's start() returns, the first consumer's rebalance callbacks for that rebalance have already run.

That holds when the broker answers a completed SyncGroup as Kafka does: the leader's answer and the
followers' go out together once the assignment is durable, so a follower never learns its assignment
before the leader, even when its SyncGroup comes after the leader's."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from group_helpers import create_topic


class Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    """Every callback's partitions, in order."""

    def __init__(self) -> None:
        self.revoked: list[set[TopicPartition]] = []
        self.assigned: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked.append(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(set(assigned))


def _consumer(bootstrap: str, group: str, instance: str | None) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        group_id=group,
        group_instance_id=instance,
        bootstrap_servers=bootstrap,
        enable_auto_commit=True,
        auto_offset_reset="earliest",
        # A short heartbeat, so the first consumer hears of the rebalance soon; the order is the same with
        # aiokafka's 3 s default.
        heartbeat_interval_ms=200,
    )


async def _second_consumer_joins(bootstrap: str, topic: str, group: str, static: bool) -> None:
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    first, second = Recorder(), Recorder()
    consumer1 = _consumer(bootstrap, group, "consumer-1" if static else None)
    consumer2 = _consumer(bootstrap, group, "consumer-2" if static else None)
    consumer1.subscribe([topic], listener=first)
    consumer2.subscribe([topic], listener=second)
    try:
        await consumer1.start()
        await consumer1.seek_to_committed()
        assert (first.revoked, first.assigned) == ([set()], [{tp0, tp1}])

        await consumer2.start()
        await consumer2.seek_to_committed()
        # What aiokafka's test asserts right here: the first consumer's second rebalance is over.
        mine, theirs = consumer1.assignment(), consumer2.assignment()
        assert first.revoked == [set(), {tp0, tp1}]
        assert first.assigned == [{tp0, tp1}, mine]
        assert (second.revoked, second.assigned) == ([set()], [theirs])
        assert mine | theirs == {tp0, tp1} and not mine & theirs and len(mine) == 1
    finally:
        await consumer2.stop()
        await consumer1.stop()


@pytest.mark.parametrize("static", [True, False], ids=["group-instance-id", "dynamic"])
def test_second_consumer_starts_after_the_first_ran_its_rebalance_callbacks(
    fast_bootstrap: str, topic_name: str, group_name: str, static: bool
) -> None:
    create_topic(fast_bootstrap, topic_name, 2)
    asyncio.run(asyncio.wait_for(_second_consumer_joins(fast_bootstrap, topic_name, group_name, static), 60))
