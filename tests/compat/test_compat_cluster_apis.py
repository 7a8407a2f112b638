"""Replica and cluster admin APIs a single node answers truthfully, through kafka-python's KafkaAdminClient
and confluent-kafka's AdminClient: DescribeLogDirs (KIP-113), AlterReplicaLogDirs (KIP-113), ElectLeaders
(KIP-460), Alter/ListPartitionReassignments (KIP-455), DescribeProducers (KIP-664), DescribeQuorum (KIP-595,
KIP-836, KIP-853), UpdateFeatures (KIP-584)."""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka import TopicPartition as KpPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidUpdateVersionError, NoReassignmentInProgressError

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode


def _topic_with_records(ck_admin: AdminClient, bootstrap: str, name: str, records: int) -> None:
    ck_admin.create_topics([NewTopic(name, 2, 1)])[name].result(10)
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    for i in range(records):
        producer.send(name, f"record-{i}".encode(), partition=0).get(10)
    producer.close()


def test_describe_log_dirs_reports_one_dir_with_real_partition_sizes(
    kp_admin: KafkaAdminClient, ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """KIP-113: one log dir, each partition's size in bytes on disk, KIP-827 total/usable bytes."""
    _topic_with_records(ck_admin, bootstrap, topic_name, 20)
    (broker,) = kp_admin.describe_log_dirs()
    (log_dir,) = broker["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"].startswith("/")
    assert log_dir["total_bytes"] > log_dir["usable_bytes"] > 0
    sizes = {
        p["partition_index"]: p["partition_size"]
        for t in log_dir["topics"]
        if t["name"] == topic_name
        for p in t["partitions"]
    }
    assert sizes[1] == 0 and sizes[0] > 20 * len("record-00")


def test_alter_replica_log_dirs_accepts_only_the_one_dir(
    kp_admin: KafkaAdminClient, ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """KIP-113: moving a replica to the dir it is in succeeds; any other path is LOG_DIR_NOT_FOUND."""
    _topic_with_records(ck_admin, bootstrap, topic_name, 1)
    own = kp_admin.describe_log_dirs()[0]["log_dirs"][0]["log_dir"]
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("AlterReplicaLogDirs")
        dirs = [
            R.AlterReplicaLogDir(
                path=own, topics=[R.AlterReplicaLogDirTopic(name=topic_name, partitions=[0])]
            ),
            R.AlterReplicaLogDir(
                path="/elsewhere", topics=[R.AlterReplicaLogDirTopic(name=topic_name, partitions=[1])]
            ),
            R.AlterReplicaLogDir(
                path=own, topics=[R.AlterReplicaLogDirTopic(name="no-such-topic", partitions=[0])]
            ),
        ]
        response = wire.call("AlterReplicaLogDirs", 2, R(dirs=dirs))
    codes = {(r.topic_name, p.partition_index): p.error_code for r in response.results for p in r.partitions}
    assert codes == {
        (topic_name, 0): ErrorCode.NONE,
        (topic_name, 1): ErrorCode.LOG_DIR_NOT_FOUND,
        ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_elect_leaders_answers_election_not_needed(ck_admin: AdminClient, topic_name: str) -> None:
    """KIP-460: the only replica already leads, so librdkafka sees ELECTION_NOT_NEEDED per partition."""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    missing = TopicPartition(topic_name, 7)
    results = ck_admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic_name, 0), missing]).result(
        10
    )
    codes = {(tp.topic, tp.partition): err.code() if err else 0 for tp, err in results.items()}
    assert codes == {
        (topic_name, 0): ErrorCode.ELECTION_NOT_NEEDED,
        (topic_name, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_elect_all_leaders_leaves_out_partitions_needing_no_election(bootstrap: str) -> None:
    """KIP-460: with every partition asked for (null), Kafka lists only partitions that needed an election."""
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("ElectLeaders")
        response = wire.call("ElectLeaders", 2, R(election_type=0, topic_partitions=None))
    assert response.error_code == 0 and response.replica_election_results == []


def test_partition_reassignments_none_in_progress(
    kp_admin: KafkaAdminClient, ck_admin: AdminClient, topic_name: str
) -> None:
    """KIP-455: nothing is ever in progress; reassigning to the current replica completes at once,
    cancelling finds NO_REASSIGNMENT_IN_PROGRESS, other brokers are an INVALID_REPLICA_ASSIGNMENT."""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    assert kp_admin.list_partition_reassignments() == {}
    assert kp_admin.list_partition_reassignments({topic_name: [0]}) == {}
    done = kp_admin.alter_partition_reassignments({KpPartition(topic_name, 0): [1]})
    assert done == {KpPartition(topic_name, 0): None}
    cancelled = kp_admin.alter_partition_reassignments({KpPartition(topic_name, 0): None})
    assert cancelled[KpPartition(topic_name, 0)] is NoReassignmentInProgressError
    elsewhere = kp_admin.alter_partition_reassignments({KpPartition(topic_name, 0): [1, 2]})
    assert elsewhere[KpPartition(topic_name, 0)].errno == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_describe_producers_lists_idempotent_producers(
    kp_admin: KafkaAdminClient, ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """KIP-664: the partition's active idempotent producer with its epoch and last sequence."""
    _topic_with_records(ck_admin, bootstrap, topic_name, 3)
    states = kp_admin.describe_producers([KpPartition(topic_name, 0), KpPartition(topic_name, 1)])
    (producer,) = states[KpPartition(topic_name, 0)].active_producers
    assert producer.producer_id >= 0 and producer.producer_epoch == 0 and producer.last_sequence == 2
    assert states[KpPartition(topic_name, 1)].active_producers == []
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("DescribeProducers")
        response = wire.call(
            "DescribeProducers", 0, R(topics=[R.TopicRequest(name=topic_name, partition_indexes=[9])])
        )
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_quorum_single_voter(kp_admin: KafkaAdminClient, bootstrap: str) -> None:
    """KIP-595/KIP-853: the node is the only voter and the leader of __cluster_metadata."""
    quorum = kp_admin.describe_metadata_quorum()
    (partition,) = quorum["topics"][0]["partitions"]
    assert partition["leader_id"] == 1 and partition["observers"] == []
    assert [v["replica_id"] for v in partition["current_voters"]] == [1]
    assert partition["current_voters"][0]["log_end_offset"] == partition["high_watermark"] > 0
    (node,) = quorum["nodes"]
    assert node["node_id"] == 1 and node["listeners"][0]["port"] == int(bootstrap.rsplit(":", 1)[1])


def test_features_none_finalized_and_updates_refused(kp_admin: KafkaAdminClient) -> None:
    """KIP-584: sluice finalizes no features; UpdateFeatures answers INVALID_UPDATE_VERSION, not
    UNSUPPORTED_VERSION."""
    assert kp_admin.describe_features() == {}
    with pytest.raises(InvalidUpdateVersionError):
        kp_admin.update_features({"metadata.version": 20})
