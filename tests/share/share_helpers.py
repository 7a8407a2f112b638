"""Share-group test helpers: group configs, producing, draining a confluent-kafka ShareConsumer, and a share
member on the bare wire protocol for exact control over sessions and acknowledgements."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, ShareConsumer, TopicCollection
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode


def share_config(directory: Path, **settings: object) -> Path:
    """A broker config file whose record locks may be as short as a second, plus `settings`."""
    path = directory / "broker.yaml"
    # A group's first assignment comes one assignment interval after its first member joins: a fifth of
    # Kafka's second here, since nearly every test starts a group (tests/coordinator checks the interval).
    lines = {"group_share_min_record_lock_duration_ms": 1000, "group_initial_rebalance_delay_ms": 0,
             "group_share_assignment_interval_ms": 200, **settings}
    path.write_text("".join(f"{name}: {value}\n" for name, value in lines.items()))
    return path


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """IncrementalAlterConfigs on the GROUP resource (names with dots: pass share_auto_offset_reset=...)."""
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, count: int, *, partition: int | None = None, linger_ms: int = 5,
            prefix: str = "v", per_batch: int | None = None) -> list[bytes]:
    """`count` records; `per_batch` makes record batches of that many (a flush after each)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms})
    values = [f"{prefix}{i}".encode() for i in range(count)]
    for index, value in enumerate(values):
        if partition is None:
            producer.produce(topic, value=value)
        else:
            producer.produce(topic, value=value, partition=partition)
        if per_batch is not None and (index + 1) % per_batch == 0:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    return values


def share_consumer(bootstrap: str, group: str, *, explicit: bool = False, **extra: Any) -> ShareConsumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "fetch.wait.max.ms": 100, **extra}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(config)


def drain(consumer: ShareConsumer, want: int, timeout: float = 30.0,
          on_message: Callable[[Any], None] | None = None) -> list[Any]:
    """Poll until `want` records came (or the time is up): the records, errors failing the test."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for message in consumer.poll(0.5):
            assert message.error() is None, message.error()
            got.append(message)
            if on_message is not None:
                on_message(message)
    return got


def quiet_for(consumer: ShareConsumer, seconds: float) -> list[Any]:
    """Everything a consumer still receives within `seconds` (nothing, when a test expects silence)."""
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += list(consumer.poll(0.2))
    return got


class WireShareMember:
    """One share-group member speaking ShareGroupHeartbeat/ShareFetch/ShareAcknowledge itself."""

    def __init__(self, bootstrap: str, group: str, member_id: str | None = None) -> None:
        self.client = WireClient.connect(bootstrap, client_id="wire-share")
        self.group = group
        self.member_id = member_id or str(uuid.uuid4())[:22]
        self.epoch = 0  # member epoch
        self.session_epoch = 0

    def close(self) -> None:
        self.client.close()

    def heartbeat(self, topics: list[str] | None, epoch: int | None = None) -> Any:
        cls = self.client.request_class("ShareGroupHeartbeat")
        response = self.client.call("ShareGroupHeartbeat", 1, cls(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch if epoch is None else epoch,
            subscribed_topic_names=topics))
        if response.error_code == ErrorCode.NONE:
            self.epoch = response.member_epoch
        return response

    def join(self, topics: list[str]) -> Any:
        return self.heartbeat(topics, epoch=0)

    def fetch(self, partitions: list[tuple[uuid.UUID, int]], *, acks: dict[tuple[uuid.UUID, int], list[Any]]
              | None = None, max_records: int = 500, max_wait_ms: int = 200, epoch: int | None = None,
              version: int = 1, forgotten: list[tuple[uuid.UUID, int]] = (), **fields: Any) -> Any:
        cls = self.client.request_class("ShareFetch")
        acks = acks or {}
        topics: dict[uuid.UUID, list[Any]] = {}
        for topic_id, index in list(dict.fromkeys([*partitions, *acks])):
            topics.setdefault(topic_id, []).append(cls.FetchPartition(
                partition_index=index, acknowledgement_batches=[
                    cls.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=types)
                    for f, last, types in acks.get((topic_id, index), [])]))
        forgotten_by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_id, index in forgotten:
            forgotten_by_topic.setdefault(topic_id, []).append(index)
        request = cls(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.session_epoch if epoch is None else epoch, max_wait_ms=max_wait_ms,
            min_bytes=1, max_bytes=fields.pop("max_bytes", 1 << 20), max_records=max_records,
            batch_size=max_records,
            topics=[cls.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[cls.ForgottenTopic(topic_id=t, partitions=ps)
                                   for t, ps in forgotten_by_topic.items()],
            **fields)
        response = self.client.call("ShareFetch", version, request)
        if response.error_code == ErrorCode.NONE and epoch is None:
            self.session_epoch = self.session_epoch + 1 if self.session_epoch >= 0 else 0
        return response

    def acknowledge(self, acks: dict[tuple[uuid.UUID, int], list[Any]], *, epoch: int | None = None,
                    version: int = 1, **fields: Any) -> Any:
        cls = self.client.request_class("ShareAcknowledge")
        topics: dict[uuid.UUID, list[Any]] = {}
        for (topic_id, index), batches in acks.items():
            topics.setdefault(topic_id, []).append(cls.AcknowledgePartition(
                partition_index=index, acknowledgement_batches=[
                    cls.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=types)
                    for f, last, types in batches]))
        request = cls(group_id=self.group, member_id=self.member_id,
                      share_session_epoch=self.session_epoch if epoch is None else epoch,
                      topics=[cls.AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
                      **fields)
        response = self.client.call("ShareAcknowledge", version, request)
        if response.error_code == ErrorCode.NONE and epoch is None:
            self.session_epoch += 1
        return response


def acquired(response: Any) -> dict[tuple[uuid.UUID, int], list[tuple[int, int, int]]]:
    """(first, last, delivery count) ranges per partition of a ShareFetch answer."""
    return {
        (t.topic_id, p.partition_index): [(r.first_offset, r.last_offset, r.delivery_count)
                                          for r in p.acquired_records]
        for t in response.responses
        for p in t.partitions
        if p.acquired_records
    }


def partition_errors(response: Any) -> dict[tuple[uuid.UUID, int], tuple[int, int]]:
    """(error code, acknowledge error code) per partition of a ShareFetch answer."""
    return {
        (t.topic_id, p.partition_index): (p.error_code, getattr(p, "acknowledge_error_code", p.error_code))
        for t in response.responses
        for p in t.partitions
    }


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    high, low = found.get_most_significant_bits(), found.get_least_significant_bits()
    return uuid.UUID(int=((high & (2**64 - 1)) << 64) | (low & (2**64 - 1)))


def start_offset(bootstrap: str, group: str, topic: str, partition: int = 0) -> int:
    """The share-partition's start offset as DescribeShareGroupOffsets reports it (-1: not started yet)."""
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("DescribeShareGroupOffsets")
        response = client.call("DescribeShareGroupOffsets", 1, cls(groups=[cls.DescribeShareGroupOffsetsRequestGroup(
            group_id=group, topics=[cls.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[partition])])]))
    return response.groups[0].topics[0].partitions[0].start_offset
