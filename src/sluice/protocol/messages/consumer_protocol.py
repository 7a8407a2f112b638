"""Payloads that travel inside other messages or records rather than as API calls.

- The consumer protocol ("consumer" protocol type): the subscription a member puts in JoinGroup's protocol
  metadata and the assignment the leader hands out through SyncGroup. Both are prefixed on the wire by an
  int16 version; decoders must accept versions newer than they know by reading them with the newest schema.
- The `__consumer_offsets` records: every record key starts with an int16 that selects the key schema
  (0 or 1: an offset commit, 2: group metadata) and every value with an int16 value version.
"""

from sluice.protocol.schema import Struct

CONSUMER_PROTOCOL_SUBSCRIPTION = Struct(
    name="ConsumerProtocolSubscription",
    valid="0-3",
    flexible="none",
    fields="""
Topics              []string
UserData            bytes          null=v0+  default=null
OwnedPartitions     []TopicPartition  v1+
  Topic             string   v1+
  Partitions        []int32  v1+
GenerationId        int32    v2+   default=-1
RackId              string   v3+   null=v3+  default=null
""",
)

CONSUMER_PROTOCOL_ASSIGNMENT = Struct(
    name="ConsumerProtocolAssignment",
    valid="0-3",
    flexible="none",
    fields="""
AssignedPartitions  []TopicPartition
  Topic             string
  Partitions        []int32
UserData            bytes          null=v0+  default=null
""",
)

# The key "version" is the record-type prefix itself, as in Kafka 3.x's core schemas (Kafka 4's
# group-coordinator module calls the prefix an apiKey and numbers the key schema from 0 instead).
OFFSET_COMMIT_KEY = Struct(
    name="OffsetCommitKey",
    valid="0-1",
    flexible="none",
    fields="""
group               string
topic               string
partition           int32
""",
)

OFFSET_COMMIT_VALUE = Struct(
    name="OffsetCommitValue",
    valid="0-4",
    flexible="4+",
    fields="""
offset              int64
leaderEpoch         int32    v3+   default=-1
metadata            string
commitTimestamp     int64
expireTimestamp     int64    v1    default=-1
""",
)

GROUP_METADATA_KEY = Struct(
    name="GroupMetadataKey",
    valid="2",
    flexible="none",
    fields="""
group               string
""",
)

GROUP_METADATA_VALUE = Struct(
    name="GroupMetadataValue",
    valid="0-4",
    flexible="4+",
    fields="""
protocolType        string
generation          int32
protocol            string         null=v0+
leader              string         null=v0+
currentStateTimestamp int64  v2+   default=-1
members             []MemberMetadata
  memberId          string
  groupInstanceId   string   v3+   null=v3+  default=null
  clientId          string
  clientHost        string
  rebalanceTimeout  int32    v1+
  sessionTimeout    int32
  subscription      bytes
  assignment        bytes
""",
)

STRUCTS: list[Struct] = [
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    CONSUMER_PROTOCOL_ASSIGNMENT,
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
    GROUP_METADATA_KEY,
    GROUP_METADATA_VALUE,
]
