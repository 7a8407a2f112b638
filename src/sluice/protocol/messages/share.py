"""Share groups (KIP-932, Kafka's queues): membership (76, 77), fetching and acknowledging (78, 79), and the
share-group offset admin APIs (90-92); plus the record layouts of `__share_group_state`.

Kafka 4.0 served version 0 of 76-79 as early access; 4.1 removed it, so version 1 is the first stable one.
ShareFetch and ShareAcknowledge v2 (Kafka 4.3) add the record-limit acquire mode (KIP-1206) and RENEW
acknowledgements (KIP-1222). DescribeShareGroupOffsets v1 adds the lag (KIP-1226).
"""

from sluice.protocol.schema import Api, Struct

SHARE_GROUP_HEARTBEAT = Api(
    key=76,
    name="ShareGroupHeartbeat",
    valid="1",
    flexible="0+",
    request="""
GroupId                string
MemberId               string
MemberEpoch            int32
RackId                 string         null=v0+  default=null
SubscribedTopicNames   []string       null=v0+  default=null
""",
    response="""
ThrottleTimeMs         int32
ErrorCode              int16
ErrorMessage           string         null=v0+  default=null
MemberId               string         null=v0+  default=null
MemberEpoch            int32
HeartbeatIntervalMs    int32
Assignment             Assignment     null=v0+  default=null
  TopicPartitions      []TopicPartitions
    TopicId            uuid
    Partitions         []int32
""",
)

SHARE_GROUP_DESCRIBE = Api(
    key=77,
    name="ShareGroupDescribe",
    valid="1",
    flexible="0+",
    request="""
GroupIds                    []string
IncludeAuthorizedOperations bool
""",
    response="""
ThrottleTimeMs         int32
Groups                 []DescribedGroup
  ErrorCode            int16
  ErrorMessage         string         null=v0+  default=null
  GroupId              string
  GroupState           string
  GroupEpoch           int32
  AssignmentEpoch      int32
  AssignorName         string
  Members              []Member
    MemberId           string
    RackId             string         null=v0+  default=null
    MemberEpoch        int32
    ClientId           string
    ClientHost         string
    SubscribedTopicNames []string
    Assignment         Assignment
      TopicPartitions  []TopicPartitions
        TopicId        uuid
        TopicName      string
        Partitions     []int32
  AuthorizedOperations int32          default=-2147483648
""",
)

# One acknowledgement range: a single type for the whole range, or one type per offset.
_ACKNOWLEDGEMENT_BATCHES = """
    AcknowledgementBatches  []AcknowledgementBatch
      FirstOffset      int64
      LastOffset       int64
      AcknowledgeTypes []int8
"""

SHARE_FETCH = Api(
    key=78,
    name="ShareFetch",
    valid="1-2",
    flexible="0+",
    request="""
GroupId                string         null=v0+  default=null
MemberId               string         null=v0+
ShareSessionEpoch      int32
MaxWaitMs              int32
MinBytes               int32
MaxBytes               int32          default=0x7fffffff
MaxRecords             int32
BatchSize              int32
ShareAcquireMode       int8     v2+   default=0
IsRenewAck             bool     v2+   default=false
Topics                 []FetchTopic
  TopicId              uuid
  Partitions           []FetchPartition
    PartitionIndex     int32"""
    + _ACKNOWLEDGEMENT_BATCHES
    + """ForgottenTopicsData    []ForgottenTopic
  TopicId              uuid
  Partitions           []int32
""",
    response="""
ThrottleTimeMs         int32
ErrorCode              int16
ErrorMessage           string         null=v0+  default=null
AcquisitionLockTimeoutMs int32
Responses              []ShareFetchableTopicResponse
  TopicId              uuid
  Partitions           []PartitionData
    PartitionIndex     int32
    ErrorCode          int16
    ErrorMessage       string         null=v0+  default=null
    AcknowledgeErrorCode int16
    AcknowledgeErrorMessage string    null=v0+  default=null
    CurrentLeader      LeaderIdAndEpoch
      LeaderId         int32
      LeaderEpoch      int32
    Records            records
    AcquiredRecords    []AcquiredRecords
      FirstOffset      int64
      LastOffset       int64
      DeliveryCount    int16
NodeEndpoints          []NodeEndpoint
  NodeId               int32
  Host                 string
  Port                 int32
  Rack                 string         null=v0+  default=null
""",
)

SHARE_ACKNOWLEDGE = Api(
    key=79,
    name="ShareAcknowledge",
    valid="1-2",
    flexible="0+",
    request="""
GroupId                string         null=v0+  default=null
MemberId               string         null=v0+
ShareSessionEpoch      int32
IsRenewAck             bool     v2+   default=false
Topics                 []AcknowledgeTopic
  TopicId              uuid
  Partitions           []AcknowledgePartition
    PartitionIndex     int32"""
    + _ACKNOWLEDGEMENT_BATCHES,
    response="""
ThrottleTimeMs         int32
ErrorCode              int16
ErrorMessage           string         null=v0+  default=null
AcquisitionLockTimeoutMs int32  v2+
Responses              []ShareAcknowledgeTopicResponse
  TopicId              uuid
  Partitions           []PartitionData
    PartitionIndex     int32
    ErrorCode          int16
    ErrorMessage       string         null=v0+  default=null
    CurrentLeader      LeaderIdAndEpoch
      LeaderId         int32
      LeaderEpoch      int32
NodeEndpoints          []NodeEndpoint
  NodeId               int32
  Host                 string
  Port                 int32
  Rack                 string         null=v0+  default=null
""",
)

DESCRIBE_SHARE_GROUP_OFFSETS = Api(
    key=90,
    name="DescribeShareGroupOffsets",
    valid="0-1",
    flexible="0+",
    request="""
Groups                 []DescribeShareGroupOffsetsRequestGroup
  GroupId              string
  Topics               []DescribeShareGroupOffsetsRequestTopic  null=v0+
    TopicName          string
    Partitions         []int32
""",
    response="""
ThrottleTimeMs         int32
Groups                 []DescribeShareGroupOffsetsResponseGroup
  GroupId              string
  Topics               []DescribeShareGroupOffsetsResponseTopic
    TopicName          string
    TopicId            uuid
    Partitions         []DescribeShareGroupOffsetsResponsePartition
      PartitionIndex   int32
      StartOffset      int64
      LeaderEpoch      int32
      Lag              int64    v1+   default=-1
      ErrorCode        int16
      ErrorMessage     string         null=v0+  default=null
  ErrorCode            int16
  ErrorMessage         string         null=v0+  default=null
""",
)

ALTER_SHARE_GROUP_OFFSETS = Api(
    key=91,
    name="AlterShareGroupOffsets",
    valid="0",
    flexible="0+",
    request="""
GroupId                string
Topics                 []AlterShareGroupOffsetsRequestTopic
  TopicName            string
  Partitions           []AlterShareGroupOffsetsRequestPartition
    PartitionIndex     int32
    StartOffset        int64
""",
    response="""
ThrottleTimeMs         int32
ErrorCode              int16
ErrorMessage           string         null=v0+  default=null
Responses              []AlterShareGroupOffsetsResponseTopic
  TopicName            string
  TopicId              uuid
  Partitions           []AlterShareGroupOffsetsResponsePartition
    PartitionIndex     int32
    ErrorCode          int16
    ErrorMessage       string         null=v0+  default=null
""",
)

DELETE_SHARE_GROUP_OFFSETS = Api(
    key=92,
    name="DeleteShareGroupOffsets",
    valid="0",
    flexible="0+",
    request="""
GroupId                string
Topics                 []DeleteShareGroupOffsetsRequestTopic
  TopicName            string
""",
    response="""
ThrottleTimeMs         int32
ErrorCode              int16
ErrorMessage           string         null=v0+  default=null
Responses              []DeleteShareGroupOffsetsResponseTopic
  TopicName            string
  TopicId              uuid
  ErrorCode            int16
  ErrorMessage         string         null=v0+  default=null
""",
)

APIS: list[Api] = [
    SHARE_GROUP_HEARTBEAT,
    SHARE_GROUP_DESCRIBE,
    SHARE_FETCH,
    SHARE_ACKNOWLEDGE,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
]

# --- __share_group_state records (Kafka's share coordinator) ---------------------------------------
# As in __consumer_offsets, the key "version" is the record-type prefix: 0 is a snapshot (the whole state
# of one share-partition), 1 an update (changes since the snapshot of the same SnapshotEpoch). A value
# starts with its own version (0). DeliveryState: 0 available, 2 acknowledged, 4 archived.

_STATE_BATCHES = """
StateBatches           []StateBatch
  FirstOffset          int64
  LastOffset           int64
  DeliveryState        int8
  DeliveryCount        int16
"""

SHARE_SNAPSHOT_KEY = Struct(
    name="ShareSnapshotKey",
    valid="0",
    flexible="none",
    fields="""
GroupId                string
TopicId                uuid
Partition              int32
""",
)

SHARE_SNAPSHOT_VALUE = Struct(
    name="ShareSnapshotValue",
    valid="0",
    flexible="0+",
    fields="""
SnapshotEpoch          uint16
StateEpoch             int32
LeaderEpoch            int32
StartOffset            int64"""
    + _STATE_BATCHES,
)

SHARE_UPDATE_KEY = Struct(
    name="ShareUpdateKey",
    valid="1",
    flexible="none",
    fields="""
GroupId                string
TopicId                uuid
Partition              int32
""",
)

SHARE_UPDATE_VALUE = Struct(
    name="ShareUpdateValue",
    valid="0",
    flexible="0+",
    fields="""
SnapshotEpoch          uint16
LeaderEpoch            int32
StartOffset            int64"""
    + _STATE_BATCHES,
)

# --- __consumer_offsets: a share group's existence (Kafka's group coordinator record type 11) -----------

SHARE_GROUP_METADATA_KEY = Struct(
    name="ShareGroupMetadataKey",
    valid="11",
    flexible="none",
    fields="""
GroupId                string
""",
)

SHARE_GROUP_METADATA_VALUE = Struct(
    name="ShareGroupMetadataValue",
    valid="0",
    flexible="0+",
    fields="""
Epoch                  int32
""",
)

STRUCTS: list[Struct] = [
    SHARE_SNAPSHOT_KEY,
    SHARE_SNAPSHOT_VALUE,
    SHARE_UPDATE_KEY,
    SHARE_UPDATE_VALUE,
    SHARE_GROUP_METADATA_KEY,
    SHARE_GROUP_METADATA_VALUE,
]
