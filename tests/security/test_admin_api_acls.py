"""The authorizer on the cluster-administration APIs, with Kafka's rules (KafkaApis/ControllerApis): Describe
on the cluster for DescribeLogDirs (KIP-113), ListPartitionReassignments (KIP-455) and DescribeQuorum,
Alter for AlterReplicaLogDirs, ElectLeaders (KIP-460), reassignments and UpdateFeatures (KIP-584),
DescribeConfigs/AlterConfigs on the cluster for the client quota APIs (KIP-546), and Describe on each topic
for DescribeTopicPartitions (KIP-966), where a request for every topic leaves out the ones not allowed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from secure_broker import SecureBroker
from wire_auth import connect, login

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def make_user(admin: AdminClient) -> str:
    user = f"u{uuid.uuid4().hex[:8]}"
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
    )
    admin.alter_user_scram_credentials([upsert])[user].result(timeout=10)
    return user


def make_topic(admin: AdminClient) -> str:
    name = f"adm-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    return name


def allow(admin: AdminClient, user: str, rtype: ResourceType, name: str, op: AclOperation) -> None:
    binding = AclBinding(
        rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW
    )
    for future in admin.create_acls([binding]).values():
        future.result(timeout=10)


@pytest.fixture
def user_wire(secure_broker: SecureBroker) -> Iterator[tuple[AdminClient, str, WireClient]]:
    admin = AdminClient(secure_broker.admin_settings())
    user = make_user(admin)
    wire = connect(secure_broker.address("SASL_PLAINTEXT"))
    assert login(wire, user, "pw").error_code == 0
    try:
        yield admin, user, wire
    finally:
        wire.close()


def _call(wire: WireClient, api: str, version: int, **fields: Any) -> Any:
    return wire.call(api, version, wire.request_class(api)(**fields))


def test_cluster_apis_need_their_operation_on_the_cluster(
    user_wire: tuple[AdminClient, str, WireClient],
) -> None:
    admin, user, wire = user_wire
    topic = make_topic(admin)
    assert _call(wire, "DescribeLogDirs", 4, topics=None).error_code == DENIED
    assert _call(wire, "ListPartitionReassignments", 0, topics=None).error_code == DENIED
    assert _call(wire, "DescribeClientQuotas", 1, components=[], strict=False).error_code == DENIED
    assert _call(wire, "ElectLeaders", 2, election_type=0, topic_partitions=None).error_code == DENIED
    R = wire.request_class("AlterClientQuotas")
    entry = R.EntryData(
        entity=[R.EntityData(entity_type="user", entity_name=user)],
        ops=[R.OpData(key="producer_byte_rate", value=1.0, remove=False)],
    )
    (refused,) = wire.call("AlterClientQuotas", 1, R(entries=[entry], validate_only=False)).entries
    assert refused.error_code == DENIED and refused.entity[0].entity_name == user
    A = wire.request_class("AlterReplicaLogDirs")
    move = A.AlterReplicaLogDir(
        path="/elsewhere", topics=[A.AlterReplicaLogDirTopic(name=topic, partitions=[0])]
    )
    (result,) = wire.call("AlterReplicaLogDirs", 2, A(dirs=[move])).results
    assert (result.topic_name, [p.error_code for p in result.partitions]) == (topic, [DENIED])

    allow(admin, user, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    described = _call(wire, "DescribeLogDirs", 4, topics=None)
    assert described.error_code == 0 and len(described.results) == 1
    assert _call(wire, "ListPartitionReassignments", 0, topics=None).error_code == 0
    assert _call(wire, "DescribeClientQuotas", 1, components=[], strict=False).error_code == DENIED
    allow(admin, user, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS)
    assert _call(wire, "DescribeClientQuotas", 1, components=[], strict=False).error_code == 0


def test_described_topic_partitions_follow_topic_describe(
    user_wire: tuple[AdminClient, str, WireClient],
) -> None:
    admin, user, wire = user_wire
    seen, hidden = make_topic(admin), make_topic(admin)
    allow(admin, user, ResourceType.TOPIC, seen, AclOperation.DESCRIBE)
    R = wire.request_class("DescribeTopicPartitions")
    every = wire.call("DescribeTopicPartitions", 0, R(topics=[], response_partition_limit=2000))
    names = {t.name for t in every.topics}
    assert seen in names and hidden not in names
    asked = [R.TopicRequest(name=seen), R.TopicRequest(name=hidden)]
    answer = wire.call("DescribeTopicPartitions", 0, R(topics=asked, response_partition_limit=2000))
    by_name = {t.name: (t.error_code, len(t.partitions)) for t in answer.topics}
    assert by_name == {seen: (0, 1), hidden: (ErrorCode.TOPIC_AUTHORIZATION_FAILED, 0)}
