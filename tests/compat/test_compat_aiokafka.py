"""aiokafka's own admin client and producer against the admin and error paths: the broker config resource
(KIP-226 synonyms, DescribeConfigs v2), CreateTopics refusals answered once per name with nothing created
(KIP-4 validate_only), CreatePartitions (KIP-195) and a producer record refused for its timestamp (KIP-467's
INVALID_TIMESTAMP) without harming the next send."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidTimestampError

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode

STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5


def _with_admin(bootstrap: str, body: Callable[[AIOKafkaAdminClient], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            return await body(admin)
        finally:
            await admin.close()

    return asyncio.run(asyncio.wait_for(run(), 30))


def _topic_partitions(bootstrap: str, name: str) -> int | None:
    """Metadata with allow_auto_topic_creation=false (aiokafka's describe_topics would create the topic)."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("Metadata")
        request = R(topics=[R.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
        (topic,) = wire.call("Metadata", 12, request).topics
    return len(topic.partitions) if topic.error_code == 0 else None


def test_aiokafka_reads_the_broker_config_resource(bootstrap: str) -> None:
    async def body(admin: AIOKafkaAdminClient) -> Any:
        resource = ConfigResource(ConfigResourceType.BROKER, "1")
        return await admin.describe_configs([resource], include_synonyms=True)

    (response,) = _with_admin(bootstrap, body)
    ((code, _, resource_type, name, entries),) = response.resources
    assert (code, resource_type, name) == (0, 4, "1")
    configs = {e[0]: e for e in entries}
    listeners = configs["advertised.listeners"]
    assert listeners[1] == f"PLAINTEXT://{bootstrap}" and listeners[3] == STATIC_BROKER_CONFIG
    assert listeners[5] == [("advertised.listeners", f"PLAINTEXT://{bootstrap}", STATIC_BROKER_CONFIG)]
    assert configs["num.partitions"][3] in (STATIC_BROKER_CONFIG, DEFAULT_CONFIG)
    assert int(configs["num.partitions"][1]) >= 1
    assert "log.retention.ms" in configs and "log.segment.bytes" in configs


def test_aiokafka_create_topics_refusals_create_nothing(bootstrap: str, topic_name: str) -> None:
    twice, bad, good = f"{topic_name}-twice", f"{topic_name}-bad", f"{topic_name}-good"

    async def body(admin: AIOKafkaAdminClient) -> tuple[Any, Any]:
        first = await admin.create_topics(
            [NewTopic(twice, 1, 1), NewTopic(twice, 2, 1), NewTopic(good, 2, 1)]
        )
        checked = await admin.create_topics(
            [NewTopic(bad, 1, 1, topic_configs={"retention.ms": "soon"}), NewTopic(f"{bad}-ok", 1, 1)],
            validate_only=True,
        )
        return first.topic_errors, checked.topic_errors

    first, checked = _with_admin(bootstrap, body)
    assert sorted((name, code) for name, code, _ in first) == [(good, 0), (twice, ErrorCode.INVALID_REQUEST)]
    assert sorted((name, code) for name, code, _ in checked) == [
        (bad, ErrorCode.INVALID_CONFIG),
        (f"{bad}-ok", 0),
    ]
    assert _topic_partitions(bootstrap, good) == 2
    for absent in (twice, bad, f"{bad}-ok"):
        assert _topic_partitions(bootstrap, absent) is None


def test_aiokafka_create_partitions(bootstrap: str, topic_name: str) -> None:
    async def body(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([NewTopic(topic_name, 1, 1)])
        await admin.create_partitions({topic_name: NewPartitions(4)}, validate_only=True)
        await admin.create_partitions({topic_name: NewPartitions(3)})

    _with_admin(bootstrap, body)
    assert _topic_partitions(bootstrap, topic_name) == 3


def test_aiokafka_producer_record_refused_for_its_timestamp(bootstrap: str, topic_name: str) -> None:
    config = {"message.timestamp.before.max.ms": "3600000"}
    _with_admin(
        bootstrap, lambda admin: admin.create_topics([NewTopic(topic_name, 1, 1, topic_configs=config)])
    )

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        await producer.start()
        try:
            with pytest.raises(InvalidTimestampError):
                await producer.send_and_wait(
                    topic_name, b"stale", timestamp_ms=int(time.time() * 1000) - 7_200_000
                )
            sent = await producer.send_and_wait(topic_name, b"fresh")
            assert sent.offset == 0
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic_name, 0)])
            await consumer.seek_to_beginning()
            batches = await consumer.getmany(timeout_ms=5_000)
            return [m.value for messages in batches.values() for m in messages]
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 30)) == [b"fresh"]
