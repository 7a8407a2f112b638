"""The authorizer's rule table: per API, which operation on which resource it needs (Kafka's KafkaApis rules)
and how a denial is answered, plus the special cases that filter or rewrite a response (Metadata, ListGroups,
FindCoordinator, OffsetFetch, the ACL and SCRAM administration APIs). Data only: `broker.authz` applies it; the special cases are in `broker.authz_special`.

A whole-request check (`Whole`: group, transactional id, cluster) answers the request with its error code and
never runs the handler; a per-item check (`Items`: topics, groups, config resources) takes the denied items out
of the request and puts them back into the response with the resource's *_AUTHORIZATION_FAILED code. An API
with no rule needs Alter on the cluster (`DEFAULT_RULE`).
"""

from __future__ import annotations

from typing import Any

from sluice.broker import authz_special as special
from sluice.broker.authz_model import (
    CLUSTER,
    GROUP,
    TOPIC,
    TXN,
    Items,
    Rule,
    Whole,
)
from sluice.security.acl import Operation, ResourceType

# Delegation token APIs: Kafka answers them before any ACL check when token authentication is off.
NO_CHECK = frozenset(
    {
        "ApiVersions",
        "SaslHandshake",
        "SaslAuthenticate",
        "DescribeCluster",
        "CreateDelegationToken",
        "RenewDelegationToken",
        "ExpireDelegationToken",
        "DescribeDelegationToken",
    }
)


def _topics(
    op: Operation,
    req_list: str,
    resp_list: str,
    resp_item: str,
    *,
    name: str = "name",
    resp_name: str = "name",
    parts: tuple[str, str | None, str, str, str] | None = None,
    resource: ResourceType = TOPIC,
    **extra: Any,
) -> Items:
    """Shorthand for the common two-level topic/partition mirror."""
    if parts is None:
        return Items(resource, op, req_list, name, resp_list, resp_item, resp_name, **extra)
    req_parts, req_index, resp_parts, resp_part, resp_index = parts
    return Items(
        resource,
        op,
        req_list,
        name,
        resp_list,
        resp_item,
        resp_name,
        req_parts,
        req_index,
        resp_parts,
        resp_part,
        resp_index,
        **extra,
    )


PARTITIONS = ("partitions", "partition_index", "partitions")
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE

RULES: dict[str, Rule] = {
    "Produce": Rule(
        (
            Whole(TXN, W, "transactional_id", when_set=True),
            _topics(
                W,
                "topic_data",
                "responses",
                "TopicProduceResponse",
                parts=("partition_data", "index", "partition_responses", "PartitionProduceResponse", "index"),
            ),
        )
    ),
    "Fetch": Rule(
        (
            _topics(
                R,
                "topics",
                "responses",
                "FetchableTopicResponse",
                name="topic",
                resp_name="topic",
                parts=("partitions", "partition", "partitions", "PartitionData", "partition_index"),
            ),
        )
    ),
    "ListOffsets": Rule(
        (
            _topics(
                D,
                "topics",
                "topics",
                "ListOffsetsTopicResponse",
                parts=(*PARTITIONS, "ListOffsetsPartitionResponse", "partition_index"),
            ),
        )
    ),
    "OffsetForLeaderEpoch": Rule(
        (
            _topics(
                D,
                "topics",
                "topics",
                "OffsetForLeaderTopicResult",
                name="topic",
                resp_name="topic",
                parts=(
                    "partitions",
                    "partition",
                    "partitions",
                    "OffsetForLeaderPartitionResult",
                    "partition",
                ),
            ),
        )
    ),
    "Metadata": Rule(
        (_topics(D, "topics", "topics", "MetadataResponseTopic", versions=range(1, 100)),),
        custom=special.metadata,
        answer_denied_alone=False,
    ),
    "OffsetCommit": Rule(
        (
            Whole(GROUP, R, "group_id"),
            _topics(
                R,
                "topics",
                "topics",
                "OffsetCommitResponseTopic",
                parts=(*PARTITIONS, "OffsetCommitResponsePartition", "partition_index"),
            ),
        )
    ),
    "OffsetFetch": Rule(custom=special.offset_fetch),
    "OffsetDelete": Rule(
        (
            Whole(GROUP, Operation.DELETE, "group_id"),
            _topics(
                R,
                "topics",
                "topics",
                "OffsetDeleteResponseTopic",
                parts=(*PARTITIONS, "OffsetDeleteResponsePartition", "partition_index"),
            ),
        )
    ),
    "FindCoordinator": Rule(custom=special.find_coordinator),
    "JoinGroup": Rule((Whole(GROUP, R, "group_id"),)),
    "SyncGroup": Rule((Whole(GROUP, R, "group_id"),)),
    "Heartbeat": Rule((Whole(GROUP, R, "group_id"),)),
    "LeaveGroup": Rule((Whole(GROUP, R, "group_id"),)),
    "ConsumerGroupHeartbeat": Rule((Whole(GROUP, R, "group_id"),)),
    "DescribeGroups": Rule((Items(GROUP, D, "groups", None, "groups", "DescribedGroup", "group_id"),)),
    "ConsumerGroupDescribe": Rule(
        (Items(GROUP, D, "group_ids", None, "groups", "DescribedGroup", "group_id"),)
    ),
    "ListGroups": Rule(custom=special.list_groups),
    # Share groups (KIP-932), as Kafka's KafkaApis checks them. ShareFetch and ShareAcknowledge also need Read
    # on each topic: the handler checks it per partition (a share session's partitions outlive the request
    # that named them), answering TOPIC_AUTHORIZATION_FAILED for the ones denied.
    "ShareGroupHeartbeat": Rule((Whole(GROUP, R, "group_id"),)),
    "ShareGroupDescribe": Rule((Items(GROUP, D, "group_ids", None, "groups", "DescribedGroup", "group_id"),)),
    "ShareFetch": Rule((Whole(GROUP, R, "group_id"),)),
    "ShareAcknowledge": Rule((Whole(GROUP, R, "group_id"),)),
    "DescribeShareGroupOffsets": Rule(
        (Items(GROUP, D, "groups", "group_id", "groups", "DescribeShareGroupOffsetsResponseGroup", "group_id"),)
    ),
    "AlterShareGroupOffsets": Rule(
        (
            Whole(GROUP, R, "group_id"),
            _topics(
                R,
                "topics",
                "responses",
                "AlterShareGroupOffsetsResponseTopic",
                name="topic_name",
                resp_name="topic_name",
                parts=("partitions", "partition_index", "partitions", "AlterShareGroupOffsetsResponsePartition",
                       "partition_index"),
            ),
        )
    ),
    "DeleteShareGroupOffsets": Rule(
        (
            Whole(GROUP, Operation.DELETE, "group_id"),
            Items(TOPIC, R, "topics", "topic_name", "responses", "DeleteShareGroupOffsetsResponseTopic", "topic_name"),
        )
    ),
    "DeleteGroups": Rule(
        (Items(GROUP, Operation.DELETE, "groups_names", None, "results", "DeletableGroupResult", "group_id"),)
    ),
    "CreateTopics": Rule(
        (_topics(Operation.CREATE, "topics", "topics", "CreatableTopicResult", or_cluster=True),)
    ),
    "DeleteTopics": Rule(
        (
            Items(
                TOPIC,
                Operation.DELETE,
                "topic_names",
                None,
                "responses",
                "DeletableTopicResult",
                "name",
                versions=range(0, 6),
            ),
            _topics(Operation.DELETE, "topics", "responses", "DeletableTopicResult", versions=range(6, 100)),
        )
    ),
    "CreatePartitions": Rule((_topics(Operation.ALTER, "topics", "results", "CreatePartitionsTopicResult"),)),
    "DeleteRecords": Rule(
        (
            _topics(
                Operation.DELETE,
                "topics",
                "topics",
                "DeleteRecordsTopicResult",
                parts=(*PARTITIONS, "DeleteRecordsPartitionResult", "partition_index"),
            ),
        )
    ),
    "DescribeConfigs": Rule(
        (
            Items(
                TOPIC,
                Operation.DESCRIBE_CONFIGS,
                "resources",
                "resource_name",
                "results",
                "DescribeConfigsResult",
                "resource_name",
                config_resource=True,
            ),
        )
    ),
    "AlterConfigs": Rule(
        (
            Items(
                TOPIC,
                Operation.ALTER_CONFIGS,
                "resources",
                "resource_name",
                "responses",
                "AlterConfigsResourceResponse",
                "resource_name",
                config_resource=True,
            ),
        )
    ),
    "IncrementalAlterConfigs": Rule(
        (
            Items(
                TOPIC,
                Operation.ALTER_CONFIGS,
                "resources",
                "resource_name",
                "responses",
                "AlterConfigsResourceResponse",
                "resource_name",
                config_resource=True,
            ),
        )
    ),
    "DescribeAcls": Rule(custom=special.cluster_wide(D, special.fill_top)),
    "CreateAcls": Rule(custom=special.cluster_wide(Operation.ALTER)),
    "DeleteAcls": Rule(custom=special.cluster_wide(Operation.ALTER)),
    "DescribeUserScramCredentials": Rule(custom=special.cluster_wide(D, special.fill_top)),
    "AlterUserScramCredentials": Rule(custom=special.cluster_wide(Operation.ALTER, special.fill_alter_scram)),
    # Transactions (handlers may arrive after this table).
    "InitProducerId": Rule(
        (
            Whole(TXN, W, "transactional_id", when_set=True),
            # Only an idempotent producer (no transactional id) needs this, as in Kafka.
            Whole(CLUSTER, Operation.IDEMPOTENT_WRITE, or_any=(TOPIC, W), unless_set="transactional_id"),
        )
    ),
    "AddPartitionsToTxn": Rule(
        (
            Whole(TXN, W, "v3_and_below_transactional_id", versions=range(0, 4)),
            # v4+ is the brokers' own batched verification (KIP-890): cluster action, as Kafka requires.
            Whole(CLUSTER, Operation.CLUSTER_ACTION, versions=range(4, 100)),
            _topics(
                W,
                "v3_and_below_topics",
                "results_by_topic_v3_and_below",
                "AddPartitionsToTxnTopicResult",
                parts=(
                    "partitions",
                    None,
                    "results_by_partition",
                    "AddPartitionsToTxnPartitionResult",
                    "partition_index",
                ),
                resp_error="partition_error_code",
                versions=range(0, 4),
            ),
        )
    ),
    "AddOffsetsToTxn": Rule((Whole(TXN, W, "transactional_id"), Whole(GROUP, R, "group_id"))),
    "EndTxn": Rule((Whole(TXN, W, "transactional_id"),)),
    "TxnOffsetCommit": Rule(
        (
            Whole(TXN, W, "transactional_id"),
            Whole(GROUP, R, "group_id"),
            _topics(
                R,
                "topics",
                "topics",
                "TxnOffsetCommitResponseTopic",
                parts=(*PARTITIONS, "TxnOffsetCommitResponsePartition", "partition_index"),
            ),
        )
    ),
    "WriteTxnMarkers": Rule(custom=special.cluster_wide(Operation.CLUSTER_ACTION)),
    "DescribeTransactions": Rule(
        (
            Items(
                TXN,
                D,
                "transactional_ids",
                None,
                "transaction_states",
                "TransactionState",
                "transactional_id",
            ),
        )
    ),
    "ListTransactions": Rule(custom=special.list_transactions),
    # Cluster administration (KafkaApis / ControllerApis rules).
    "DescribeClientQuotas": Rule((Whole(CLUSTER, Operation.DESCRIBE_CONFIGS),)),
    "ListConfigResources": Rule((Whole(CLUSTER, Operation.DESCRIBE_CONFIGS),)),
    "AlterClientQuotas": Rule(custom=special.cluster_wide(Operation.ALTER_CONFIGS)),
    "AlterPartitionReassignments": Rule((Whole(CLUSTER, Operation.ALTER),)),
    "ListPartitionReassignments": Rule((Whole(CLUSTER, D),)),
    "AlterReplicaLogDirs": Rule(
        custom=special.cluster_wide(Operation.ALTER, special.fill_alter_replica_log_dirs)
    ),
    # v0-2 have no error field: a denied principal gets no log dirs, as from Kafka.
    "DescribeLogDirs": Rule((Whole(CLUSTER, D),)),
    "DescribeQuorum": Rule((Whole(CLUSTER, D),)),
    "ElectLeaders": Rule(custom=special.cluster_wide(Operation.ALTER)),
    "UpdateFeatures": Rule((Whole(CLUSTER, Operation.ALTER),)),
    "DescribeTopicPartitions": Rule(
        (Items(TOPIC, D, "topics", "name", "topics", "DescribeTopicPartitionsResponseTopic", "name"),),
        custom=special.describe_topic_partitions,
    ),
    "DescribeProducers": Rule(
        (
            _topics(
                R,
                "topics",
                "topics",
                "TopicResponse",
                parts=("partition_indexes", None, "partitions", "PartitionResponse", "partition_index"),
            ),
        )
    ),
}
# An API nobody wrote a rule for is an administrator's API until someone does.
DEFAULT_RULE = Rule((Whole(CLUSTER, Operation.ALTER),))
