"""The official Java AdminClient (3.9 and 4.x) against sluice's compatibility APIs: the broker config resource
(KIP-226 sources and types), DescribeLogDirs (KIP-113), ElectLeaders (KIP-460), ListPartitionReassignments
(KIP-455), DescribeProducers (KIP-664), DescribeMetadataQuorum (KIP-836), DescribeFeatures (KIP-584), client
quotas (KIP-546) and describeTopics through DescribeTopicPartitions (KIP-966)."""

from __future__ import annotations

import pytest
from java_driver import JavaClient, JavaError


def test_broker_config_and_cluster_views(java: JavaClient, java_bootstrap: str, topic_name: str) -> None:
    configs = java.call("describe-broker-config", "1")
    assert configs["advertised.listeners"]["value"] == f"PLAINTEXT://{java_bootstrap}"
    assert configs["num.partitions"]["type"] == "INT"
    assert configs["log.retention.hours"] == {"value": "168", "source": "DEFAULT_CONFIG", "type": "INT"}
    java.call("create-topic", topic_name, 2)
    described = java.call("describe-topics", topic_name)[topic_name]
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    (sizes,) = java.call("describe-log-dirs", 1).values()
    assert sizes[f"{topic_name}-0"] == 0 and f"{topic_name}-1" in sizes
    assert java.call("elect-leaders", topic_name, 0) == "ElectionNotNeededException"
    assert java.call("list-reassignments") == 0
    assert java.call("describe-producers", topic_name, 0) == []
    quorum = java.call("describe-quorum")
    assert quorum["leader"] == 1 and quorum["voters"] == [1] and quorum["high_watermark"] > 0
    assert java.call("describe-features") == 0


def test_client_quotas_through_the_java_admin(java: JavaClient, topic_name: str) -> None:
    client = f"java-{topic_name}"[:60]
    java.call("alter-quota", "client-id", client, "producer_byte_rate", "1048576")
    quotas = java.call("describe-quotas")
    assert quotas[f"{{client-id={client}}}"] == {"producer_byte_rate": 1048576.0}
    with pytest.raises(JavaError) as refused:
        java.call("alter-quota", "client-id", client, "bytes_per_week", "1")
    assert refused.value.error == "InvalidRequestException"
    java.call("alter-quota", "client-id", client, "producer_byte_rate", "-")
    assert f"{{client-id={client}}}" not in java.call("describe-quotas")
