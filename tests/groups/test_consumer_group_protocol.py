"""KIP-848 consumer groups (group.protocol=consumer) with librdkafka against a real broker process."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient
from group_helpers import (
    CONSUMER_GROUP_SESSION_MS,
    RawMember,
    committed_offsets,
    create_topic,
    produce,
    wait_for,
)
from group_members import ConsumerProtocolMember, Ledger, partitions_covered, wait_until

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode

PARTITIONS = 6
TIMEOUT = 90.0  # a loaded 2-core machine runs a broker and several librdkafka clients at once


def describe(bootstrap: str, group: str) -> Any:
    """ConsumerGroupDescribe on the wire: the one group's description."""
    with WireClient.connect(bootstrap) as client:
        request = client.request_class("ConsumerGroupDescribe")(group_ids=[group])
        return client.call("ConsumerGroupDescribe", 0, request).groups[0]


def heartbeat(client: WireClient, group: str, member_id: str, epoch: int, topics: list[str] | None = None) -> Any:
    cls = client.request_class("ConsumerGroupHeartbeat")
    request = cls(group_id=group, member_id=member_id, member_epoch=epoch,
                  rebalance_timeout_ms=30_000 if epoch == 0 else -1,
                  subscribed_topic_names=topics, topic_partitions=[] if epoch == 0 else None)
    return client.call("ConsumerGroupHeartbeat", 1, request)


def end_offsets(partitions: int, per_partition: int) -> dict[int, int]:
    return dict.fromkeys(range(partitions), per_partition)


def test_members_join_and_leave_and_every_message_is_processed_once(
        fast_bootstrap: str, topic_name: str, group_name: str) -> None:
    create_topic(fast_bootstrap, topic_name, PARTITIONS)
    ledger = Ledger()
    produced = 0

    def produce_more(count: int) -> None:
        nonlocal produced
        produce(fast_bootstrap, topic_name, PARTITIONS, count, start=produced)
        produced += count

    def member(name: str) -> ConsumerProtocolMember:
        return ConsumerProtocolMember(name, ledger, fast_bootstrap, group_name, topic_name)

    produce_more(30)
    first, second = member("first").start(), member("second").start()
    members = [first, second]
    wait_until(lambda: partitions_covered(members, PARTITIONS)
               and all(len(m.holding()) == 3 for m in members), TIMEOUT, "two members sharing", members)
    produce_more(30)
    third = member("third").start()
    members.append(third)
    wait_until(lambda: partitions_covered(members, PARTITIONS)
               and all(len(m.holding()) == 2 for m in members), TIMEOUT, "three members sharing", members)
    produce_more(30)
    first.stop()
    members.remove(first)
    wait_until(lambda: partitions_covered(members, PARTITIONS), TIMEOUT, "two members after a leave", members)
    produce_more(30)
    wait_until(lambda: ledger.total() == PARTITIONS * produced, TIMEOUT, "every message processed", members)
    for each in members:
        each.stop()
    assert not any(m.errors for m in (first, second, third))
    ledger.check_exactly_once(end_offsets(PARTITIONS, produced))
    assert committed_offsets(fast_bootstrap, group_name) == {
        (topic_name, p): produced for p in range(PARTITIONS)}
    assert first.revoked_partitions >= 1, "the first member must have given partitions away before leaving"


def test_member_that_stops_heartbeating_is_removed_after_the_session_timeout(
        fast_bootstrap: str, topic_name: str, group_name: str) -> None:
    create_topic(fast_bootstrap, topic_name, PARTITIONS)
    # A member that joins, takes every partition and then goes silent (a crashed process).
    with WireClient.connect(fast_bootstrap) as silent:
        joined = heartbeat(silent, group_name, "silent-member", 0, [topic_name])
        assert joined.error_code == 0
        assert sum(len(t.partitions) for t in joined.assignment.topic_partitions) == PARTITIONS
    went_silent = time.monotonic()
    ledger = Ledger()
    live = ConsumerProtocolMember("live", ledger, fast_bootstrap, group_name, topic_name).start()
    try:
        # The live member gets nothing while the silent one holds everything...
        time.sleep(1.0)
        assert live.holding() == set()
        # ...and everything once the silent one's session has run out.
        wait_until(lambda: live.holding() == set(range(PARTITIONS)), TIMEOUT, "the silent member's partitions",
                   [live])
        assert time.monotonic() - went_silent >= CONSUMER_GROUP_SESSION_MS / 1000 * 0.9
        members = describe(fast_bootstrap, group_name).members
        assert [m.client_id for m in members] == ["live"]
    finally:
        live.stop()
    assert not live.errors


def test_list_describe_and_consumer_group_describe_show_the_group(
        fast_bootstrap: str, topic_name: str, group_name: str) -> None:
    create_topic(fast_bootstrap, topic_name, PARTITIONS)
    ledger = Ledger()
    members = [ConsumerProtocolMember(f"m{i}", ledger, fast_bootstrap, group_name, topic_name).start()
               for i in range(2)]
    try:
        wait_until(lambda: partitions_covered(members, PARTITIONS) and all(m.holding() for m in members),
                   TIMEOUT, "the group forming", members)
        admin = AdminClient({"bootstrap.servers": fast_bootstrap})
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30)
        mine = [g for g in listed.valid if g.group_id == group_name]
        assert len(mine) == 1 and mine[0].type == ConsumerGroupType.CONSUMER
        classic_only = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(30)
        assert group_name not in {g.group_id for g in classic_only.valid}

        def settled() -> Any:
            group = describe(fast_bootstrap, group_name)
            return group if group.group_state == "Stable" and len(group.members) == 2 else None

        group = wait_for(settled, TIMEOUT, "a Stable group")
        assert group.error_code == 0 and group.assignor_name == "uniform"
        assert group.group_epoch == group.assignment_epoch >= 2
        assert sorted(m.client_id for m in group.members) == ["m0", "m1"]
        for m in group.members:
            assert m.subscribed_topic_names == [topic_name]
            assert [t.topic_name for t in m.assignment.topic_partitions] == [topic_name]
            assert len(m.assignment.topic_partitions[0].partitions) == 3

        # librdkafka's describe goes through ConsumerGroupDescribe for a consumer group.
        description = admin.describe_consumer_groups([group_name])[group_name].result(30)
        assert len(description.members) == 2
        assigned = sorted(tp.partition for m in description.members for tp in m.assignment.topic_partitions)
        assert assigned == list(range(PARTITIONS))

        # The classic DescribeGroups, as in Kafka, says the group is not a classic one.
        with WireClient.connect(fast_bootstrap) as client:
            request = client.request_class("DescribeGroups")(groups=[group_name])
            classic = client.call("DescribeGroups", 5, request).groups[0]
            assert classic.group_state == "Dead"
            newest = client.call("DescribeGroups", 6, request).groups[0]
            assert newest.error_code == ErrorCode.GROUP_ID_NOT_FOUND
            assert "not a classic group" in newest.error_message
    finally:
        for member in members:
            member.stop()


def test_the_two_protocols_do_not_share_a_group(fast_bootstrap: str, topic_name: str, group_name: str) -> None:
    create_topic(fast_bootstrap, topic_name, PARTITIONS)
    ledger = Ledger()
    modern = ConsumerProtocolMember("modern", ledger, fast_bootstrap, group_name, topic_name).start()
    try:
        wait_until(lambda: modern.holding() == set(range(PARTITIONS)), TIMEOUT, "the consumer group", [modern])
        # A classic member cannot join the live consumer group...
        classic = RawMember(fast_bootstrap, group_name)
        try:
            response = classic.join([topic_name])
            assert response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        finally:
            classic.close()
    finally:
        modern.stop()

    # ...and a consumer-protocol member cannot join a live classic group.
    classic_group = f"{group_name}-classic"
    classic = RawMember(fast_bootstrap, classic_group)
    try:
        classic.join_fully([topic_name])
        assert classic.sync({classic.member_id: b""}).error_code == 0
        with WireClient.connect(fast_bootstrap) as client:
            refused = heartbeat(client, classic_group, "modern-member", 0, [topic_name])
        assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert "not a consumer group" in refused.error_message
    finally:
        classic.leave()
        classic.close()


def test_committed_offsets_survive_the_group_going_empty_and_coming_back(
        fast_bootstrap: str, topic_name: str, group_name: str) -> None:
    create_topic(fast_bootstrap, topic_name, PARTITIONS)
    produce(fast_bootstrap, topic_name, PARTITIONS, 20)
    ledger = Ledger()
    first = ConsumerProtocolMember("first", ledger, fast_bootstrap, group_name, topic_name).start()
    wait_until(lambda: ledger.total() == PARTITIONS * 20, TIMEOUT, "the first batch", [first])
    first.stop()
    assert committed_offsets(fast_bootstrap, group_name) == {(topic_name, p): 20 for p in range(PARTITIONS)}
    produce(fast_bootstrap, topic_name, PARTITIONS, 10, start=20)
    second = ConsumerProtocolMember("second", ledger, fast_bootstrap, group_name, topic_name).start()
    wait_until(lambda: ledger.total() == PARTITIONS * 30, TIMEOUT, "the second batch", [second])
    second.stop()
    ledger.check_exactly_once(end_offsets(PARTITIONS, 30))
    assert committed_offsets(fast_bootstrap, group_name) == {(topic_name, p): 30 for p in range(PARTITIONS)}
