"""Shared by the group tests: topics, producing, committed offsets, and waiting for conditions."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.messages import struct_codecs

T = TypeVar("T")

# No initial rebalance delay and short session timeouts allowed, so joins, evictions and rebalances take
# fractions of a second instead of the production defaults.
FAST_GROUP_SETTINGS = """\
group_initial_rebalance_delay_ms: 0
group_min_session_timeout_ms: 1000
consumer_group_session_timeout_ms: 4000
consumer_group_heartbeat_interval_ms: 300
"""
# What the lines above set for KIP-848 groups (the broker decides these, not the client).
CONSUMER_GROUP_SESSION_MS = 4000


def fast_config(directory: Path) -> Path:
    """A broker config file with FAST_GROUP_SETTINGS, written into `directory`."""
    path = directory / "broker.yaml"
    path.write_text(FAST_GROUP_SETTINGS)
    return path


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, *,
            timestamp_of: Callable[[int, int], int] | None = None, start: int = 0) -> None:
    """`per_partition` messages to each partition; the value names its partition and sequence number."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for seq in range(start, start + per_partition):
        for partition in range(partitions):
            extra = {} if timestamp_of is None else {"timestamp": timestamp_of(partition, seq)}
            producer.produce(topic, value=f"{partition}:{seq}".encode(), partition=partition, **extra)
    assert producer.flush(30) == 0


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def group_state(bootstrap: str, group: str) -> tuple[str, int]:
    """(state name, member count) as DescribeGroups reports them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(30)
    return description.state.name, len(description.members)


def wait_for(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll until `condition()` is truthy and return it; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ----- a group member on the bare wire protocol, for exact control over what it sends -----

JOIN_VERSION = 5  # v4+ requires the two-step join with MEMBER_ID_REQUIRED; v5 adds group.instance.id


# Consumer-protocol payloads travel with an int16 version in front, which the struct codecs leave out.
SUBSCRIPTION_VERSION = 3  # as librdkafka sends it


def subscription(topics: list[str]) -> bytes:
    codecs = struct_codecs("ConsumerProtocolSubscription")
    body = codecs[SUBSCRIPTION_VERSION].encode(
        codecs.cls(topics=topics, user_data=None, owned_partitions=[], generation_id=-1))
    return struct.pack(">h", SUBSCRIPTION_VERSION) + body


def assignment(partitions: dict[str, list[int]]) -> bytes:
    codecs = struct_codecs("ConsumerProtocolAssignment")
    topic_cls = codecs.cls.TopicPartition
    body = codecs[0].encode(codecs.cls(assigned_partitions=[
        topic_cls(topic=topic, partitions=parts) for topic, parts in partitions.items()]))
    return struct.pack(">h", 0) + body


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    codecs = struct_codecs("ConsumerProtocolAssignment")
    (version,) = struct.unpack_from(">h", data)
    decoded, _ = codecs[min(version, 3)].decode(data, 2)
    return {t.topic: list(t.partitions) for t in decoded.assigned_partitions}


class RawMember:
    """One member on its own connection; every call returns the decoded response."""

    def __init__(self, bootstrap: str, group: str, *, client_id: str = "raw-member") -> None:
        self.client = WireClient.connect(bootstrap, client_id=client_id, timeout=60)
        self.group = group
        self.member_id = ""
        self.generation = -1

    def close(self) -> None:
        self.client.close()

    def join(self, topics: list[str], *, version: int = JOIN_VERSION, session_timeout_ms: int = 6000,
             protocol_type: str = "consumer", protocol: str = "range", instance_id: str | None = None) -> Any:
        cls = self.client.request_class("JoinGroup")
        request = cls(group_id=self.group, session_timeout_ms=session_timeout_ms,
                      rebalance_timeout_ms=session_timeout_ms, member_id=self.member_id,
                      group_instance_id=instance_id, protocol_type=protocol_type,
                      protocols=[cls.JoinGroupRequestProtocol(name=protocol, metadata=subscription(topics))])
        response = self.client.call("JoinGroup", version, request)
        if response.member_id:
            self.member_id = response.member_id
        if response.error_code == 0:
            self.generation = response.generation_id
        return response

    def join_fully(self, topics: list[str], **kwargs: Any) -> Any:
        """Join, answering MEMBER_ID_REQUIRED with the id the broker handed out."""
        response = self.join(topics, **kwargs)
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            response = self.join(topics, **kwargs)
        assert response.error_code == 0, ErrorCode(response.error_code).name
        return response

    def sync(self, assignments: dict[str, bytes] | None = None, *, generation: int | None = None) -> Any:
        cls = self.client.request_class("SyncGroup")
        request = cls(group_id=self.group, member_id=self.member_id,
                      generation_id=self.generation if generation is None else generation,
                      assignments=[cls.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                   for m, a in (assignments or {}).items()])
        return self.client.call("SyncGroup", 3, request)

    def heartbeat(self, *, generation: int | None = None, member_id: str | None = None) -> int:
        cls = self.client.request_class("Heartbeat")
        request = cls(group_id=self.group, member_id=self.member_id if member_id is None else member_id,
                      generation_id=self.generation if generation is None else generation)
        return self.client.call("Heartbeat", 4, request).error_code

    def leave(self) -> int:
        cls = self.client.request_class("LeaveGroup")
        request = cls(group_id=self.group, members=[cls.MemberIdentity(member_id=self.member_id)])
        response = self.client.call("LeaveGroup", 4, request)
        return response.error_code or response.members[0].error_code

    def commit(self, topic: str, partition: int, offset: int, *, generation: int | None = None) -> int:
        cls = self.client.request_class("OffsetCommit")
        request = cls(group_id=self.group, member_id=self.member_id,
                      generation_id_or_member_epoch=self.generation if generation is None else generation,
                      topics=[cls.OffsetCommitRequestTopic(name=topic, partitions=[
                          cls.OffsetCommitRequestPartition(
                              partition_index=partition, committed_offset=offset, committed_metadata="")])])
        return self.client.call("OffsetCommit", 8, request).topics[0].partitions[0].error_code


def delete_groups(bootstrap: str, *group_ids: str) -> dict[str, int]:
    with WireClient.connect(bootstrap) as client:
        request = client.request_class("DeleteGroups")(groups_names=list(group_ids))
        return {r.group_id: r.error_code for r in client.call("DeleteGroups", 2, request).results}
