"""The group coordinator unloads while `__consumer_offsets` cannot be written and loads again once it can
(issue 29), against a real `sluice broker` on a tmpfs that really fills, with confluent-kafka and the wire.

While the disk is full: FindCoordinator answers COORDINATOR_NOT_AVAILABLE and every group call
NOT_COORDINATOR (the answers Kafka gives for a coordinator that lost its partition: clients retry and look it
up again), instead of a closed connection. Once space is freed the next call replays the topic and commits
go through; every acknowledged commit survives, across a kill -9 too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.groups.group_helpers import committed_offsets
from tests.transactions.test_txn_faults import fill_below

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

MIN_FREE = 4 << 20
GROUP = "unload-g"


def commit(bootstrap: str, offset: int) -> KafkaError | None:
    """Commit `offset` of t-0 for GROUP with a fresh consumer; None when the broker acknowledged it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "socket.timeout.ms": 5000,
        }
    )
    try:
        consumer.commit(offsets=[TopicPartition("t", 0, offset)], asynchronous=False)
        return None
    except KafkaException as exc:
        return exc.args[0]
    finally:
        consumer.close()


def committed(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        return consumer.committed([TopicPartition("t", 0)], timeout=20)[0].offset
    finally:
        consumer.close()


def find_coordinator(client: WireClient) -> int:
    cls = client.request_class("FindCoordinator")
    return client.call("FindCoordinator", 1, cls(key=GROUP, key_type=0)).error_code


def wire_commit(client: WireClient, offset: int, group: str = GROUP, topic: str = "t") -> int:
    """OffsetCommit of `offset` for partition 0 of `topic` as a simple (generation -1) commit: its error code."""
    cls = client.request_class("OffsetCommit")
    request = cls(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            cls.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    cls.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_metadata=""
                    )
                ],
            )
        ],
    )
    return client.call("OffsetCommit", 8, request).topics[0].partitions[0].error_code


def test_full_disk_unloads_the_group_coordinator_and_freed_space_loads_it_again(
    mount_tmpfs: Callable[[str], Path],
) -> None:
    disk = mount_tmpfs("24m")
    proc = BrokerProcess(disk / "data", min_free_bytes=MIN_FREE).start()
    try:
        bootstrap = proc.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 1, 1), NewTopic("gone", 1, 1)])["t"].result(30)
        assert commit(bootstrap, 5) is None
        with WireClient.connect(bootstrap) as client:
            assert wire_commit(client, 3, topic="gone") == ErrorCode.NONE

        filler = fill_below(disk, MIN_FREE // 2)
        with WireClient.connect(bootstrap) as client:
            deadline = time.monotonic() + 30
            # The broker measures free space about once a second; librdkafka would wait for the coordinator
            # forever, so the refusals are read on the wire. Answers, not a closed connection.
            while (error := wire_commit(client, 9)) == ErrorCode.NONE:
                assert time.monotonic() < deadline, "commits are still accepted on a full disk"
            assert error == ErrorCode.NOT_COORDINATOR
            assert find_coordinator(client) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert proc.logged("coordinator unloads")
        # DeleteTopics works on a full disk; the offsets' tombstones are written once the topic loads again.
        admin.delete_topics(["gone"])["gone"].result(30)

        filler.unlink()
        deadline = time.monotonic() + 30
        while (error := commit(bootstrap, 7)) is not None:
            assert time.monotonic() < deadline, f"commits still refused once space is back: {error}"
        # Loaded again from the log: the refused commit (9) never landed, the acknowledged ones did.
        assert committed(bootstrap) == 7
        assert committed_offsets(bootstrap, GROUP) == {("t", 0): 7}, "the deleted topic's offset came back"
        with WireClient.connect(bootstrap) as client:
            assert find_coordinator(client) == ErrorCode.NONE
        assert proc.logged("coordinator is loaded")
        proc.kill()
    finally:
        proc.stop()
    proc.restart()
    try:
        assert committed_offsets(proc.bootstrap, GROUP) == {("t", 0): 7}
    finally:
        proc.stop()
