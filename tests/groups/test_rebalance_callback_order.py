"""aiokafka's KIP-345 tests redone (tests/test_consumer.py: test_kip_345_enabled/_disabled): a second consumer
joins, and the first consumer's rebalance callbacks run with the partitions the group split between them.

aiokafka's own tests check the callbacks the moment the second consumer's start() returns. That holds when
the broker answers a completed SyncGroup as Kafka does: a follower whose SyncGroup comes after its leader's is
answered only once the assignment the leader's call wrote is durable, so never before the leader. The broker's
side of that is asserted exactly below, on the request pipeline; the moment itself also depends on how
aiokafka schedules its two consumers' tasks in one event loop, which a loaded machine can reorder, so the
consumers' callbacks are awaited with a bound."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from group_helpers import create_topic
from tests.broker.without_sockets import Connection, dispatch, request_frame

from sluice.broker.broker import OFFSETS_TOPIC
from sluice.broker.config import BrokerConfig
from sluice.broker.dispatch import Dispatched, Reply, build_dispatcher
from sluice.protocol.messages import APIS_BY_NAME, request_codecs
from sluice.server.app import build_broker


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
        deadline = time.monotonic() + 30
        while len(first.assigned) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the first consumer's own task runs its second rebalance's callbacks
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


def test_a_follower_syncing_after_its_leader_is_answered_once_the_assignment_is_durable() -> None:
    broker = build_broker(
        BrokerConfig(data_dir=None, auto_create_topics=False, group_initial_rebalance_delay_ms=0)
    )
    dispatcher, connection = build_dispatcher(broker), Connection()
    join_cls = request_codecs(APIS_BY_NAME["JoinGroup"].key).cls
    sync_cls = request_codecs(APIS_BY_NAME["SyncGroup"].key).cls

    def call(api: str, **fields: Any) -> Reply:
        dispatched, reply = dispatch(dispatcher, request_frame(api, 3, **fields), connection, 1_000)
        assert isinstance(dispatched, Dispatched)
        return reply

    def join(member: str) -> Reply:
        protocol = join_cls.JoinGroupRequestProtocol(name="range", metadata=b"")
        return call("JoinGroup", group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                    member_id=member, protocol_type="consumer", protocols=[protocol])  # fmt: skip

    def sync(member: str, generation: int, assignments: dict[str, bytes]) -> Reply:
        return call("SyncGroup", group_id="g", member_id=member, generation_id=generation, assignments=[
            sync_cls.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()])  # fmt: skip

    join("")
    ((_, joined, _),) = dispatcher.take_ready_replies()
    leader = joined.member_id
    sync(leader, 1, {leader: b"both"})
    dispatcher.take_ready_replies()
    follower_join = join("")  # a second member: the leader rejoins, and both hear of generation 2
    join(leader)
    follower = next(r.member_id for token, r, _ in dispatcher.take_ready_replies() if token == follower_join)
    leader_sync = sync(leader, 2, {leader: b"p0", follower: b"p1"})
    follower_sync = sync(follower, 2, {})
    ready = {token: (response, after) for token, response, after in dispatcher.take_ready_replies()}
    assert ready[leader_sync][0].assignment == b"p0" and ready[follower_sync][0].assignment == b"p1"
    # The follower's answer wrote nothing itself, but it tells what its leader's call wrote: it waits for the
    # group's records to be on disk, as the leader's does, instead of going out at once.
    assert ready[leader_sync][1] == ready[follower_sync][1] == (OFFSETS_TOPIC, 0)
