"""Topic and config administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37),
DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44), DeleteRecords (21)."""

from sluice.protocol.schema import Api

# Kafka 4.0 dropped v0-1 (KIP-896). "timeoutMs", "validateOnly" and "CreateableTopicConfig"
# are Kafka's own spellings, kept on purpose.
CREATE_TOPICS = Api(
    key=19,
    name="CreateTopics",
    valid="0-7",
    flexible="5+",
    request="""
Topics                  []CreatableTopic
  Name                  string
  NumPartitions         int32
  ReplicationFactor     int16
  Assignments           []CreatableReplicaAssignment
    PartitionIndex      int32
    BrokerIds           []int32
  Configs               []CreateableTopicConfig
    Name                string
    Value               string   null=v0+
timeoutMs               int32    default=60000
validateOnly            bool     v1+  default=false
""",
    # ErrorMessage is nullable from v0 although it only exists from v1: Kafka's own spelling.
    response="""
ThrottleTimeMs          int32    v2+
Topics                  []CreatableTopicResult
  Name                  string
  TopicId               uuid     v7+
  ErrorCode             int16
  ErrorMessage          string   v1+  null=v0+
  TopicConfigErrorCode  int16    v5+  tag=0
  NumPartitions         int32    v5+  default=-1
  ReplicationFactor     int16    v5+  default=-1
  Configs               []CreatableTopicConfigs  v5+  null=v5+
    Name                string   v5+
    Value               string   v5+  null=v5+
    ReadOnly            bool     v5+
    ConfigSource        int8     v5+  default=-1
    IsSensitive         bool     v5+
""",
)

# Kafka 4.0 dropped v0 (KIP-896).
DELETE_TOPICS = Api(
    key=20,
    name="DeleteTopics",
    valid="0-6",
    flexible="4+",
    request="""
Topics                  []DeleteTopicState  v6+
  Name                  string   v6+  null=v6+  default=null
  TopicId               uuid     v6+
TopicNames              []string  v0-5
TimeoutMs               int32
""",
    response="""
ThrottleTimeMs          int32    v1+
Responses               []DeletableTopicResult
  Name                  string   null=v6+
  TopicId               uuid     v6+
  ErrorCode             int16
  ErrorMessage          string   v5+  null=v5+  default=null
""",
)

CREATE_PARTITIONS = Api(
    key=37,
    name="CreatePartitions",
    valid="0-3",
    flexible="2+",
    request="""
Topics                  []CreatePartitionsTopic
  Name                  string
  Count                 int32
  Assignments           []CreatePartitionsAssignment  null=v0+
    BrokerIds           []int32
TimeoutMs               int32
ValidateOnly            bool
""",
    response="""
ThrottleTimeMs          int32
Results                 []CreatePartitionsTopicResult
  Name                  string
  ErrorCode             int16
  ErrorMessage          string   null=v0+  default=null
""",
)

# Kafka 4.0 dropped v0 (KIP-896); v0 alone has IsDefault.
DESCRIBE_CONFIGS = Api(
    key=32,
    name="DescribeConfigs",
    valid="0-4",
    flexible="4+",
    request="""
Resources               []DescribeConfigsResource
  ResourceType          int8
  ResourceName          string
  ConfigurationKeys     []string  null=v0+
IncludeSynonyms         bool     v1+  default=false
IncludeDocumentation    bool     v3+  default=false
""",
    response="""
ThrottleTimeMs          int32
Results                 []DescribeConfigsResult
  ErrorCode             int16
  ErrorMessage          string   null=v0+
  ResourceType          int8
  ResourceName          string
  Configs               []DescribeConfigsResourceResult
    Name                string
    Value               string   null=v0+
    ReadOnly            bool
    IsDefault           bool     v0
    ConfigSource        int8     v1+  default=-1
    IsSensitive         bool
    Synonyms            []DescribeConfigsSynonym  v1+
      Name              string   v1+
      Value             string   v1+  null=v0+
      Source            int8     v1+
    ConfigType          int8     v3+  default=0
    Documentation       string   v3+  null=v0+
""",
)

ALTER_CONFIGS = Api(
    key=33,
    name="AlterConfigs",
    valid="0-2",
    flexible="2+",
    request="""
Resources               []AlterConfigsResource
  ResourceType          int8
  ResourceName          string
  Configs               []AlterableConfig
    Name                string
    Value               string   null=v0+
ValidateOnly            bool
""",
    response="""
ThrottleTimeMs          int32
Responses               []AlterConfigsResourceResponse
  ErrorCode             int16
  ErrorMessage          string   null=v0+
  ResourceType          int8
  ResourceName          string
""",
)

INCREMENTAL_ALTER_CONFIGS = Api(
    key=44,
    name="IncrementalAlterConfigs",
    valid="0-1",
    flexible="1+",
    request="""
Resources               []AlterConfigsResource
  ResourceType          int8
  ResourceName          string
  Configs               []AlterableConfig
    Name                string
    ConfigOperation     int8
    Value               string   null=v0+
ValidateOnly            bool
""",
    response="""
ThrottleTimeMs          int32
Responses               []AlterConfigsResourceResponse
  ErrorCode             int16
  ErrorMessage          string   null=v0+
  ResourceType          int8
  ResourceName          string
""",
)

DELETE_RECORDS = Api(
    key=21,
    name="DeleteRecords",
    valid="0-2",
    flexible="2+",
    request="""
Topics                  []DeleteRecordsTopic
  Name                  string
  Partitions            []DeleteRecordsPartition
    PartitionIndex      int32
    Offset              int64
TimeoutMs               int32
""",
    response="""
ThrottleTimeMs          int32
Topics                  []DeleteRecordsTopicResult
  Name                  string
  Partitions            []DeleteRecordsPartitionResult
    PartitionIndex      int32
    LowWatermark        int64
    ErrorCode           int16
""",
)

# KIP-1142 (Kafka 4.1): v0 was ListClientMetricsResources (client metrics subscriptions only).
LIST_CONFIG_RESOURCES = Api(
    key=74,
    name="ListConfigResources",
    valid="0-1",
    flexible="0+",
    request="""
ResourceTypes           []int8   v1+
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ConfigResources         []ConfigResource
  ResourceName          string
  ResourceType          int8     v1+  default=16
""",
)

APIS: list[Api] = [
    CREATE_TOPICS,
    DELETE_TOPICS,
    CREATE_PARTITIONS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    DELETE_RECORDS,
    LIST_CONFIG_RESOURCES,
]
