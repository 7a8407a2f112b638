"""min.insync.replicas as Kafka 4.1 applies it on a one-node cluster. Since Kafka 3.7 (KAFKA-15583) a partition's
leader uses min(min.insync.replicas, its replica count) for the acks=all check (Partition.effectiveMinIsr), so a
one-replica partition, whose one replica is its in-sync leader, takes acks=all writes whatever the topic, the
cluster default or the config file says. sluice keeps and reports the value and takes the writes likewise; a
broker that refused them with NOT_ENOUGH_REPLICAS (Kafka before 3.7) fails these tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka import KafkaProducer

from sluice.client.wire import WireClient
from sluice.testing import BrokerProcess

MIR = "min.insync.replicas"
TOPIC_SOURCE = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
CLUSTER_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def _produce(bootstrap: str, topic: str, values: list[bytes], **settings: Any) -> list[int]:
    """Each value's offset as its delivery report gives it; an error fails the test with its code and text."""
    offsets: list[int] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        (errors if err is not None else offsets).append(err if err is not None else msg.offset())

    # A refusal is retriable (NOT_ENOUGH_REPLICAS): reported once message.timeout.ms runs out, within the flush.
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000, **settings})
    for value in values:
        producer.produce(topic, value, on_delivery=report)
    left = producer.flush(40)
    assert errors == [] and left == 0
    return offsets


def _read_all(bootstrap: str, topic: str, expect: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the committed records of partition 0, from offset 0, once `expect` are in."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "isolation.level": "read_committed"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, bytes]] = []
    try:
        for _ in range(60):
            for msg in consumer.consume(expect, timeout=1):
                assert msg.error() is None, msg.error()
                seen.append((msg.offset(), msg.value()))
            if len(seen) >= expect:
                break
    finally:
        consumer.close()
    return seen


def _topic_setting(admin: AdminClient, topic: str) -> tuple[str, int]:
    resource = ConfigResource("topic", topic)
    entry = admin.describe_configs([resource])[resource].result(10)[MIR]
    return entry.value, entry.source


def _set_for_topic(admin: AdminClient, topic: str, value: str) -> None:
    resource = ConfigResource("topic", topic)
    resource.add_incremental_config(ConfigEntry(MIR, value, incremental_operation=AlterConfigOpType.SET))
    admin.incremental_alter_configs([resource])[resource].result(10)


def _set_cluster_default(bootstrap: str, value: str) -> None:
    """IncrementalAlterConfigs on the BROKER resource named "" (confluent-kafka refuses an empty name)."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("IncrementalAlterConfigs")
        config = R.AlterableConfig(name=MIR, config_operation=0, value=value)
        resource = R.AlterConfigsResource(resource_type=4, resource_name="", configs=[config])
        (result,) = wire.call("IncrementalAlterConfigs", 1, R(resources=[resource])).responses
    assert (result.error_code, result.error_message) == (0, None)


def test_a_topic_value_above_the_replica_count_refuses_no_acks_all_write(
    bootstrap: str, topic_name: str
) -> None:
    """min.insync.replicas=2 on a one-replica topic: acks=all from confluent-kafka (idempotent), kafka-python
    and a transactional producer are all written, as are acks=1 and acks=0; the value stays the topic's."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={MIR: "2"})])[topic_name].result(10)
    assert _topic_setting(admin, topic_name) == ("2", TOPIC_SOURCE)

    assert _produce(bootstrap, topic_name, [b"idempotent"], acks="all", **{"enable.idempotence": True}) == [0]
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        assert kp.send(topic_name, b"kafka-python", partition=0).get(timeout=30).offset == 1
    finally:
        kp.close(timeout=10)
    assert _produce(bootstrap, topic_name, [b"leader-only"], acks=1) == [2]
    transactional = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic_name}-txn", "acks": "all"}
    )
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic_name, b"in-a-transaction", partition=0)
    transactional.commit_transaction(
        30
    )  # raises with the broker's error if a write or the marker was refused
    _produce(bootstrap, topic_name, [b"fire-and-forget"], acks=0)

    # The transaction's commit marker takes offset 4.
    assert _read_all(bootstrap, topic_name, 5) == [
        (0, b"idempotent"),
        (1, b"kafka-python"),
        (2, b"leader-only"),
        (3, b"in-a-transaction"),
        (5, b"fire-and-forget"),
    ]
    assert _topic_setting(admin, topic_name) == ("2", TOPIC_SOURCE)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own, whose config file sets min.insync.replicas=2: the cluster default set here must
    not reach other tests' topics."""
    config = tmp_path / "broker.yaml"
    config.write_text(f'topic_defaults:\n  {MIR}: "2"\n')
    proc = BrokerProcess(tmp_path / "data", config=config).start()
    yield proc
    proc.stop()


def test_the_cluster_default_survives_a_restart_and_refuses_no_acks_all_write(
    node: BrokerProcess, topic_name: str
) -> None:
    """The config file's value is the KIP-966 cluster default's first value; topics without their own value
    follow that default ("" BROKER resource) when it is raised to 3, also after a restart, and acks=all
    writes go through all along."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    assert _topic_setting(admin, topic_name) == ("2", CLUSTER_DEFAULT)
    assert _produce(node.bootstrap, topic_name, [b"file value"], acks="all") == [0]
    _set_cluster_default(node.bootstrap, "3")
    assert _topic_setting(admin, topic_name) == ("3", CLUSTER_DEFAULT)
    assert _produce(node.bootstrap, topic_name, [b"before"], acks="all") == [1]

    node.stop()
    node.restart()
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    assert _topic_setting(admin, topic_name) == ("3", CLUSTER_DEFAULT)
    assert _produce(node.bootstrap, topic_name, [b"after"], acks="all", **{"enable.idempotence": True}) == [2]
    # The topic's own value wins over the cluster default, and a lower one is taken as well.
    _set_for_topic(admin, topic_name, "1")
    assert _topic_setting(admin, topic_name) == ("1", TOPIC_SOURCE)
    assert _produce(node.bootstrap, topic_name, [b"own value"], acks="all") == [3]
    assert _read_all(node.bootstrap, topic_name, 4) == [
        (0, b"file value"),
        (1, b"before"),
        (2, b"after"),
        (3, b"own value"),
    ]
