"""Broker-facing cases from peer suites that found differences from Kafka, redone here with their assertions:
kafka-python's admin integration tests (list_config_resources, describe_configs of the broker, create_partitions
with an explicit assignment), Quix Streams' topic admin test (Kafka's text for an unknown topic config),
confluent-kafka-python's test_incremental_alter_configs (the non-default configs Kafka 4.1 lists), plus
ListOffsets for a partition that does not exist (UNKNOWN_TOPIC_OR_PARTITION, the answer clients fail fast on)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewPartitions
from kafka.admin import NewTopic as KpNewTopic

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode


def test_kafka_python_list_config_resources(kp_admin: KafkaAdminClient, topic_name: str) -> None:
    """kafka-python's test_list_config_resources (KIP-1142, Kafka 4.1): the broker is listed; so are topics,
    and a filter by kind lists that kind only."""
    kp_admin.create_topics([KpNewTopic(topic_name, 1, 1)])
    everything = kp_admin.list_config_resources()
    assert "broker" in everything and everything["broker"] == ["1"]
    assert topic_name in everything["topic"]
    assert kp_admin.list_config_resources(["BROKER_LOGGER"]) == {"broker_logger": ["1"]}


def test_list_config_resources_v0_lists_client_metrics_only(bootstrap: str) -> None:
    """v0 is Kafka's ListClientMetricsResources: sluice keeps no client metrics subscriptions."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("ListConfigResources")
        response = wire.call("ListConfigResources", 0, R())
        assert (response.error_code, response.config_resources) == (0, [])
        unsupported = wire.call("ListConfigResources", 1, R(resource_types=[64]))
        assert unsupported.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_kafka_python_describe_configs_of_the_broker(kp_admin: KafkaAdminClient) -> None:
    """kafka-python's test_describe_configs_broker_resource_returns_configs, its Kafka 4.x branch:
    advertised.listeners is a static (read-only) config of the node it asked."""
    broker_id = kp_admin._client.least_loaded_node()
    configs = kp_admin.describe_configs(
        [KpConfigResource(ConfigResourceType.BROKER, broker_id)], config_filter="all"
    )
    assert len(configs) == 1 and len(configs["broker"]) == 1
    listeners = configs["broker"][str(broker_id)]["advertised.listeners"]
    assert listeners["config_source"] == "STATIC_BROKER_CONFIG"
    assert listeners["config_type"] in ("LIST", "STRING")
    assert listeners["read_only"] is True


def test_kafka_python_create_partitions_with_an_assignment(
    kp_admin: KafkaAdminClient, topic_name: str
) -> None:
    """kafka-python's test_create_partitions names broker 0 (its fixture's node id): on a node with another id
    Kafka refuses the assignment with this text, and naming the node's own id works."""
    kp_admin.create_topics([KpNewTopic(topic_name, 4, 1)])
    refused = kp_admin.create_partitions({topic_name: NewPartitions(6, [[0], [0]])}, raise_errors=False)
    assert [tuple(r)[:3] for r in refused.results] == [
        (
            topic_name,
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes broker 0, but no such broker is registered.",
        )
    ]
    response = kp_admin.create_partitions({topic_name: NewPartitions(6, [[1], [1]])})
    assert [(r[0], r[1]) for r in response.results] == [(topic_name, 0)]
    assert len(kp_admin.describe_topics([topic_name])[0]["partitions"]) == 6


def test_quix_streams_unknown_topic_config_text(ck_admin: AdminClient, topic_name: str) -> None:
    """Quix Streams' topic admin test matches Kafka's text for a topic config Kafka does not know."""
    with pytest.raises(KafkaException) as refused:
        ck_admin.create_topics([NewTopic(topic_name, 1, 1, config={"bad_option": "1"})])[topic_name].result(
            10
        )
    error = refused.value.args[0]
    assert error.code() == ErrorCode.INVALID_CONFIG
    assert error.str() == "Unknown topic config name: bad_option"


def test_list_offsets_of_a_partition_that_does_not_exist(
    bootstrap: str, kp_admin: KafkaAdminClient, topic_name: str
) -> None:
    """ListOffsets for partition 100 of a one-partition topic: UNKNOWN_TOPIC_OR_PARTITION at once."""
    kp_admin.create_topics([KpNewTopic(topic_name, 1, 1)])
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("ListOffsets")
        partitions = [R.ListOffsetsPartition(partition_index=i, timestamp=0) for i in (0, 100)]
        request = R(replica_id=-1, topics=[R.ListOffsetsTopic(name=topic_name, partitions=partitions)])
        (topic,) = wire.call("ListOffsets", 9, request).topics
    codes = {p.partition_index: p.error_code for p in topic.partitions}
    assert codes == {0: 0, 100: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_delegation_tokens_answer_as_a_broker_without_token_auth(bootstrap: str) -> None:
    """Kafka without delegation.token.secret.key: token requests over a PLAINTEXT listener are not allowed
    (KafkaApis.allowTokenRequests), whatever the API."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("CreateDelegationToken")
        created = wire.call("CreateDelegationToken", 3, R(renewers=[], max_lifetime_ms=-1))
        assert created.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        assert created.principal_type == "User" and created.principal_name == "ANONYMOUS"
        described = wire.call(
            "DescribeDelegationToken", 3, wire.request_class("DescribeDelegationToken")(owners=None)
        )
        assert (described.error_code, described.tokens) == (
            ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
            [],
        )
        for api in ("RenewDelegationToken", "ExpireDelegationToken"):
            R = wire.request_class(api)
            period = {"renew_period_ms": 1000} if api.startswith("Renew") else {"expiry_time_period_ms": 1000}
            answer = wire.call(api, 2, R(hmac=b"x", **period))
            assert answer.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def _non_default(admin: AdminClient, topic: str) -> list[str]:
    """confluent-kafka's test helper: the topic's non-default entries as ConfigEntry prints them, sorted."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    return sorted(str(entry) for entry in configs.values() if not entry.is_default)


def test_confluent_incremental_alter_configs(ck_admin: AdminClient, topic_name: str) -> None:
    """confluent-kafka-python's test_incremental_alter_configs: after APPEND/SUBTRACT/SET/DELETE, a describe of
    every config lists exactly Kafka 4.1's non-default entries: KIP-966's cluster-level min.insync.replicas
    among them, and none of sluice's own (the cleaner's status of the now compacted topic is listed only
    when asked for by name)."""
    first, second = f"{topic_name}-1", f"{topic_name}-2"
    for name in (first, second):
        ck_admin.create_topics([NewTopic(name, 2, 1, config={"compression.type": "gzip"})])[name].result(10)

    def alter(topic: str, *entries: tuple[str, str | None, AlterConfigOpType]) -> None:
        configs = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=configs)
        assert ck_admin.incremental_alter_configs([resource])[resource].result(10) is None

    alter(
        first,
        ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
        ("retention.ms", "10000", AlterConfigOpType.SET),
    )
    alter(
        second,
        ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
        ("retention.ms", "5000", AlterConfigOpType.SET),
    )
    assert _non_default(ck_admin, first) == [
        'cleanup.policy="delete,compact"',
        'compression.type="gzip"',
        'min.insync.replicas="1"',
        'retention.ms="10000"',
    ]
    assert _non_default(ck_admin, second) == [
        'cleanup.policy=""',
        'compression.type="gzip"',
        'min.insync.replicas="1"',
        'retention.ms="5000"',
    ]
    alter(
        second,
        ("compression.type", None, AlterConfigOpType.DELETE),
        ("retention.ms", "10000", AlterConfigOpType.SET),
    )
    assert _non_default(ck_admin, second) == [
        'cleanup.policy=""',
        'min.insync.replicas="1"',
        'retention.ms="10000"',
    ]
