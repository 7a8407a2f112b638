"""Group membership APIs: coordinator lookup, the classic rebalance protocol and KIP-848 consumer groups.

Version ranges are the widest any Kafka release served (Kafka 4.0 dropped JoinGroup v0-1 and others, but
older clients still send them).
"""

from sluice.protocol.schema import Api

FIND_COORDINATOR = Api(
    key=10,
    name="FindCoordinator",
    valid="0-6",
    flexible="3+",
    request="""
Key                    string   v0-3
KeyType                int8     v1+
CoordinatorKeys        []string v4+
""",
    response="""
ThrottleTimeMs         int32    v1+
ErrorCode              int16    v0-3
ErrorMessage           string   v1-3  null=v1-3
NodeId                 int32    v0-3
Host                   string   v0-3
Port                   int32    v0-3
Coordinators           []Coordinator  v4+
  Key                  string   v4+
  NodeId               int32    v4+
  Host                 string   v4+
  Port                 int32    v4+
  ErrorCode            int16    v4+
  ErrorMessage         string   v4+   null=v4+
""",
)

JOIN_GROUP = Api(
    key=11,
    name="JoinGroup",
    valid="0-9",
    flexible="6+",
    request="""
GroupId                string
SessionTimeoutMs       int32
RebalanceTimeoutMs     int32    v1+   default=-1
MemberId               string
GroupInstanceId        string   v5+   null=v5+  default=null
ProtocolType           string
Protocols              []JoinGroupRequestProtocol
  Name                 string
  Metadata             bytes
Reason                 string   v8+   null=v8+  default=null
""",
    response="""
ThrottleTimeMs         int32    v2+
ErrorCode              int16
GenerationId           int32          default=-1
ProtocolType           string   v7+   null=v7+  default=null
ProtocolName           string         null=v7+
Leader                 string
SkipAssignment         bool     v9+   default=false
MemberId               string
Members                []JoinGroupResponseMember
  MemberId             string
  GroupInstanceId      string   v5+   null=v5+  default=null
  Metadata             bytes
""",
)

HEARTBEAT = Api(
    key=12,
    name="Heartbeat",
    valid="0-4",
    flexible="4+",
    request="""
GroupId                string
GenerationId           int32
MemberId               string
GroupInstanceId        string   v3+   null=v3+  default=null
""",
    response="""
ThrottleTimeMs         int32    v1+
ErrorCode              int16
""",
)

LEAVE_GROUP = Api(
    key=13,
    name="LeaveGroup",
    valid="0-5",
    flexible="4+",
    request="""
GroupId                string
MemberId               string   v0-2
Members                []MemberIdentity  v3+
  MemberId             string   v3+
  GroupInstanceId      string   v3+   null=v3+  default=null
  Reason               string   v5+   null=v5+  default=null
""",
    response="""
ThrottleTimeMs         int32    v1+
ErrorCode              int16
Members                []MemberResponse  v3+
  MemberId             string   v3+
  GroupInstanceId      string   v3+   null=v3+
  ErrorCode            int16    v3+
""",
)

SYNC_GROUP = Api(
    key=14,
    name="SyncGroup",
    valid="0-5",
    flexible="4+",
    request="""
GroupId                string
GenerationId           int32
MemberId               string
GroupInstanceId        string   v3+   null=v3+  default=null
ProtocolType           string   v5+   null=v5+  default=null
ProtocolName           string   v5+   null=v5+  default=null
Assignments            []SyncGroupRequestAssignment
  MemberId             string
  Assignment           bytes
""",
    response="""
ThrottleTimeMs         int32    v1+
ErrorCode              int16
ProtocolType           string   v5+   null=v5+  default=null
ProtocolName           string   v5+   null=v5+  default=null
Assignment             bytes
""",
)

DESCRIBE_GROUPS = Api(
    key=15,
    name="DescribeGroups",
    valid="0-6",
    flexible="5+",
    request="""
Groups                      []string
IncludeAuthorizedOperations bool     v3+
""",
    response="""
ThrottleTimeMs         int32    v1+
Groups                 []DescribedGroup
  ErrorCode            int16
  ErrorMessage         string   v6+   null=v6+  default=null
  GroupId              string
  GroupState           string
  ProtocolType         string
  ProtocolData         string
  Members              []DescribedGroupMember
    MemberId           string
    GroupInstanceId    string   v4+   null=v4+  default=null
    ClientId           string
    ClientHost         string
    MemberMetadata     bytes
    MemberAssignment   bytes
  AuthorizedOperations int32    v3+   default=-2147483648
""",
)

LIST_GROUPS = Api(
    key=16,
    name="ListGroups",
    valid="0-5",
    flexible="3+",
    request="""
StatesFilter           []string v4+
TypesFilter            []string v5+
""",
    response="""
ThrottleTimeMs         int32    v1+
ErrorCode              int16
Groups                 []ListedGroup
  GroupId              string
  ProtocolType         string
  GroupState           string   v4+
  GroupType            string   v5+
""",
)

DELETE_GROUPS = Api(
    key=42,
    name="DeleteGroups",
    valid="0-2",
    flexible="2+",
    request="""
GroupsNames            []string
""",
    response="""
ThrottleTimeMs         int32
Results                []DeletableGroupResult
  GroupId              string
  ErrorCode            int16
""",
)

CONSUMER_GROUP_HEARTBEAT = Api(
    key=68,
    name="ConsumerGroupHeartbeat",
    valid="0-1",
    flexible="0+",
    request="""
GroupId                string
MemberId               string
MemberEpoch            int32
InstanceId             string         null=v0+  default=null
RackId                 string         null=v0+  default=null
RebalanceTimeoutMs     int32          default=-1
SubscribedTopicNames   []string       null=v0+  default=null
SubscribedTopicRegex   string   v1+   null=v1+  default=null
ServerAssignor         string         null=v0+  default=null
TopicPartitions        []TopicPartitions  null=v0+  default=null
  TopicId              uuid
  Partitions           []int32
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

CONSUMER_GROUP_DESCRIBE = Api(
    key=69,
    name="ConsumerGroupDescribe",
    valid="0-1",
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
    InstanceId         string         null=v0+  default=null
    RackId             string         null=v0+  default=null
    MemberEpoch        int32
    ClientId           string
    ClientHost         string
    SubscribedTopicNames []string
    SubscribedTopicRegex string       null=v0+  default=null
    Assignment         Assignment
      TopicPartitions  []TopicPartitions
        TopicId        uuid
        TopicName      string
        Partitions     []int32
    TargetAssignment   Assignment
    MemberType         int8     v1+   default=-1
  AuthorizedOperations int32          default=-2147483648
""",
)

APIS: list[Api] = [
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    DESCRIBE_GROUPS,
    LIST_GROUPS,
    DELETE_GROUPS,
    CONSUMER_GROUP_HEARTBEAT,
    CONSUMER_GROUP_DESCRIBE,
]
