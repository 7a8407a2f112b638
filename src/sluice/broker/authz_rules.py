"""The authorizer's rule table: per API, which operation on which resource it needs (Kafka's KafkaApis rules)
and how a denial is answered, plus the special cases that filter or rewrite a response (Metadata, ListGroups,
FindCoordinator, OffsetFetch, the ACL and SCRAM administration APIs). Data only: `broker.authz` applies it.

A whole-request check (`Whole`: group, transactional id, cluster) answers the request with its error code and
never runs the handler; a per-item check (`Items`: topics, groups, config resources) takes the denied items out
of the request and puts them back into the response with the resource's *_AUTHORIZATION_FAILED code. An API
with no rule needs Alter on the cluster (`DEFAULT_RULE`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.broker.api import RequestContext, response_class
from sluice.errors import ErrorCode
from sluice.protocol.messages import response_codecs
from sluice.security.acl import CLUSTER_NAME, Authorizer, Operation, ResourceType

TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
DENIED = {
    TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    TXN: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
# Config resource types (DescribeConfigs & co.) -> ACL resource.
CONFIG_RESOURCES = {2: TOPIC, 4: CLUSTER}
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

Finish = Callable[[Any], Any]


@dataclass(frozen=True)
class Whole:
    """The whole request needs `op` on the resource named by request attribute `attr` (CLUSTER: fixed name).
    `when` restricts the check to requests where that attribute is set (Produce's transactional id)."""

    resource: ResourceType
    op: Operation
    attr: str | None = None
    when_set: bool = False
    # Also allowed when this (resource type, op) is allowed on any resource (InitProducerId: Write on some topic).
    or_any: tuple[ResourceType, Operation] | None = None
    # The API versions the check applies to (None: all).
    versions: range | None = None
    # The check does not apply when this request attribute is set.
    unless_set: str | None = None


@dataclass(frozen=True)
class Items:
    """Per-item check on a list in the request, mirrored by a list in the response.

    Two levels (topics and their partitions) when `req_parts` is set; `req_index` None means the request's
    partition list holds bare indexes. `req_name` None means the request list holds bare names.
    """

    resource: ResourceType
    op: Operation
    req_list: str
    req_name: str | None
    resp_list: str
    resp_item: str
    resp_name: str
    req_parts: str | None = None
    req_index: str | None = None
    resp_parts: str | None = None
    resp_part: str | None = None
    resp_index: str | None = None
    resp_error: str = "error_code"
    versions: range | None = None
    # CreateTopics: Create on the cluster allows every topic.
    or_cluster: bool = False
    # Config resources: the ACL resource type comes from the item's resource_type code.
    config_resource: bool = False


@dataclass(frozen=True)
class Rule:
    checks: tuple[Whole | Items, ...] = ()
    # Special cases that filter or rewrite the response (Metadata, ListGroups, ...): (az, ctx, request) ->
    # (immediate response or None, finish).
    custom: Callable[[Access, RequestContext, Any], tuple[Any, Finish | None]] | None = None
    # When every item is denied, answer them without running the handler. Not for Metadata: its answer
    # must still list the brokers, or a client drops its connections.
    answer_denied_alone: bool = True


@dataclass(slots=True)
class Access:
    """The principal's view of the authorizer for one request."""

    authorizer: Authorizer
    principal: str
    host: str
    topic_names_by_id: Callable[[Any], str | None] = field(default=lambda topic_id: None)

    def allows(self, op: Operation, resource: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, op, resource, name)

    def allows_any(self, op: Operation, resource: ResourceType) -> bool:
        return self.authorizer.authorize_any(self.principal, self.host, op, resource)


def set_error(obj: Any, code: ErrorCode, attr: str = "error_code") -> None:
    setattr(obj, attr, int(code))
    if hasattr(obj, "error_message"):
        obj.error_message = f"{code.name}: not authorized"


def blank_response(api_key: int) -> Any:
    return response_codecs(api_key).cls()


# ----- special cases -----


def _metadata(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    all_topics = request.topics is None or (ctx.api_version == 0 and not request.topics)
    # Auto-creation needs Create on the cluster or on every topic it would create.
    if (
        not all_topics
        and request.allow_auto_topic_creation
        and not access.allows(Operation.CREATE, CLUSTER, CLUSTER_NAME)
        and not all(access.allows(Operation.CREATE, TOPIC, t.name or "") for t in request.topics)
    ):
        request.allow_auto_topic_creation = False

    def finish(response: Any) -> Any:
        if all_topics:
            response.topics = [
                t for t in response.topics if access.allows(Operation.DESCRIBE, TOPIC, t.name or "")
            ]
            return response
        for t in response.topics:  # v0 names topics without the per-item check above
            if not t.error_code and not access.allows(Operation.DESCRIBE, TOPIC, t.name or ""):
                t.error_code, t.partitions = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), []
        return response

    return None, finish


def _list_groups(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    if access.allows(Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
        return None, None

    def finish(response: Any) -> Any:
        response.groups = [g for g in response.groups if access.allows(Operation.DESCRIBE, GROUP, g.group_id)]
        return response

    return None, finish


def _list_transactions(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    """Kafka lists only the transactional ids the principal may Describe (no cluster-wide check)."""

    def finish(response: Any) -> Any:
        response.transaction_states = [
            t
            for t in response.transaction_states
            if access.allows(Operation.DESCRIBE, TXN, t.transactional_id)
        ]
        return response

    return None, finish


def _find_coordinator(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    resource = TXN if request.key_type == 1 else GROUP
    R = response_class("FindCoordinator")
    if ctx.api_version < 4:
        if access.allows(Operation.DESCRIBE, resource, request.key):
            return None, None
        response = R(node_id=-1, host="", port=-1)
        set_error(response, DENIED[resource])
        return response, None
    denied = [k for k in request.coordinator_keys if not access.allows(Operation.DESCRIBE, resource, k)]
    if not denied:
        return None, None
    request.coordinator_keys = [k for k in request.coordinator_keys if k not in denied]

    def finish(response: Any) -> Any:
        for key in denied:
            entry = R.Coordinator(key=key, node_id=-1, host="", port=-1)
            set_error(entry, DENIED[resource])
            response.coordinators.append(entry)
        return response

    if not request.coordinator_keys:
        return finish(R()), None
    return None, finish


def _offset_fetch(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    R = response_class("OffsetFetch")
    if ctx.api_version < 8:
        if not access.allows(Operation.DESCRIBE, GROUP, request.group_id):
            response = R()
            if ctx.api_version >= 2:
                response.error_code = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            for t in request.topics or []:
                response.topics.append(
                    R.OffsetFetchResponseTopic(
                        name=t.name,
                        partitions=[
                            R.OffsetFetchResponsePartition(
                                partition_index=i,
                                committed_offset=-1,
                                error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                            )
                            for i in t.partition_indexes
                        ],
                    )
                )
            return response, None
        fetch_all = request.topics is None

        def finish_old(response: Any) -> Any:
            keep = []
            for t in response.topics:
                if access.allows(Operation.DESCRIBE, TOPIC, t.name):
                    keep.append(t)
                elif not fetch_all:
                    for p in t.partitions:
                        p.committed_offset, p.metadata = -1, ""
                        p.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    keep.append(t)
            response.topics = keep
            return response

        return None, finish_old
    denied = [g for g in request.groups if not access.allows(Operation.DESCRIBE, GROUP, g.group_id)]
    request.groups = [g for g in request.groups if g not in denied]
    fetch_all_by_group = {g.group_id: g.topics is None for g in request.groups}

    def finish(response: Any) -> Any:
        for group in response.groups:
            keep = []
            for t in group.topics:
                if access.allows(Operation.DESCRIBE, TOPIC, t.name):
                    keep.append(t)
                elif not fetch_all_by_group.get(group.group_id, False):
                    for p in t.partitions:
                        p.committed_offset, p.metadata = -1, ""
                        p.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    keep.append(t)
            group.topics = keep
        for g in denied:
            response.groups.append(
                R.OffsetFetchResponseGroup(
                    group_id=g.group_id, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
                )
            )
        return response

    if not request.groups:
        return finish(R()), None
    return None, finish


def _cluster_wide(
    op: Operation, fill: Callable[[Any, Any, ErrorCode], None]
) -> Callable[..., tuple[Any, Finish | None]]:
    """ACL and SCRAM administration: Alter or Describe on the cluster, the error repeated per item."""

    def check(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
        if access.allows(op, CLUSTER, CLUSTER_NAME):
            return None, None
        response = blank_response(ctx.api_key)
        fill(response, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return response, None

    return check


def _fill_top(response: Any, request: Any, code: ErrorCode) -> None:
    set_error(response, code)


def _fill_create_acls(response: Any, request: Any, code: ErrorCode) -> None:
    R = type(response)
    response.results = [
        R.AclCreationResult(error_code=int(code), error_message="not authorized: needs Alter on the cluster")
        for _ in request.creations
    ]


def _fill_delete_acls(response: Any, request: Any, code: ErrorCode) -> None:
    R = type(response)
    response.filter_results = [
        R.DeleteAclsFilterResult(
            error_code=int(code), error_message="not authorized: needs Alter on the cluster"
        )
        for _ in request.filters
    ]


def _fill_alter_scram(response: Any, request: Any, code: ErrorCode) -> None:
    R = type(response)
    users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    response.results = [
        R.AlterUserScramCredentialsResult(
            user=u, error_code=int(code), error_message="not authorized: needs Alter on the cluster"
        )
        for u in users
    ]


def _fill_write_txn_markers(response: Any, request: Any, code: ErrorCode) -> None:
    """Every partition of every marker carries the code (the response has no top-level error)."""
    R = type(response)
    response.markers = [
        R.WritableTxnMarkerResult(
            producer_id=marker.producer_id,
            topics=[
                R.WritableTxnMarkerTopicResult(
                    name=topic.name,
                    partitions=[
                        R.WritableTxnMarkerPartitionResult(partition_index=index, error_code=int(code))
                        for index in topic.partition_indexes
                    ],
                )
                for topic in marker.topics
            ],
        )
        for marker in request.markers
    ]


def _fill_alter_client_quotas(response: Any, request: Any, code: ErrorCode) -> None:
    R = type(response)
    response.entries = [
        R.EntryData(
            error_code=int(code),
            error_message="not authorized: needs AlterConfigs on the cluster",
            entity=[R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity],
        )
        for entry in request.entries
    ]


def _fill_alter_replica_log_dirs(response: Any, request: Any, code: ErrorCode) -> None:
    R = type(response)
    response.results = [
        R.AlterReplicaLogDirTopicResult(
            topic_name=topic.name,
            partitions=[
                R.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=int(code))
                for index in topic.partitions
            ],
        )
        for log_dir in request.dirs
        for topic in log_dir.topics
    ]


def _fill_elect_leaders(response: Any, request: Any, code: ErrorCode) -> None:
    """The top-level error (v1+) and every named partition's, as Kafka answers."""
    R = type(response)
    set_error(response, code)
    response.replica_election_results = [
        R.ReplicaElectionResult(
            topic=tp.topic,
            partition_result=[
                R.PartitionResult(
                    partition_id=index,
                    error_code=int(code),
                    error_message="not authorized: needs Alter on the cluster",
                )
                for index in tp.partition_id
            ],
        )
        for tp in request.topic_partitions or []
    ]


def _describe_topic_partitions(
    access: Access, ctx: RequestContext, request: Any
) -> tuple[Any, Finish | None]:
    """Named topics are checked one by one (the Items rule, which runs first and may leave the list empty);
    all topics lists only the describable ones. Denied named topics keep their error entry."""
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    def finish(response: Any) -> Any:
        response.topics = [
            t
            for t in response.topics
            if t.error_code == denied or access.allows(Operation.DESCRIBE, TOPIC, t.name or "")
        ]
        return response

    return None, finish


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
        custom=_metadata,
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
    "OffsetFetch": Rule(custom=_offset_fetch),
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
    "FindCoordinator": Rule(custom=_find_coordinator),
    "JoinGroup": Rule((Whole(GROUP, R, "group_id"),)),
    "SyncGroup": Rule((Whole(GROUP, R, "group_id"),)),
    "Heartbeat": Rule((Whole(GROUP, R, "group_id"),)),
    "LeaveGroup": Rule((Whole(GROUP, R, "group_id"),)),
    "ConsumerGroupHeartbeat": Rule((Whole(GROUP, R, "group_id"),)),
    "DescribeGroups": Rule((Items(GROUP, D, "groups", None, "groups", "DescribedGroup", "group_id"),)),
    "ConsumerGroupDescribe": Rule(
        (Items(GROUP, D, "group_ids", None, "groups", "DescribedGroup", "group_id"),)
    ),
    "ListGroups": Rule(custom=_list_groups),
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
    "DescribeAcls": Rule(custom=_cluster_wide(D, _fill_top)),
    "CreateAcls": Rule(custom=_cluster_wide(Operation.ALTER, _fill_create_acls)),
    "DeleteAcls": Rule(custom=_cluster_wide(Operation.ALTER, _fill_delete_acls)),
    "DescribeUserScramCredentials": Rule(custom=_cluster_wide(D, _fill_top)),
    "AlterUserScramCredentials": Rule(custom=_cluster_wide(Operation.ALTER, _fill_alter_scram)),
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
    "WriteTxnMarkers": Rule(custom=_cluster_wide(Operation.CLUSTER_ACTION, _fill_write_txn_markers)),
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
    "ListTransactions": Rule(custom=_list_transactions),
    # Cluster administration (KafkaApis / ControllerApis rules).
    "DescribeClientQuotas": Rule((Whole(CLUSTER, Operation.DESCRIBE_CONFIGS),)),
    "ListConfigResources": Rule((Whole(CLUSTER, Operation.DESCRIBE_CONFIGS),)),
    "AlterClientQuotas": Rule(custom=_cluster_wide(Operation.ALTER_CONFIGS, _fill_alter_client_quotas)),
    "AlterPartitionReassignments": Rule((Whole(CLUSTER, Operation.ALTER),)),
    "ListPartitionReassignments": Rule((Whole(CLUSTER, D),)),
    "AlterReplicaLogDirs": Rule(custom=_cluster_wide(Operation.ALTER, _fill_alter_replica_log_dirs)),
    # v0-2 have no error field: a denied principal gets no log dirs, as from Kafka.
    "DescribeLogDirs": Rule((Whole(CLUSTER, D),)),
    "DescribeQuorum": Rule((Whole(CLUSTER, D),)),
    "ElectLeaders": Rule(custom=_cluster_wide(Operation.ALTER, _fill_elect_leaders)),
    "UpdateFeatures": Rule((Whole(CLUSTER, Operation.ALTER),)),
    "DescribeTopicPartitions": Rule(
        (Items(TOPIC, D, "topics", "name", "topics", "DescribeTopicPartitionsResponseTopic", "name"),),
        custom=_describe_topic_partitions,
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
