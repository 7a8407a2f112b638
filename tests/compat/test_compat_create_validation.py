"""CreateTopics and CreatePartitions refuse what Kafka's controller refuses (ControllerApis and
ReplicationControlManager in Kafka 3.9/4.x), and a refused topic or partition never appears afterwards, not
even after a kill -9: names given twice, manual assignments of the wrong shape, more than 10,000 partitions
in one request, names that collide with an existing topic over '.' and '_'. KIP-195 (CreatePartitions) and
KIP-525 (CreateTopics v5 answers with partitions and replication factor) apply throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess


def _create(
    bootstrap: str, topics: list[dict[str, Any]], validate_only: bool = False
) -> dict[str, tuple[int, str]]:
    """CreateTopics v7 over the wire: {name: (error_code, error_message)}; each answer named once."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("CreateTopics")
        creatable = [
            R.CreatableTopic(
                name=t["name"],
                num_partitions=t.get("partitions", 1),
                replication_factor=t.get("replicas", 1),
                assignments=[
                    R.CreatableReplicaAssignment(partition_index=i, broker_ids=ids)
                    for i, ids in t.get("assignments", [])
                ],
            )
            for t in topics
        ]
        response = wire.call(
            "CreateTopics", 7, R(topics=creatable, timeout_ms=10_000, validate_only=validate_only)
        )
    names = [t.name for t in response.topics]
    assert len(names) == len(set(names)), names
    return {t.name: (t.error_code, t.error_message) for t in response.topics}


def _partitions(bootstrap: str, name: str) -> int | None:
    """Partitions of `name` from Metadata with allow_auto_topic_creation=false, None if it does not exist."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("Metadata")
        response = wire.call(
            "Metadata", 12, R(topics=[R.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
        )
    (topic,) = response.topics
    return len(topic.partitions) if topic.error_code == 0 else None


def test_a_name_given_twice_is_answered_once_and_not_created(bootstrap: str, topic_name: str) -> None:
    twice, once = f"{topic_name}-twice", f"{topic_name}-once"
    results = _create(bootstrap, [{"name": twice}, {"name": once}, {"name": twice, "partitions": 3}])
    assert results[twice] == (ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    assert set(results) == {twice, once} and results[once][0] == 0
    assert _partitions(bootstrap, twice) is None
    assert _partitions(bootstrap, once) == 1


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        ({"partitions": 3, "replicas": -1, "assignments": [(0, [1])]}, ErrorCode.INVALID_REQUEST),
        ({"partitions": -1, "replicas": 1, "assignments": [(0, [1])]}, ErrorCode.INVALID_REQUEST),
        (
            {"partitions": -1, "replicas": -1, "assignments": [(0, [1]), (0, [1])]},
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            {"partitions": -1, "replicas": -1, "assignments": [(0, [1]), (2, [1])]},
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
        ({"partitions": -1, "replicas": -1, "assignments": [(0, [])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (
            {"partitions": -1, "replicas": -1, "assignments": [(0, [1, 1])]},
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
        ({"partitions": 1, "replicas": -2}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ({"partitions": -2, "replicas": 1}, ErrorCode.INVALID_PARTITIONS),
    ],
)
def test_manual_assignments_and_counts_of_the_wrong_shape_are_refused(
    bootstrap: str, topic_name: str, topic: dict[str, Any], code: int
) -> None:
    for validate_only in (True, False):
        ((got, message),) = _create(bootstrap, [{"name": topic_name, **topic}], validate_only).values()
        assert got == code and message
    assert _partitions(bootstrap, topic_name) is None


def test_a_manual_assignment_naming_this_node_creates_the_topic(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """librdkafka sends a replica assignment with num_partitions and replication_factor -1, as Kafka requires."""
    ck_admin.create_topics([NewTopic(topic_name, 3, replica_assignment=[[1], [1], [1]])])[topic_name].result(
        10
    )
    assert _partitions(bootstrap, topic_name) == 3


def test_more_than_ten_thousand_partitions_in_one_request_is_a_policy_violation(
    bootstrap: str, topic_name: str
) -> None:
    """QuorumController.MAX_RECORDS_PER_USER_OP: the whole request is refused, every topic in it named."""
    topics = [{"name": f"{topic_name}-{i}", "partitions": 5000} for i in range(2)] + [
        {"name": f"{topic_name}-small"}
    ]
    results = _create(bootstrap, topics)
    assert set(results) == {t["name"] for t in topics}
    assert all(
        code == ErrorCode.POLICY_VIOLATION and "Excessively large" in msg for code, msg in results.values()
    )
    assert all(_partitions(bootstrap, t["name"]) is None for t in topics)
    ((code, _),) = _create(bootstrap, [{"name": f"{topic_name}-huge", "partitions": 2**31 - 1}]).values()
    assert code == ErrorCode.POLICY_VIOLATION


def test_names_colliding_over_dot_and_underscore_are_refused(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    dotted, underscored = f"{topic_name}.orders", f"{topic_name}_orders"
    ck_admin.create_topics([NewTopic(dotted, 1, 1)])[dotted].result(10)
    with pytest.raises(KafkaException) as refused:
        ck_admin.create_topics([NewTopic(underscored, 1, 1)])[underscored].result(10)
    error = refused.value.args[0]
    assert error.code() == ErrorCode.INVALID_TOPIC_EXCEPTION and "collides with existing topic" in error.str()
    assert _partitions(bootstrap, underscored) is None
    with pytest.raises(KafkaException) as exists:
        ck_admin.create_topics([NewTopic(dotted, 1, 1)])[dotted].result(10)
    assert exists.value.args[0].code() == ErrorCode.TOPIC_ALREADY_EXISTS


def test_double_underscore_names_are_ordinary_topics_but_internal_ones_are_taken(
    bootstrap: str, topic_name: str
) -> None:
    """Kafka creates '__'-prefixed topics like any other (Debezium's heartbeat topics are named so); the
    broker's own topics answer TOPIC_ALREADY_EXISTS or are refused, never handed to a user."""
    heartbeat = f"__debezium-heartbeat-{topic_name}"
    assert _create(bootstrap, [{"name": heartbeat}])[heartbeat][0] == 0
    assert _partitions(bootstrap, heartbeat) == 1
    results = _create(bootstrap, [{"name": "__consumer_offsets"}, {"name": "__transaction_state"}])
    assert results["__consumer_offsets"][0] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert results["__transaction_state"][0] in (
        ErrorCode.TOPIC_ALREADY_EXISTS,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
    )


def _grow(
    bootstrap: str, topics: list[tuple[str, int, list[list[int]] | None]], validate_only: bool = False
) -> dict:
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("CreatePartitions")
        request = R(
            topics=[
                R.CreatePartitionsTopic(
                    name=name,
                    count=count,
                    assignments=None
                    if ids is None
                    else [R.CreatePartitionsAssignment(broker_ids=b) for b in ids],
                )
                for name, count, ids in topics
            ],
            timeout_ms=10_000,
            validate_only=validate_only,
        )
        response = wire.call("CreatePartitions", 3, request)
    names = [r.name for r in response.results]
    assert len(names) == len(set(names)), names
    return {r.name: (r.error_code, r.error_message) for r in response.results}


def test_create_partitions_refusals_grow_nothing(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """KIP-195 as Kafka's controller answers: a name twice, assignments that do not match the partitions
    added or name another broker, more than 10,000 new partitions; none of them grows the topic."""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    assert _grow(bootstrap, [(topic_name, 2, None), (topic_name, 3, None)]) == {
        topic_name: (ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    }
    for count, ids, code in [
        (3, [[1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (2, [[2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (2, [[1, 1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (20_001, None, ErrorCode.POLICY_VIOLATION),
        (1, None, ErrorCode.INVALID_PARTITIONS),
    ]:
        ((got, message),) = _grow(bootstrap, [(topic_name, count, ids)]).values()
        assert (got, bool(message)) == (code, True), (count, ids)
    assert _partitions(bootstrap, topic_name) == 1
    ck_admin.create_partitions([NewPartitions(topic_name, 3, replica_assignment=[[1], [1]])])[
        topic_name
    ].result(10)
    assert _partitions(bootstrap, topic_name) == 3


def test_refused_topics_stay_absent_after_kill(data_dir: Path) -> None:
    """A kill -9 right after a mix of refused and accepted creations brings back exactly the accepted ones."""
    broker = BrokerProcess(data_dir).start()
    try:
        results = _create(
            broker.bootstrap,
            [
                {"name": "kept", "partitions": 2},
                {"name": "twice"},
                {"name": "twice"},
                {"name": "bad", "partitions": 0},
            ],
        )
        assert {name: code for name, (code, _) in results.items()} == {
            "kept": 0,
            "twice": ErrorCode.INVALID_REQUEST,
            "bad": ErrorCode.INVALID_PARTITIONS,
        }
        assert _grow(broker.bootstrap, [("kept", 3, [[1]])])["kept"][0] == 0
        broker.kill()
        broker.start()
        assert _partitions(broker.bootstrap, "kept") == 3
        assert _partitions(broker.bootstrap, "twice") is None and _partitions(broker.bootstrap, "bad") is None
    finally:
        broker.stop()


def test_metadata_and_described_partitions_follow_growth_and_re_creation(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """Metadata and DescribeTopicPartitions (KIP-966) answer from the topic as it is now, after the topic grows
    and after it is deleted and created again with another partition count and id."""

    def described() -> tuple[int, Any]:
        with WireClient.connect(bootstrap) as wire:
            R = wire.request_class("DescribeTopicPartitions")
            request = R(topics=[R.TopicRequest(name=topic_name)], response_partition_limit=2000)
            (topic,) = wire.call("DescribeTopicPartitions", 0, request).topics
        return len(topic.partitions), topic.topic_id

    ck_admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(10)
    assert _partitions(bootstrap, topic_name) == 2 and described()[0] == 2
    ck_admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(10)
    assert _partitions(bootstrap, topic_name) == 3 and described()[0] == 3
    first_id = described()[1]
    ck_admin.delete_topics([topic_name])[topic_name].result(10)
    ck_admin.create_topics([NewTopic(topic_name, 5, 1)])[topic_name].result(10)
    assert _partitions(bootstrap, topic_name) == 5
    count, topic_id = described()
    assert count == 5 and topic_id != first_id


def test_create_topics_answers_with_the_configs_describe_configs_reports(
    bootstrap: str, topic_name: str
) -> None:
    """KIP-525: CreateTopics v5+ answers with the partitions, replication factor and every config of the new
    topic, each with its source as DescribeConfigs reports it; validate_only answers the same, creating
    nothing."""

    def create(validate_only: bool) -> Any:
        with WireClient.connect(bootstrap) as wire:
            R = wire.request_class("CreateTopics")
            topic = R.CreatableTopic(
                name=topic_name,
                num_partitions=3,
                replication_factor=-1,
                configs=[R.CreateableTopicConfig(name="retention.ms", value="3600000")],
            )
            request = R(topics=[topic], timeout_ms=10_000, validate_only=validate_only)
            (result,) = wire.call("CreateTopics", 7, request).topics
        assert result.error_code == 0, result.error_message
        return result

    def view(result: Any) -> dict[str, tuple[str | None, int]]:
        return {c.name: (c.value, c.config_source) for c in result.configs}

    checked = create(validate_only=True)
    assert _partitions(bootstrap, topic_name) is None
    created = create(validate_only=False)
    assert (created.num_partitions, created.replication_factor) == (3, 1) == (checked.num_partitions, 1)
    assert view(created) == view(checked)
    assert view(created)["retention.ms"] == ("3600000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert view(created)["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("DescribeConfigs")
        resource = R.DescribeConfigsResource(
            resource_type=2, resource_name=topic_name, configuration_keys=None
        )
        (described,) = wire.call("DescribeConfigs", 4, R(resources=[resource])).results
    assert {c.name: (c.value, c.config_source) for c in described.configs} == view(created)


def test_delete_topics_naming_a_topic_twice_deletes_neither(bootstrap: str, topic_name: str) -> None:
    """Kafka's ControllerApis.deleteTopics: a name (or id) given twice is answered once with INVALID_REQUEST and
    that topic is not deleted; the rest of the request goes ahead."""
    kept, gone = f"{topic_name}-kept", f"{topic_name}-gone"
    assert {code for code, _ in _create(bootstrap, [{"name": kept}, {"name": gone}]).values()} == {0}
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("DeleteTopics")
        request = R(topic_names=[kept, gone, kept], timeout_ms=10_000)
        results = {
            r.name: (r.error_code, r.error_message) for r in wire.call("DeleteTopics", 5, request).responses
        }
    assert results == {kept: (ErrorCode.INVALID_REQUEST, "Duplicate topic name."), gone: (0, None)}
    assert _partitions(bootstrap, kept) == 1 and _partitions(bootstrap, gone) is None
