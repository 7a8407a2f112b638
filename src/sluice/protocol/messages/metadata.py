"""ApiVersions (18), Metadata (3) and DescribeCluster (60)."""

from sluice.protocol.schema import Api

API_VERSIONS = Api(
    key=18,
    name="ApiVersions",
    valid="0-4",
    flexible="3+",
    request="""
ClientSoftwareName      string   v3+
ClientSoftwareVersion   string   v3+
""",
    response="""
ErrorCode               int16
ApiKeys                 []ApiVersion
  ApiKey                int16
  MinVersion            int16
  MaxVersion            int16
ThrottleTimeMs          int32    v1+
SupportedFeatures       []SupportedFeatureKey  v3+  tag=0
  Name                  string   v3+
  MinVersion            int16    v3+
  MaxVersion            int16    v3+
FinalizedFeaturesEpoch  int64    v3+  tag=1  default=-1
FinalizedFeatures       []FinalizedFeatureKey  v3+  tag=2
  Name                  string   v3+
  MaxVersionLevel       int16    v3+
  MinVersionLevel       int16    v3+
ZkMigrationReady        bool     v3+  tag=3  default=false
""",
)

METADATA = Api(
    key=3,
    name="Metadata",
    valid="0-13",
    flexible="9+",
    # v0: an empty Topics array means all topics; v1+: null means all topics.
    request="""
Topics                  []MetadataRequestTopic  null=v1+
  TopicId               uuid     v10+
  Name                  string   null=v10+
AllowAutoTopicCreation  bool     v4+  default=true
IncludeClusterAuthorizedOperations  bool  v8-10
IncludeTopicAuthorizedOperations    bool  v8+
""",
    response="""
ThrottleTimeMs          int32    v3+
Brokers                 []MetadataResponseBroker
  NodeId                int32
  Host                  string
  Port                  int32
  Rack                  string   v1+  null=v1+  default=null
ClusterId               string   v2+  null=v2+  default=null
ControllerId            int32    v1+  default=-1
Topics                  []MetadataResponseTopic
  ErrorCode             int16
  Name                  string   null=v12+
  TopicId               uuid     v10+
  IsInternal            bool     v1+  default=false
  Partitions            []MetadataResponsePartition
    ErrorCode           int16
    PartitionIndex      int32
    LeaderId            int32
    LeaderEpoch         int32    v7+  default=-1
    ReplicaNodes        []int32
    IsrNodes            []int32
    OfflineReplicas     []int32  v5+
  TopicAuthorizedOperations  int32  v8+  default=-2147483648
ClusterAuthorizedOperations  int32  v8-10  default=-2147483648
ErrorCode               int16    v13+
""",
)

DESCRIBE_CLUSTER = Api(
    key=60,
    name="DescribeCluster",
    valid="0-2",
    flexible="0+",
    request="""
IncludeClusterAuthorizedOperations  bool
EndpointType            int8     v1+  default=1
IncludeFencedBrokers    bool     v2+  default=false
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ErrorMessage            string   null=v0+  default=null
EndpointType            int8     v1+  default=1
ClusterId               string
ControllerId            int32    default=-1
Brokers                 []DescribeClusterBroker
  BrokerId              int32
  Host                  string
  Port                  int32
  Rack                  string   null=v0+  default=null
  IsFenced              bool     v2+  default=false
ClusterAuthorizedOperations  int32  default=-2147483648
""",
)

APIS: list[Api] = [API_VERSIONS, METADATA, DESCRIBE_CLUSTER]
