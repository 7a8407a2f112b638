"""The coordinator's inputs and outputs: plain data, named after Kafka's message schemas.

Field names are the snake_case of the JSON schema fields in apache/kafka
``clients/src/main/resources/common/message/*.json``. They are version-agnostic: the broker fills
defaults for fields an older request version lacks (rebalance_timeout_ms -1 for JoinGroup v0,
group_instance_id None before v5, ...) and drops response fields its version cannot carry. Inputs
add what the header or the connection knows (``api_version``, ``client_id``, ``client_host``).
Version notes for the broker:
  * JoinGroupResult.protocol_type/protocol_name may be None; before v7 send "" for protocol_name.
  * LeaveGroup v0-2 carry one member and no per-member errors: report ``members[0].error_code`` as
    the top-level error when ``error_code`` is NONE.
  * DescribeGroups: an unknown group comes back with state "Dead" and error NONE, which is what
    versions before 6 send; v6+ may report GROUP_ID_NOT_FOUND for it.
  * OffsetFetch before v8 has one group: send ``groups[0]`` and its error_code at top level (v2+).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from sluice.errors import ErrorCode

NO_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass(slots=True)
class JoinGroupProtocol:
    name: str
    metadata: bytes


@dataclass(slots=True)
class JoinGroup:
    group_id: str
    session_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: list[JoinGroupProtocol]
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None
    reason: str | None = None
    api_version: int = 9
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinGroupResult:
    error_code: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[JoinGroupResponseMember] = field(default_factory=list)


@dataclass(slots=True)
class SyncGroupAssignment:
    member_id: str
    assignment: bytes


@dataclass(slots=True)
class SyncGroup:
    group_id: str
    generation_id: int
    member_id: str
    assignments: list[SyncGroupAssignment] = field(default_factory=list)
    group_instance_id: str | None = None
    # v5+ (KIP-559); None means "not sent" and skips the consistency check.
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class SyncGroupResult:
    error_code: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class Heartbeat:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(slots=True)
class HeartbeatResult:
    error_code: ErrorCode


@dataclass(slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(slots=True)
class LeaveGroup:
    group_id: str
    members: list[MemberIdentity]


@dataclass(slots=True)
class MemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


@dataclass(slots=True)
class LeaveGroupResult:
    error_code: ErrorCode
    members: list[MemberResponse] = field(default_factory=list)


# --- offsets ---------------------------------------------------------------------------------


@dataclass(slots=True)
class OffsetCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = None
    # Only OffsetCommit v1 sends one; -1 means "use the broker's clock".
    commit_timestamp: int = -1


@dataclass(slots=True)
class OffsetCommitTopic:
    name: str
    partitions: list[OffsetCommitPartition]


@dataclass(slots=True)
class OffsetCommit:
    group_id: str
    topics: list[OffsetCommitTopic]
    generation_id: int = NO_GENERATION
    member_id: str = NO_MEMBER_ID
    group_instance_id: str | None = None
    retention_time_ms: int = -1


@dataclass(slots=True)
class PartitionResult:
    partition_index: int
    error_code: ErrorCode


@dataclass(slots=True)
class TopicResult:
    name: str
    partitions: list[PartitionResult]


@dataclass(slots=True)
class OffsetCommitResult:
    topics: list[TopicResult]


@dataclass(slots=True)
class OffsetFetchTopic:
    name: str
    partition_indexes: list[int]


@dataclass(slots=True)
class OffsetFetchGroup:
    group_id: str
    # None asks for every partition the group has committed.
    topics: list[OffsetFetchTopic] | None = None


@dataclass(slots=True)
class OffsetFetch:
    groups: list[OffsetFetchGroup]
    require_stable: bool = False


@dataclass(slots=True)
class OffsetFetchPartition:
    partition_index: int
    committed_offset: int = -1
    committed_leader_epoch: int = -1
    metadata: str | None = ""
    error_code: ErrorCode = ErrorCode.NONE


@dataclass(slots=True)
class OffsetFetchResultTopic:
    name: str
    partitions: list[OffsetFetchPartition]


@dataclass(slots=True)
class OffsetFetchResultGroup:
    group_id: str
    topics: list[OffsetFetchResultTopic]
    error_code: ErrorCode = ErrorCode.NONE


@dataclass(slots=True)
class OffsetFetchResult:
    groups: list[OffsetFetchResultGroup]


@dataclass(slots=True)
class OffsetDeleteTopic:
    name: str
    partition_indexes: list[int]


@dataclass(slots=True)
class OffsetDelete:
    group_id: str
    topics: list[OffsetDeleteTopic]


@dataclass(slots=True)
class OffsetDeleteResult:
    error_code: ErrorCode
    topics: list[TopicResult] = field(default_factory=list)


# --- administration --------------------------------------------------------------------------


@dataclass(slots=True)
class ListGroups:
    # Empty filters match everything; both compare case-insensitively, as Kafka does.
    states_filter: list[str] = field(default_factory=list)
    types_filter: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = "classic"


@dataclass(slots=True)
class ListGroupsResult:
    error_code: ErrorCode
    groups: list[ListedGroup] = field(default_factory=list)


@dataclass(slots=True)
class DescribeGroups:
    groups: list[str]


@dataclass(slots=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(slots=True)
class DescribedGroup:
    error_code: ErrorCode
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedGroupMember] = field(default_factory=list)
    # Why a group is not described (a KIP-848 group asked for as a classic one); v6+ sends it.
    error_message: str | None = None


@dataclass(slots=True)
class DescribeGroupsResult:
    groups: list[DescribedGroup]


@dataclass(slots=True)
class DeleteGroups:
    groups_names: list[str]


@dataclass(slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: ErrorCode


@dataclass(slots=True)
class DeleteGroupsResult:
    results: list[DeletableGroupResult]


# --- KIP-848 consumer groups ---------------------------------------------------------------
# Topic-partitions travel as (topic id, partition) pairs, the way the protocol names them.
TopicIdPartition = tuple[uuid.UUID, int]


@dataclass(slots=True, frozen=True)
class TopicInfo:
    """What the broker knows of a topic when a heartbeat arrives (the coordinator has no metadata)."""

    name: str
    topic_id: uuid.UUID
    partitions: int


@dataclass(slots=True)
class ConsumerGroupHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    # None means "unchanged since the last heartbeat" for every field below.
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: list[TopicIdPartition] | None = None
    api_version: int = 0
    client_id: str = ""
    client_host: str = ""
    # The broker's topics by name, looked up for the subscribed ones (a lazy view is fine).
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)


@dataclass(slots=True)
class ConsumerGroupHeartbeatResult:
    error_code: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # None: unchanged, the member keeps what it has.
    assignment: list[TopicIdPartition] | None = None


@dataclass(slots=True)
class ConsumerGroupDescribe:
    group_ids: list[str]


@dataclass(slots=True)
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: list[int]


@dataclass(slots=True)
class ConsumerGroupDescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: list[DescribedTopicPartitions]
    target_assignment: list[DescribedTopicPartitions]


@dataclass(slots=True)
class ConsumerGroupDescribedGroup:
    error_code: ErrorCode
    group_id: str
    error_message: str | None = None
    group_state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[ConsumerGroupDescribedMember] = field(default_factory=list)


@dataclass(slots=True)
class ConsumerGroupDescribeResult:
    groups: list[ConsumerGroupDescribedGroup]


Result = (
    JoinGroupResult
    | SyncGroupResult
    | HeartbeatResult
    | LeaveGroupResult
    | OffsetCommitResult
    | OffsetFetchResult
    | OffsetDeleteResult
    | ListGroupsResult
    | DescribeGroupsResult
    | DeleteGroupsResult
    | ConsumerGroupHeartbeatResult
    | ConsumerGroupDescribeResult
)
