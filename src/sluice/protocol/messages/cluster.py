"""Cluster and replica administration a single node answers truthfully: AlterReplicaLogDirs (34),
DescribeLogDirs (35), ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46),
DescribeClientQuotas (48), AlterClientQuotas (49), DescribeQuorum (55), UpdateFeatures (57),
DescribeProducers (61), DescribeTopicPartitions (75).

Written from Kafka's message specs (clients/src/main/resources/common/message/*.json).
"""

from sluice.protocol.schema import Api

ALTER_REPLICA_LOG_DIRS = Api(
    key=34,
    name="AlterReplicaLogDirs",
    valid="0-2",
    flexible="2+",
    request="""
Dirs                    []AlterReplicaLogDir
  Path                  string
  Topics                []AlterReplicaLogDirTopic
    Name                string
    Partitions          []int32
""",
    response="""
ThrottleTimeMs          int32
Results                 []AlterReplicaLogDirTopicResult
  TopicName             string
  Partitions            []AlterReplicaLogDirPartitionResult
    PartitionIndex      int32
    ErrorCode           int16
""",
)

DESCRIBE_LOG_DIRS = Api(
    key=35,
    name="DescribeLogDirs",
    valid="0-4",
    flexible="2+",
    request="""
Topics                  []DescribableLogDirTopic  null=v0+
  Topic                 string
  Partitions            []int32
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16    v3+
Results                 []DescribeLogDirsResult
  ErrorCode             int16
  LogDir                string
  Topics                []DescribeLogDirsTopic
    Name                string
    Partitions          []DescribeLogDirsPartition
      PartitionIndex    int32
      PartitionSize     int64
      OffsetLag         int64
      IsFutureKey       bool
  TotalBytes            int64    v4+  default=-1
  UsableBytes           int64    v4+  default=-1
""",
)

ELECT_LEADERS = Api(
    key=43,
    name="ElectLeaders",
    valid="0-2",
    flexible="2+",
    request="""
ElectionType            int8     v1+
TopicPartitions         []TopicPartitions  null=v0+
  Topic                 string
  PartitionId           []int32
TimeoutMs               int32    default=60000
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16    v1+
ReplicaElectionResults  []ReplicaElectionResult
  Topic                 string
  PartitionResult       []PartitionResult
    PartitionId         int32
    ErrorCode           int16
    ErrorMessage        string   null=v0+
""",
)

# v1 (KIP-860, AllowReplicationFactorChange) is not served: a single node never changes a replication factor.
ALTER_PARTITION_REASSIGNMENTS = Api(
    key=45,
    name="AlterPartitionReassignments",
    valid="0-1",
    flexible="0+",
    request="""
TimeoutMs               int32    default=60000
AllowReplicationFactorChange  bool  v1+  default=true
Topics                  []ReassignableTopic
  Name                  string
  Partitions            []ReassignablePartition
    PartitionIndex      int32
    Replicas            []int32  null=v0+  default=null
""",
    response="""
ThrottleTimeMs          int32
AllowReplicationFactorChange  bool  v1+  default=true
ErrorCode               int16
ErrorMessage            string   null=v0+
Responses               []ReassignableTopicResponse
  Name                  string
  Partitions            []ReassignablePartitionResponse
    PartitionIndex      int32
    ErrorCode           int16
    ErrorMessage        string   null=v0+
""",
)

LIST_PARTITION_REASSIGNMENTS = Api(
    key=46,
    name="ListPartitionReassignments",
    valid="0",
    flexible="0+",
    request="""
TimeoutMs               int32    default=60000
Topics                  []ListPartitionReassignmentsTopics  null=v0+  default=null
  Name                  string
  PartitionIndexes      []int32
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ErrorMessage            string   null=v0+
Topics                  []OngoingTopicReassignment
  Name                  string
  Partitions            []OngoingPartitionReassignment
    PartitionId         int32
    CurrentBrokers      []int32
    TargetBrokers       []int32
""",
)

DESCRIBE_CLIENT_QUOTAS = Api(
    key=48,
    name="DescribeClientQuotas",
    valid="0-1",
    flexible="1+",
    request="""
Components              []ComponentData
  EntityType            string
  MatchType             int8
  Match                 string   null=v0+
Strict                  bool
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ErrorMessage            string   null=v0+
Entries                 []EntryData  null=v0+
  Entity                []EntityData
    EntityType          string
    EntityName          string   null=v0+
  Values                []ValueData
    Key                 string
    Value               float64
""",
)

ALTER_CLIENT_QUOTAS = Api(
    key=49,
    name="AlterClientQuotas",
    valid="0-1",
    flexible="1+",
    request="""
Entries                 []EntryData
  Entity                []EntityData
    EntityType          string
    EntityName          string   null=v0+
  Ops                   []OpData
    Key                 string
    Value               float64
    Remove              bool
ValidateOnly            bool
""",
    response="""
ThrottleTimeMs          int32
Entries                 []EntryData
  ErrorCode             int16
  ErrorMessage          string   null=v0+
  Entity                []EntityData
    EntityType          string
    EntityName          string   null=v0+
""",
)

# v2 (KIP-853) adds directory ids and the voters' endpoints.
DESCRIBE_QUORUM = Api(
    key=55,
    name="DescribeQuorum",
    valid="0-2",
    flexible="0+",
    request="""
Topics                  []TopicData
  TopicName             string
  Partitions            []PartitionData
    PartitionIndex      int32
""",
    response="""
ErrorCode               int16
ErrorMessage            string   v2+  null=v2+  default=null
Topics                  []TopicData
  TopicName             string
  Partitions            []PartitionData
    PartitionIndex      int32
    ErrorCode           int16
    ErrorMessage        string   v2+  null=v2+  default=null
    LeaderId            int32
    LeaderEpoch         int32
    HighWatermark       int64
    CurrentVoters       []ReplicaState
      ReplicaId         int32
      ReplicaDirectoryId  uuid   v2+
      LogEndOffset      int64
      LastFetchTimestamp  int64  v1+  default=-1
      LastCaughtUpTimestamp  int64  v1+  default=-1
    Observers           []ReplicaState
Nodes                   []Node   v2+
  NodeId                int32    v2+
  Listeners             []Listener  v2+
    Name                string   v2+
    Host                string   v2+
    Port                uint16   v2+
""",
)

UPDATE_FEATURES = Api(
    key=57,
    name="UpdateFeatures",
    valid="0-2",
    flexible="0+",
    request="""
timeoutMs               int32    default=60000
FeatureUpdates          []FeatureUpdateKey
  Feature               string
  MaxVersionLevel       int16
  AllowDowngrade        bool     v0
  UpgradeType           int8     v1+  default=1
ValidateOnly            bool     v1+  default=false
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ErrorMessage            string   null=v0+
Results                 []UpdatableFeatureResult  v0-1
  Feature               string
  ErrorCode             int16
  ErrorMessage          string   null=v0+
""",
)

DESCRIBE_PRODUCERS = Api(
    key=61,
    name="DescribeProducers",
    valid="0",
    flexible="0+",
    request="""
Topics                  []TopicRequest
  Name                  string
  PartitionIndexes      []int32
""",
    response="""
ThrottleTimeMs          int32
Topics                  []TopicResponse
  Name                  string
  Partitions            []PartitionResponse
    PartitionIndex      int32
    ErrorCode           int16
    ErrorMessage        string   null=v0+  default=null
    ActiveProducers     []ProducerState
      ProducerId        int64
      ProducerEpoch     int32
      LastSequence      int32    default=-1
      LastTimestamp     int64    default=-1
      CoordinatorEpoch  int32
      CurrentTxnStartOffset  int64  default=-1
""",
)

# KIP-966: Metadata with paging, used by the Java AdminClient's describeTopics from 3.9 on.
DESCRIBE_TOPIC_PARTITIONS = Api(
    key=75,
    name="DescribeTopicPartitions",
    valid="0",
    flexible="0+",
    request="""
Topics                  []TopicRequest
  Name                  string
ResponsePartitionLimit  int32    default=2000
Cursor                  Cursor   null=v0+  default=null
  TopicName             string
  PartitionIndex        int32
""",
    response="""
ThrottleTimeMs          int32
Topics                  []DescribeTopicPartitionsResponseTopic
  ErrorCode             int16
  Name                  string   null=v0+
  TopicId               uuid
  IsInternal            bool     default=false
  Partitions            []DescribeTopicPartitionsResponsePartition
    ErrorCode           int16
    PartitionIndex      int32
    LeaderId            int32
    LeaderEpoch         int32    default=-1
    ReplicaNodes        []int32
    IsrNodes            []int32
    EligibleLeaderReplicas  []int32  null=v0+  default=null
    LastKnownElr        []int32  null=v0+  default=null
    OfflineReplicas     []int32
  TopicAuthorizedOperations  int32  default=-2147483648
NextTopicPartition      Cursor   null=v0+  default=null
  TopicName             string
  PartitionIndex        int32
""",
)

APIS: list[Api] = [
    DESCRIBE_TOPIC_PARTITIONS,
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
    DESCRIBE_CLIENT_QUOTAS,
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_QUORUM,
    UPDATE_FEATURES,
    DESCRIBE_PRODUCERS,
]
