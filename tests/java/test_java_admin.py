"""The official Java AdminClient against sluice: topics, their configs and partitions, records, the cluster."""

from __future__ import annotations

import pytest
from java_driver import JavaClient, JavaError

from sluice.testing import BrokerProcess


def records_file(tmp_path_factory: pytest.TempPathFactory, partition: int, count: int) -> str:
    """A produce file of `count` small records for one partition (format: see SluiceJavaClient.produce)."""
    path = tmp_path_factory.mktemp("records") / "records.txt"
    path.write_text("".join(f"{partition} - - {i:04x} -\n" for i in range(count)))
    return str(path)


def test_topic_lifecycle(java: JavaClient, topic_name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    topic_id = java.call("create-topic", topic_name, 3, "retention.ms=3600000", "cleanup.policy=compact")
    described = java.call("describe-topics", topic_name)[topic_name]
    assert described["id"] == topic_id and topic_id != "AAAAAAAAAAAAAAAAAAAAAA"  # not Uuid.ZERO
    assert not described["internal"]
    assert described["partitions"] == [{"partition": p, "leader": 1, "replicas": [1], "isr": [1]} for p in range(3)]
    assert topic_name in java.call("list-topics")
    with pytest.raises(JavaError) as exists:
        java.call("create-topic", topic_name, 1)
    assert exists.value.error == "TopicExistsException"

    configs = java.call("describe-config", topic_name)
    assert configs["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert configs["cleanup.policy"] == {"value": "compact", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert configs["max.message.bytes"]["source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")

    # SET one and DELETE another: the deleted one falls back to its default.
    java.call("alter-config", topic_name, "retention.ms=7200000", "cleanup.policy=")
    configs = java.call("describe-config", topic_name)
    assert configs["retention.ms"] == {"value": "7200000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["source"] != "DYNAMIC_TOPIC_CONFIG"

    java.call("create-partitions", topic_name, 5)
    assert len(java.call("describe-topics", topic_name)[topic_name]["partitions"]) == 5
    with pytest.raises(JavaError) as fewer:
        java.call("create-partitions", topic_name, 2)
    assert fewer.value.error == "InvalidPartitionsException"

    produced = java.call("produce", topic_name, records_file(tmp_path_factory, 4, 10), "acks=all")
    assert [offset for _, offset, _ in produced] == list(range(10))  # the new partition takes records
    assert java.call("delete-records", topic_name, 4, 6) == 6
    assert java.call("list-offsets", topic_name, 4, "earliest")["offset"] == 6
    assert java.call("list-offsets", topic_name, 4, "latest")["offset"] == 10
    assert [r["offset"] for r in java.call("consume", topic_name, 4, 6, 10)] == [6, 7, 8, 9]

    java.call("delete-topics", topic_name)
    assert topic_name not in java.call("list-topics")
    with pytest.raises(JavaError) as gone:
        java.call("describe-topics", topic_name)
    assert gone.value.error == "UnknownTopicOrPartitionException"


def test_invalid_topic_requests_are_refused(java: JavaClient, topic_name: str) -> None:
    with pytest.raises(JavaError) as bad_name:
        java.call("create-topic", "bad/name", 1)
    assert bad_name.value.error == "InvalidTopicException"
    with pytest.raises(JavaError) as bad_config:
        java.call("create-topic", topic_name, 1, "cleanup.policy=sometimes")
    assert bad_config.value.error in ("InvalidConfigurationException", "InvalidRequestException")
    assert topic_name not in java.call("list-topics")


def test_describe_cluster(java: JavaClient, java_broker: BrokerProcess) -> None:
    cluster = java.call("describe-cluster")
    assert cluster["cluster_id"]
    assert cluster["nodes"] == [{"id": 1, "host": "127.0.0.1", "port": java_broker.port}]
    assert cluster["controller"] == 1
