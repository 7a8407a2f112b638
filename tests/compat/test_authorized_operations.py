"""KIP-430 authorized operations: a client that asks (include_authorized_operations) is told which ACL
operations its principal has on a topic. With the ACL authorizer allowing everyone, Kafka lists all eight
topic operations; librdkafka's test 0081 (DescribeTopics with authorized operations) checks exactly that.
A client that does not ask gets the "not requested" default; with no authorizer every operation is listed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from sluice.client.wire import WireClient
from sluice.testing import BrokerProcess

NOT_REQUESTED = -(2**31)

TOPIC_OPERATIONS = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("authorized-operations")
    config = root / "broker.yaml"
    config.write_text("authorizer: acl\nallow_everyone_if_no_acl_found: true\n")
    proc = BrokerProcess(root / "data", config=config).start()
    yield proc
    proc.stop()


def test_describe_topics_lists_the_operations_everyone_has(acl_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap})
    admin.create_topics([NewTopic("described", 1, 1)])["described"].result(10)
    (future,) = admin.describe_topics(
        TopicCollection(["described"]), include_authorized_operations=True, request_timeout=10
    ).values()
    description = future.result()
    assert set(description.authorized_operations or []) == TOPIC_OPERATIONS


CLUSTER_OPERATIONS = {
    AclOperation.CREATE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
}
GROUP_OPERATIONS = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}


def _topic_operations(bootstrap: str, topic: str, include: bool = True) -> set[AclOperation] | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_topics(
        TopicCollection([topic]), include_authorized_operations=include, request_timeout=10
    ).values()
    operations = future.result().authorized_operations
    return None if operations is None else set(operations)


def _cluster_operations(bootstrap: str) -> set[AclOperation]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_cluster(include_authorized_operations=True, request_timeout=10).result()
    return set(description.authorized_operations or [])


def _group_operations(bootstrap: str, topic: str, group: str) -> set[AclOperation]:
    # A group that committed an offset exists (Empty) without a live member.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_consumer_groups(
        [group], include_authorized_operations=True, request_timeout=10
    ).values()
    return set(future.result().authorized_operations or [])


def test_describe_cluster_and_groups_list_every_operation(acl_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap})
    admin.create_topics([NewTopic("grouped", 1, 1)])["grouped"].result(10)
    assert _cluster_operations(acl_broker.bootstrap) == CLUSTER_OPERATIONS
    assert _group_operations(acl_broker.bootstrap, "grouped", "described-group") == GROUP_OPERATIONS


def test_a_principal_allowed_only_read_sees_read_and_describe(acl_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap})
    for future in admin.create_topics([NewTopic("read-only", 1, 1), NewTopic("open", 1, 1)]).values():
        future.result(10)
    binding = AclBinding(
        ResourceType.TOPIC,
        "read-only",
        ResourcePatternType.LITERAL,
        "User:ANONYMOUS",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding]).values():
        future.result(10)
    assert _topic_operations(acl_broker.bootstrap, "read-only") == {AclOperation.READ, AclOperation.DESCRIBE}
    read_describe = (1 << int(AclOperation.READ.value)) | (1 << int(AclOperation.DESCRIBE.value))
    with WireClient.connect(acl_broker.bootstrap) as client:
        Request = client.request_class("DescribeTopicPartitions")
        request = Request(topics=[Request.TopicRequest(name="read-only")])
        (topic,) = client.call("DescribeTopicPartitions", 0, request).topics
        assert (topic.error_code, topic.topic_authorized_operations) == (0, read_describe)
    # Topics without ACLs keep allowing everyone.
    assert _topic_operations(acl_broker.bootstrap, "open") == TOPIC_OPERATIONS


def test_without_an_authorizer_every_supported_operation_is_listed(bootstrap: str, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    assert _topic_operations(bootstrap, topic_name) == TOPIC_OPERATIONS
    assert _cluster_operations(bootstrap) == CLUSTER_OPERATIONS
    assert _group_operations(bootstrap, topic_name, f"{topic_name}-group") == GROUP_OPERATIONS


def test_metadata_reports_operations_only_when_asked(bootstrap: str, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    topic_bits = sum(1 << int(op.value) for op in TOPIC_OPERATIONS)
    cluster_bits = sum(1 << int(op.value) for op in CLUSTER_OPERATIONS)
    with WireClient.connect(bootstrap) as client:
        Request = client.request_class("Metadata")
        for asked in (True, False):
            request = Request(
                topics=[Request.MetadataRequestTopic(name=topic_name)],
                include_cluster_authorized_operations=asked,
                include_topic_authorized_operations=asked,
            )
            response = client.call("Metadata", 10, request)
            (topic,) = response.topics
            assert topic.topic_authorized_operations == (topic_bits if asked else NOT_REQUESTED)
            assert response.cluster_authorized_operations == (cluster_bits if asked else NOT_REQUESTED)


def test_consumer_group_describe_reports_operations_only_when_asked(acl_broker: BrokerProcess) -> None:
    group_bits = sum(1 << int(op.value) for op in GROUP_OPERATIONS)
    with WireClient.connect(acl_broker.bootstrap) as client:
        joined = client.call(
            "ConsumerGroupHeartbeat",
            1,
            client.request_class("ConsumerGroupHeartbeat")(
                group_id="kip848-described",
                member_id=uuid.uuid4().hex,
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=["described"],
                topic_partitions=[],
            ),
        )
        assert joined.error_code == 0
        Request = client.request_class("ConsumerGroupDescribe")
        for asked, expected in ((True, group_bits), (False, NOT_REQUESTED)):
            request = Request(group_ids=["kip848-described"], include_authorized_operations=asked)
            (group,) = client.call("ConsumerGroupDescribe", 0, request).groups
            assert (group.error_code, group.authorized_operations) == (0, expected)
