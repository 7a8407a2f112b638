"""CreateTopics/CreatePartitions validation and DescribeConfigs/AlterConfigs as Kafka 3.9/4.x answers them
(KIP-133 DescribeConfigs, KIP-226 synonyms and sources, KIP-339 IncrementalAlterConfigs, KIP-412 broker
loggers, KIP-195 CreatePartitions), through confluent-kafka, kafka-python and sluice's wire client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess


def _refused(admin: AdminClient, topic: NewTopic, validate_only: bool = False) -> int:
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([topic], validate_only=validate_only)[topic.topic].result(10)
    return refused.value.args[0].code()


def _exists(bootstrap: str, name: str) -> bool:
    """Metadata with allow_auto_topic_creation=false: it must never create what it asks about."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("Metadata")
        response = wire.call(
            "Metadata", 12, R(topics=[R.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
        )
    return response.topics[0].error_code == 0


def _describe(bootstrap: str, resource_type: int, name: str) -> dict:
    """DescribeConfigs v4 with synonyms and documentation: {name: entry}."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("DescribeConfigs")
        resource = R.DescribeConfigsResource(
            resource_type=resource_type, resource_name=name, configuration_keys=None
        )
        response = wire.call(
            "DescribeConfigs", 4, R(resources=[resource], include_synonyms=True, include_documentation=True)
        )
    (result,) = response.results
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


@pytest.mark.parametrize(
    ("partitions", "replicas", "configs", "code"),
    [
        (0, 1, {}, ErrorCode.INVALID_PARTITIONS),
        (1, 3, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
        (1, 0, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
        (1, 1, {"no.such.config": "1"}, ErrorCode.INVALID_CONFIG),
        (1, 1, {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG),
        (1, 1, {"cleanup.policy": "shred"}, ErrorCode.INVALID_CONFIG),
        (1, 1, {"min.cleanable.dirty.ratio": "1.5"}, ErrorCode.INVALID_CONFIG),
        (1, 1, {"preallocate": "maybe"}, ErrorCode.INVALID_CONFIG),
        (1, 1, {"compression.type": "brotli"}, ErrorCode.INVALID_CONFIG),
    ],
)
def test_create_topics_refusals_never_create(
    ck_admin: AdminClient,
    bootstrap: str,
    topic_name: str,
    partitions: int,
    replicas: int,
    configs: dict,
    code: int,
) -> None:
    """Each refusal carries Kafka's error code, and the refused topic never shows up in Metadata."""
    assert _refused(ck_admin, NewTopic(topic_name, partitions, replicas, config=configs)) == code
    assert not _exists(bootstrap, topic_name)


def test_create_topics_validate_only_and_bad_assignment(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """validate_only answers as the real creation would, creating nothing; an assignment naming another broker
    is INVALID_REPLICA_ASSIGNMENT."""
    ck_admin.create_topics([NewTopic(topic_name, 3, 1)], validate_only=True)[topic_name].result(10)
    assert not _exists(bootstrap, topic_name)
    assert _refused(ck_admin, NewTopic(topic_name, 1, 1, config={"bad.name": "x"}), validate_only=True) == (
        ErrorCode.INVALID_CONFIG
    )
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("CreateTopics")
        topic = R.CreatableTopic(
            name=topic_name,
            num_partitions=-1,
            replication_factor=-1,
            assignments=[R.CreatableReplicaAssignment(partition_index=0, broker_ids=[2])],
        )
        response = wire.call("CreateTopics", 7, R(topics=[topic], timeout_ms=10_000))
        assert response.topics[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        topic = R.CreatableTopic(name=topic_name, num_partitions=-5, replication_factor=1)
        response = wire.call("CreateTopics", 7, R(topics=[topic], timeout_ms=10_000))
        assert response.topics[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert not _exists(bootstrap, topic_name)
    assert _refused(ck_admin, NewTopic("bad/name", 1, 1)) == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_create_partitions_validation(ck_admin: AdminClient, bootstrap: str, topic_name: str) -> None:
    """KIP-195: shrinking or keeping the count is INVALID_PARTITIONS, an unknown topic is
    UNKNOWN_TOPIC_OR_PARTITION, validate_only adds nothing."""
    ck_admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(10)
    for count, code in [(2, ErrorCode.INVALID_PARTITIONS), (1, ErrorCode.INVALID_PARTITIONS)]:
        with pytest.raises(KafkaException) as refused:
            ck_admin.create_partitions([NewPartitions(topic_name, count)])[topic_name].result(10)
        assert refused.value.args[0].code() == code
    with pytest.raises(KafkaException) as unknown:
        ck_admin.create_partitions([NewPartitions(topic_name + "-x", 4)])[topic_name + "-x"].result(10)
    assert unknown.value.args[0].code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ck_admin.create_partitions([NewPartitions(topic_name, 5)], validate_only=True)[topic_name].result(10)
    meta = ck_admin.list_topics(topic_name, timeout=10).topics[topic_name]
    assert len(meta.partitions) == 2


def test_metadata_without_auto_create_never_creates(bootstrap: str, topic_name: str) -> None:
    """allow_auto_topic_creation=false (KIP-204) answers UNKNOWN_TOPIC_OR_PARTITION and creates nothing,
    even though the broker's auto.create.topics.enable is on."""
    assert not _exists(bootstrap, topic_name)
    assert not _exists(bootstrap, topic_name)


def test_topic_configs_carry_types_sources_synonyms_and_docs(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """KIP-226: each topic config has its type (DescribeConfigs v3+), source and synonyms (the topic override,
    then the broker default) and documentation, as Kafka's LogConfig defines them."""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "3600000"})])[
        topic_name
    ].result(10)
    configs = _describe(bootstrap, 2, topic_name)
    retention = configs["retention.ms"]
    assert retention.value == "3600000" and retention.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value),
    ]
    assert not retention.read_only and not retention.is_sensitive
    segment = configs["segment.bytes"]
    assert segment.value == "1073741824" and segment.config_source == ConfigSource.DEFAULT_CONFIG.value
    assert [s.name for s in segment.synonyms] == ["log.segment.bytes"]
    BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
    types = {name: c.config_type for name, c in configs.items()}
    assert types["retention.ms"] == LONG and types["segment.bytes"] == INT
    assert types["cleanup.policy"] == LIST and types["preallocate"] == BOOLEAN
    assert types["compression.type"] == STRING and types["min.cleanable.dirty.ratio"] == DOUBLE
    assert all(c.documentation for c in configs.values())
    # librdkafka reads the same answer.
    resource = ConfigResource("topic", topic_name)
    seen = ck_admin.describe_configs([resource])[resource].result(10)
    assert (
        seen["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        and seen["segment.bytes"].is_default
    )


def test_broker_resource_describes_real_settings(kp_admin: KafkaAdminClient, bootstrap: str) -> None:
    """DescribeConfigs of the broker resource (type 4): the broker's real values, read-only unless Kafka can
    change them dynamically, as kafka-python's KafkaAdminClient and the wire see them."""
    configs = _describe(bootstrap, 4, "1")
    assert configs["advertised.listeners"].value == f"PLAINTEXT://{bootstrap}"
    assert configs["num.partitions"].value == "1" and configs["num.partitions"].config_type == 3
    assert configs["log.retention.hours"].value == "168"
    assert configs["log.retention.ms"].value is None
    assert configs["log.segment.bytes"].value == "1073741824"
    assert configs["message.max.bytes"].value == "1048588"
    assert configs["num.partitions"].read_only and configs["log.retention.hours"].read_only
    assert not configs["log.retention.ms"].read_only and not configs["max.connections"].read_only
    described = kp_admin.describe_configs(
        [KpConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
    )
    assert f"PLAINTEXT://{bootstrap}" in repr(described)


def test_broker_configs_cannot_change_dynamically_but_loggers_can(
    ck_admin: AdminClient, bootstrap: str
) -> None:
    """AlterConfigs on the broker: a config Kafka cannot update dynamically is refused with INVALID_REQUEST (a
    dynamic one is accepted: validate_only here, tests/compat/test_dynamic_broker_configs.py changes them);
    KIP-412 logger levels change and read back."""
    static = ConfigResource(
        "broker",
        "1",
        incremental_configs=[ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as refused:
        ck_admin.incremental_alter_configs([static])[static].result(10)
    assert refused.value.args[0].code() == ErrorCode.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(num.partitions)" in refused.value.args[0].str()
    dynamic = ConfigResource(
        "broker",
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    ck_admin.incremental_alter_configs([dynamic], validate_only=True)[dynamic].result(10)
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("IncrementalAlterConfigs")

        def set_level(level: str) -> int:
            config = R.AlterableConfig(name="sluice.compat", config_operation=0, value=level)
            resource = R.AlterConfigsResource(resource_type=8, resource_name="1", configs=[config])
            return wire.call("IncrementalAlterConfigs", 1, R(resources=[resource])).responses[0].error_code

        assert set_level("DEBUG") == 0
        assert _describe(bootstrap, 8, "1")["sluice.compat"].value == "DEBUG"
        assert set_level("LOUD") == ErrorCode.INVALID_CONFIG


def test_alter_configs_refuses_unknown_names(ck_admin: AdminClient, topic_name: str) -> None:
    """Kafka's LogConfig.validateNames: an unknown topic config name is INVALID_CONFIG."""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    change = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[ConfigEntry("retention.msec", "1", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as refused:
        ck_admin.incremental_alter_configs([change])[change].result(10)
    assert refused.value.args[0].code() == ErrorCode.INVALID_CONFIG


def test_subtracting_the_last_cleanup_policy_leaves_an_empty_list(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """confluent-kafka-python's test_incremental_alter_configs: SUBTRACT "delete" from cleanup.policy=delete
    leaves "", which Kafka accepts (no retention, no compaction); the topic still takes keyless records."""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    change = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)
        ],
    )
    ck_admin.incremental_alter_configs([change])[change].result(10)
    wanted = ConfigResource("topic", topic_name)
    configs = ck_admin.describe_configs([wanted])[wanted].result(10)
    assert configs["cleanup.policy"].value == ""
    assert configs["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic_name, b"no key", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(10) == 0
    assert delivered == [None]


def test_alter_requests_of_the_wrong_shape_change_nothing(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """Kafka's ConfigAdminManager.preprocess (KIP-339 IncrementalAlterConfigs and the legacy AlterConfigs): a
    resource named twice refuses both, a key named twice or a null value outside DELETE refuses the resource,
    all with INVALID_REQUEST, and the topic's configs stay as they were."""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1, config={"retention.ms": "1000"})])[topic_name].result(
        10
    )
    with WireClient.connect(bootstrap) as wire:
        IAC = wire.request_class("IncrementalAlterConfigs")

        def resource(*configs: tuple[str, int, str | None]) -> Any:
            return IAC.AlterConfigsResource(
                resource_type=2,
                resource_name=topic_name,
                configs=[IAC.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in configs],
            )

        for resources, expected in [
            ([resource(("retention.ms", 0, "2000")), resource(("retention.ms", 0, "3000"))], 2),
            ([resource(("retention.ms", 0, "2000"), ("retention.ms", 1, None))], 1),
            ([resource(("retention.ms", 0, None))], 1),
        ]:
            response = wire.call("IncrementalAlterConfigs", 1, IAC(resources=resources, validate_only=False))
            codes = [(r.error_code, bool(r.error_message)) for r in response.responses]
            assert codes == [(ErrorCode.INVALID_REQUEST, True)] * expected
        AC = wire.request_class("AlterConfigs")
        legacy = AC.AlterConfigsResource(
            resource_type=2,
            resource_name=topic_name,
            configs=[AC.AlterableConfig(name="retention.ms", value=None)],
        )
        (refused,) = wire.call("AlterConfigs", 2, AC(resources=[legacy], validate_only=False)).responses
        assert refused.error_code == ErrorCode.INVALID_REQUEST and "Null value" in refused.error_message
        deleted = resource(("retention.ms", 1, None))
        (ok,) = wire.call(
            "IncrementalAlterConfigs", 1, IAC(resources=[deleted], validate_only=True)
        ).responses
        assert ok.error_code == 0
    assert _describe(bootstrap, 2, topic_name)["retention.ms"].value == "1000"


def test_altered_configs_survive_a_clean_restart_and_a_kill(data_dir: Path) -> None:
    """An acknowledged IncrementalAlterConfigs (KIP-339) is durable: after a clean stop and after a kill -9 the
    topic describes the value with its DYNAMIC_TOPIC_CONFIG source; a deleted override is back to the default."""
    broker = BrokerProcess(data_dir).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("kept", 1, 1, config={"segment.ms": "600000"})])["kept"].result(10)
        resource = ConfigResource("topic", "kept")
        resource.add_incremental_config(
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        )
        admin.incremental_alter_configs([resource])[resource].result(10)
        broker.stop()
        broker.start()
        configs = _describe(broker.bootstrap, 2, "kept")
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("7200000", 1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource("topic", "kept")
        resource.add_incremental_config(
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        )
        admin.incremental_alter_configs([resource])[resource].result(10)
        broker.kill()
        broker.start()
        configs = _describe(broker.bootstrap, 2, "kept")
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("7200000", 1)
        assert configs["segment.ms"].config_source == 5 and configs["segment.ms"].value == "604800000"
    finally:
        broker.stop()
