"""Committed-offset APIs: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47).

Kafka 4.0 dropped OffsetCommit v0-1 and OffsetFetch v0 (KIP-896); older clients still send them.
Version 10 of both (Kafka 4.2) names topics by id instead of by name.
"""

from sluice.protocol.schema import Api

OFFSET_COMMIT = Api(
    key=8,
    name="OffsetCommit",
    valid="0-10",
    flexible="8+",
    request="""
GroupId                     string
GenerationIdOrMemberEpoch   int32    v1+   default=-1
MemberId                    string   v1+
GroupInstanceId             string   v7+   null=v7+  default=null
RetentionTimeMs             int64    v2-4  default=-1
Topics                      []OffsetCommitRequestTopic
  Name                      string   v0-9
  TopicId                   uuid     v10+
  Partitions                []OffsetCommitRequestPartition
    PartitionIndex          int32
    CommittedOffset         int64
    CommittedLeaderEpoch    int32    v6+   default=-1
    CommitTimestamp         int64    v1    default=-1
    CommittedMetadata       string         null=v0+
""",
    response="""
ThrottleTimeMs              int32    v3+
Topics                      []OffsetCommitResponseTopic
  Name                      string   v0-9
  TopicId                   uuid     v10+
  Partitions                []OffsetCommitResponsePartition
    PartitionIndex          int32
    ErrorCode               int16
""",
)

OFFSET_FETCH = Api(
    key=9,
    name="OffsetFetch",
    valid="0-10",
    flexible="6+",
    request="""
GroupId                     string   v0-7
Topics                      []OffsetFetchRequestTopic  v0-7  null=v2-7
  Name                      string   v0-7
  PartitionIndexes          []int32  v0-7
Groups                      []OffsetFetchRequestGroup  v8+
  GroupId                   string   v8+
  MemberId                  string   v9+   null=v9+  default=null
  MemberEpoch               int32    v9+   default=-1
  Topics                    []OffsetFetchRequestTopics  v8+  null=v8+
    Name                    string   v8-9
    TopicId                 uuid     v10+
    PartitionIndexes        []int32  v8+
RequireStable               bool     v7+   default=false
""",
    response="""
ThrottleTimeMs              int32    v3+
Topics                      []OffsetFetchResponseTopic  v0-7
  Name                      string   v0-7
  Partitions                []OffsetFetchResponsePartition  v0-7
    PartitionIndex          int32    v0-7
    CommittedOffset         int64    v0-7
    CommittedLeaderEpoch    int32    v5-7  default=-1
    Metadata                string   v0-7  null=v0-7
    ErrorCode               int16    v0-7
ErrorCode                   int16    v2-7  default=0
Groups                      []OffsetFetchResponseGroup  v8+
  GroupId                   string   v8+
  Topics                    []OffsetFetchResponseTopics  v8+
    Name                    string   v8-9
    TopicId                 uuid     v10+
    Partitions              []OffsetFetchResponsePartitions  v8+
      PartitionIndex        int32    v8+
      CommittedOffset       int64    v8+
      CommittedLeaderEpoch  int32    v8+   default=-1
      Metadata              string   v8+   null=v8+
      ErrorCode             int16    v8+
  ErrorCode                 int16    v8+   default=0
""",
)

OFFSET_DELETE = Api(
    key=47,
    name="OffsetDelete",
    valid="0",
    flexible="none",
    request="""
GroupId                     string
Topics                      []OffsetDeleteRequestTopic
  Name                      string
  Partitions                []OffsetDeleteRequestPartition
    PartitionIndex          int32
""",
    response="""
ErrorCode                   int16
ThrottleTimeMs              int32
Topics                      []OffsetDeleteResponseTopic
  Name                      string
  Partitions                []OffsetDeleteResponsePartition
    PartitionIndex          int32
    ErrorCode               int16
""",
)

APIS: list[Api] = [OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE]
