"""kafka-python's own integration expectations against sluice: its consumer group test (four members, with
its fixtures' defaults and with 3 s sessions) and its offsets_for_times error path, plus DescribeTopicPartitions
paging (KIP-966) and OffsetCommit for a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION, as KafkaApis
answers).

kafka-python's test broker runs with group.min.session.timeout.ms=1000 and group.initial.rebalance.delay.ms=0
(its servers/resources/default/kafka.properties). A consumer asking for a session below the broker's minimum
(Kafka's default is 6 s) gets INVALID_SESSION_TIMEOUT at once, from Kafka and sluice alike, never a group that
waits to become stable. With kafka-python 3.0.12 neither its group test nor offsets_for_times hangs against
sluice, today or at the start of this work; these tests keep it so."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CkPartition
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidSessionTimeoutError, KafkaTimeoutError

from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

KAFKA_PYTHON_TEST_BROKER = "group_min_session_timeout_ms: 1000\ngroup_initial_rebalance_delay_ms: 0\n"


@pytest.fixture(scope="module")
def kp_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("kp-broker")
    config = root / "broker.yaml"
    config.write_text(KAFKA_PYTHON_TEST_BROKER)
    proc = BrokerProcess(root / "data", config=Path(config)).start()
    yield proc
    proc.stop()


# One group member per process: four kafka-python consumers in one process share its GIL with the test, and on a
# loaded machine their heartbeat threads starve past a 3 s session. Closing stdin is the member's signal to leave.
_MEMBER = """
import json, select, sys
from kafka import KafkaConsumer
bootstrap, topic, index, settings = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="g-" + topic, client_id="c" + index,
                         heartbeat_interval_ms=500, auto_offset_reset="earliest", **settings)
while not select.select([sys.stdin], [], [], 0)[0]:
    consumer.poll(timeout_ms=200)
consumer.close()
"""


def _four_members_become_stable(bootstrap: str, topic_name: str, **settings: Any) -> None:
    """kafka-python's test_group: four consumers share four partitions, the broker's group Stable with all four
    members and the partitions split between them without overlap."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic(topic_name, 4, 1)])
    members = [
        subprocess.Popen(
            [sys.executable, "-c", _MEMBER, bootstrap, topic_name, str(i), json.dumps(settings)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for i in range(4)
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        deadline = time.monotonic() + 90  # four interpreters start on a loaded 2-core machine
        while True:
            group = admin.describe_consumer_groups([f"g-{topic_name}"])[f"g-{topic_name}"].result(30)
            owned = [(tp.topic, tp.partition) for m in group.members for tp in m.assignment.topic_partitions]
            if group.state == ConsumerGroupState.STABLE and len(group.members) == 4 and len(owned) == 4:
                break
            dead = [m.stderr.read() for m in members if m.poll() is not None]  # type: ignore[union-attr]
            assert not dead, dead
            assert time.monotonic() < deadline, f"not stable: {group.state}, {len(group.members)} members, {owned}"
            time.sleep(0.2)
        assert sorted(owned) == [(topic_name, p) for p in range(4)]
        assert {m.client_id for m in group.members} == {"c0", "c1", "c2", "c3"}
    finally:
        for member in members:
            member.stdin.close()  # type: ignore[union-attr]
        for member in members:
            try:
                member.wait(30)
            except subprocess.TimeoutExpired:
                member.kill()


def test_four_member_group_becomes_stable(kp_broker: BrokerProcess, topic_name: str) -> None:
    """kafka-python's test_group: four consumers with 3 s sessions share four partitions."""
    _four_members_become_stable(
        kp_broker.bootstrap, topic_name, session_timeout_ms=3000, request_timeout_ms=4000
    )


def test_kafka_pythons_group_test_with_its_defaults_on_a_default_broker(
    bootstrap: str, topic_name: str
) -> None:
    """kafka-python's test_group as its fixtures run it today (no session timeout set: kafka-python's 10 s
    default) against sluice's default settings."""
    _four_members_become_stable(bootstrap, topic_name)


def test_session_below_the_minimum_is_refused_at_once(bootstrap: str, topic_name: str) -> None:
    """With Kafka's default group.min.session.timeout.ms (6 s) a 3 s session is INVALID_SESSION_TIMEOUT."""
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=bootstrap,
        group_id=f"g-{topic_name}",
        session_timeout_ms=3000,
        request_timeout_ms=4000,
        heartbeat_interval_ms=500,
    )
    started = time.monotonic()
    try:
        with pytest.raises(InvalidSessionTimeoutError):
            consumer.poll(timeout_ms=5000)
        assert time.monotonic() - started < 5
    finally:
        consumer.close()


def test_offsets_for_times_error_path_is_prompt(bootstrap: str, topic_name: str) -> None:
    """kafka-python's test_kafka_consumer_offsets_for_times_errors: a negative timestamp is a ValueError, a
    partition that does not exist times out after request_timeout_ms, not 60 s."""
    KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic(topic_name, 1, 1)])
    consumer = KafkaConsumer(
        topic_name, bootstrap_servers=bootstrap, fetch_max_wait_ms=200, request_timeout_ms=500
    )
    try:
        with pytest.raises(ValueError):
            consumer.offsets_for_times({TopicPartition(topic_name, 0): -1})
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            consumer.offsets_for_times({TopicPartition(topic_name, 100): 0})
        assert time.monotonic() - started < 5
        assert consumer.offsets_for_times({TopicPartition(topic_name, 0): 0}) == {
            TopicPartition(topic_name, 0): None
        }
    finally:
        consumer.close()


def test_describe_topic_partitions_pages_with_a_cursor(kp_admin: KafkaAdminClient, topic_name: str) -> None:
    """KIP-966: partitions in name order, at most ResponsePartitionLimit per response, a cursor for the rest."""
    kp_admin.create_topics([NewTopic(topic_name, 5, 1), NewTopic(topic_name + "-b", 2, 1)])
    names = [topic_name, topic_name + "-b", topic_name + "-missing"]
    first = kp_admin.describe_topic_partitions(names, response_partition_limit=3)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == [
        (topic_name, [0, 1, 2])
    ]
    assert first["next_cursor"] == {"topic_name": topic_name, "partition_index": 3}
    pages, cursor = [first], first["next_cursor"]
    while cursor is not None:
        assert len(pages) < 5
        pages.append(kp_admin.describe_topic_partitions(names, response_partition_limit=3, cursor=cursor))
        cursor = pages[-1]["next_cursor"]
    seen: dict[str, list[int]] = {}
    errors = {}
    for page in pages:
        assert sum(len(t["partitions"]) for t in page["topics"]) <= 3
        for t in page["topics"]:
            seen.setdefault(t["name"], []).extend(p["partition_index"] for p in t["partitions"])
            errors[t["name"]] = t["error_code"]
    assert seen == {topic_name: [0, 1, 2, 3, 4], topic_name + "-b": [0, 1], topic_name + "-missing": []}
    assert errors[topic_name + "-missing"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_offset_commit_for_a_missing_topic_is_unknown(bootstrap: str, topic_name: str) -> None:
    """KafkaApis answers UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist, before the coordinator;
    the existing partitions of the same request are committed."""
    KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic(topic_name, 1, 1)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic_name}"})
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[CkPartition(topic_name + "-missing", 0, 5)], asynchronous=False)
        assert refused.value.args[0].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(KafkaException):
            consumer.commit(
                offsets=[CkPartition(topic_name, 0, 3), CkPartition(topic_name, 7, 3)], asynchronous=False
            )
        (committed,) = consumer.committed([CkPartition(topic_name, 0)], timeout=10)
        assert committed.offset == 3
    finally:
        consumer.close()
