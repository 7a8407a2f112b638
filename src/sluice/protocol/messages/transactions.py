"""Transaction APIs (KIP-98, KIP-447, KIP-664, KIP-890): AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26), WriteTxnMarkers (27, broker to broker), TxnOffsetCommit (28), DescribeTransactions (65) and
ListTransactions (66).

AddPartitionsToTxn v4+ is the batched form brokers use to verify (KIP-890); clients send v0-3.
EndTxn v5 and TxnOffsetCommit v5 belong to transaction version 2 (epoch bump per transaction); clients
only send them when the broker finalizes the transaction.version feature, which sluice does not.

Also the `__transaction_state` records (`STRUCTS`), in Kafka's layout (TransactionLogKey/Value): each key and
value is preceded by a big-endian int16 version the definitions leave out. Tags 0-2 of the value are Kafka's;
sluice keeps what its coordinator needs beyond Kafka's fields in tags 1000+, which a Kafka reader skips.
"""

from sluice.protocol.schema import Api, Struct

ADD_PARTITIONS_TO_TXN = Api(
    key=24,
    name="AddPartitionsToTxn",
    valid="0-5",
    flexible="3+",
    request="""
Transactions                []AddPartitionsToTxnTransaction  v4+
  TransactionalId           string   v4+
  ProducerId                int64    v4+
  ProducerEpoch             int16    v4+
  VerifyOnly                bool     v4+  default=false
  Topics                    []AddPartitionsToTxnTopic  v4+
    Name                    string
    Partitions              []int32
V3AndBelowTransactionalId   string   v0-3
V3AndBelowProducerId        int64    v0-3
V3AndBelowProducerEpoch     int16    v0-3
V3AndBelowTopics            []AddPartitionsToTxnTopic  v0-3
""",
    response="""
ThrottleTimeMs              int32
ErrorCode                   int16    v4+
ResultsByTransaction        []AddPartitionsToTxnResult  v4+
  TransactionalId           string   v4+
  TopicResults              []AddPartitionsToTxnTopicResult  v4+
    Name                    string
    ResultsByPartition      []AddPartitionsToTxnPartitionResult
      PartitionIndex        int32
      PartitionErrorCode    int16
ResultsByTopicV3AndBelow    []AddPartitionsToTxnTopicResult  v0-3
""",
)

ADD_OFFSETS_TO_TXN = Api(
    key=25,
    name="AddOffsetsToTxn",
    valid="0-4",
    flexible="3+",
    request="""
TransactionalId             string
ProducerId                  int64
ProducerEpoch               int16
GroupId                     string
""",
    response="""
ThrottleTimeMs              int32
ErrorCode                   int16
""",
)

END_TXN = Api(
    key=26,
    name="EndTxn",
    valid="0-5",
    flexible="3+",
    request="""
TransactionalId             string
ProducerId                  int64
ProducerEpoch               int16
Committed                   bool
""",
    response="""
ThrottleTimeMs              int32
ErrorCode                   int16
ProducerId                  int64    v5+  default=-1
ProducerEpoch               int16    v5+  default=-1
""",
)

WRITE_TXN_MARKERS = Api(
    key=27,
    name="WriteTxnMarkers",
    valid="0-2",
    flexible="1+",
    request="""
Markers                     []WritableTxnMarker
  ProducerId                int64
  ProducerEpoch             int16
  TransactionResult         bool
  Topics                    []WritableTxnMarkerTopic
    Name                    string
    PartitionIndexes        []int32
  CoordinatorEpoch          int32
  TransactionVersion        int8     v2+
""",
    response="""
Markers                     []WritableTxnMarkerResult
  ProducerId                int64
  Topics                    []WritableTxnMarkerTopicResult
    Name                    string
    Partitions              []WritableTxnMarkerPartitionResult
      PartitionIndex        int32
      ErrorCode             int16
""",
)

TXN_OFFSET_COMMIT = Api(
    key=28,
    name="TxnOffsetCommit",
    valid="0-5",
    flexible="3+",
    request="""
TransactionalId             string
GroupId                     string
ProducerId                  int64
ProducerEpoch               int16
GenerationId                int32    v3+  default=-1
MemberId                    string   v3+  default=""
GroupInstanceId             string   v3+  null=v3+  default=null
Topics                      []TxnOffsetCommitRequestTopic
  Name                      string
  Partitions                []TxnOffsetCommitRequestPartition
    PartitionIndex          int32
    CommittedOffset         int64
    CommittedLeaderEpoch    int32    v2+  default=-1
    CommittedMetadata       string   null=v0+
""",
    response="""
ThrottleTimeMs              int32
Topics                      []TxnOffsetCommitResponseTopic
  Name                      string
  Partitions                []TxnOffsetCommitResponsePartition
    PartitionIndex          int32
    ErrorCode               int16
""",
)

DESCRIBE_TRANSACTIONS = Api(
    key=65,
    name="DescribeTransactions",
    valid="0",
    flexible="0+",
    request="""
TransactionalIds            []string
""",
    response="""
ThrottleTimeMs              int32
TransactionStates           []TransactionState
  ErrorCode                 int16
  TransactionalId           string
  TransactionState          string
  TransactionTimeoutMs      int32
  TransactionStartTimeMs    int64
  ProducerId                int64
  ProducerEpoch             int16
  Topics                    []TopicData
    Topic                   string
    Partitions              []int32
""",
)

LIST_TRANSACTIONS = Api(
    key=66,
    name="ListTransactions",
    valid="0-2",
    flexible="0+",
    request="""
StateFilters                []string
ProducerIdFilters           []int64
DurationFilter              int64    v1+  default=-1
TransactionalIdPattern      string   v2+  null=v2+  default=null
""",
    response="""
ThrottleTimeMs              int32
ErrorCode                   int16
UnknownStateFilters         []string
TransactionStates           []TransactionState
  TransactionalId           string
  ProducerId                int64
  TransactionState          string
""",
)

APIS: list[Api] = [
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    WRITE_TXN_MARKERS,
    TXN_OFFSET_COMMIT,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
]


TRANSACTION_LOG_KEY = Struct(
    name="TransactionLogKey",
    valid="0",
    flexible="none",
    fields="""
TransactionalId             string
""",
)

TRANSACTION_LOG_VALUE = Struct(
    name="TransactionLogValue",
    valid="0-1",
    flexible="1+",
    fields="""
ProducerId                  int64
PreviousProducerId          int64    v1+  tag=0  default=-1
NextProducerId              int64    v1+  tag=1  default=-1
ProducerEpoch               int16
TransactionTimeoutMs        int32
TransactionStatus           int8
TransactionPartitions       []PartitionsSchema  null=v0+
  Topic                     string
  PartitionIds              []int32
TransactionLastUpdateTimestampMs  int64
TransactionStartTimestampMs       int64
ClientTransactionVersion    int16    v1+  tag=2  default=0
PreviousProducerEpoch       int16    v1+  tag=1000  default=-1
OffsetGroups                []string  v1+  tag=1001
PendingOffsets              []PendingOffset  v1+  tag=1002
  GroupId                   string
  Topic                     string
  Partition                 int32
  Offset                    int64
  LeaderEpoch               int32
  Metadata                  string
""",
)

STRUCTS: list[Struct] = [TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE]
