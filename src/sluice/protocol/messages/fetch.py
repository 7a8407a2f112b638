"""Fetch (1), ListOffsets (2) and OffsetForLeaderEpoch (23)."""

from sluice.protocol.schema import Api

# Kafka 4.0 dropped Fetch v0-3 (KIP-896); older clients still use them.
FETCH = Api(
    key=1,
    name="Fetch",
    valid="0-18",
    flexible="12+",
    request="""
ClusterId               string   v12+  null=v12+  tag=0  default=null
ReplicaId               int32    v0-14  default=-1
ReplicaState            ReplicaState  v15+  tag=1
  ReplicaId             int32    v15+  default=-1
  ReplicaEpoch          int64    v15+  default=-1
MaxWaitMs               int32
MinBytes                int32
MaxBytes                int32    v3+  default=0x7fffffff
IsolationLevel          int8     v4+  default=0
SessionId               int32    v7+  default=0
SessionEpoch            int32    v7+  default=-1
Topics                  []FetchTopic
  Topic                 string   v0-12
  TopicId               uuid     v13+
  Partitions            []FetchPartition
    Partition           int32
    CurrentLeaderEpoch  int32    v9+  default=-1
    FetchOffset         int64
    LastFetchedEpoch    int32    v12+  default=-1
    LogStartOffset      int64    v5+  default=-1
    PartitionMaxBytes   int32
    ReplicaDirectoryId  uuid     v17+  tag=0
    HighWatermark       int64    v18+  tag=1  default=9223372036854775807
ForgottenTopicsData     []ForgottenTopic  v7+
  Topic                 string   v7-12
  TopicId               uuid     v13+
  Partitions            []int32  v7+
RackId                  string   v11+  default=""
""",
    response="""
ThrottleTimeMs          int32    v1+
ErrorCode               int16    v7+
SessionId               int32    v7+  default=0
Responses               []FetchableTopicResponse
  Topic                 string   v0-12
  TopicId               uuid     v13+
  Partitions            []PartitionData
    PartitionIndex      int32
    ErrorCode           int16
    HighWatermark       int64
    LastStableOffset    int64    v4+  default=-1
    LogStartOffset      int64    v5+  default=-1
    DivergingEpoch      EpochEndOffset  v12+  tag=0
      Epoch             int32    v12+  default=-1
      EndOffset         int64    v12+  default=-1
    CurrentLeader       LeaderIdAndEpoch  v12+  tag=1
      LeaderId          int32    v12+  default=-1
      LeaderEpoch       int32    v12+  default=-1
    SnapshotId          SnapshotId  v12+  tag=2
      EndOffset         int64    default=-1
      Epoch             int32    default=-1
    AbortedTransactions  []AbortedTransaction  v4+  null=v4+
      ProducerId        int64    v4+
      FirstOffset       int64    v4+
    PreferredReadReplica  int32  v11+  default=-1
    Records             records  null=v0+
NodeEndpoints           []NodeEndpoint  v16+  tag=0
  NodeId                int32    v16+
  Host                  string   v16+
  Port                  int32    v16+
  Rack                  string   v16+  null=v16+  default=null
""",
)

# Kafka 4.0 dropped v0 (KIP-896); v0 alone has MaxNumOffsets and OldStyleOffsets.
# v11 (KIP-1023) only adds a timestamp sentinel, no fields.
LIST_OFFSETS = Api(
    key=2,
    name="ListOffsets",
    valid="0-11",
    flexible="6+",
    request="""
ReplicaId               int32
IsolationLevel          int8     v2+
Topics                  []ListOffsetsTopic
  Name                  string
  Partitions            []ListOffsetsPartition
    PartitionIndex      int32
    CurrentLeaderEpoch  int32    v4+  default=-1
    Timestamp           int64
    MaxNumOffsets       int32    v0  default=1
TimeoutMs               int32    v10+
""",
    response="""
ThrottleTimeMs          int32    v2+
Topics                  []ListOffsetsTopicResponse
  Name                  string
  Partitions            []ListOffsetsPartitionResponse
    PartitionIndex      int32
    ErrorCode           int16
    OldStyleOffsets     []int64  v0
    Timestamp           int64    v1+  default=-1
    Offset              int64    v1+  default=-1
    LeaderEpoch         int32    v4+  default=-1
""",
)

# Kafka 4.0 dropped v0-1 (KIP-896).
OFFSET_FOR_LEADER_EPOCH = Api(
    key=23,
    name="OffsetForLeaderEpoch",
    valid="0-4",
    flexible="4+",
    request="""
ReplicaId               int32    v3+  default=-2
Topics                  []OffsetForLeaderTopic
  Topic                 string
  Partitions            []OffsetForLeaderPartition
    Partition           int32
    CurrentLeaderEpoch  int32    v2+  default=-1
    LeaderEpoch         int32
""",
    response="""
ThrottleTimeMs          int32    v2+
Topics                  []OffsetForLeaderTopicResult
  Topic                 string
  Partitions            []OffsetForLeaderPartitionResult
    ErrorCode           int16
    Partition           int32
    LeaderEpoch         int32    v1+  default=-1
    EndOffset           int64
""",
)

APIS: list[Api] = [FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH]
