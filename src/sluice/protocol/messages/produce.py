"""Produce (API key 0)."""

from sluice.protocol.schema import Api

# Kafka 4.0 dropped v0-2 (KIP-896) but librdkafka still needs them advertised
# (KAFKA-18659), and older clients still send them, so the range starts at 0.
PRODUCE = Api(
    key=0,
    name="Produce",
    valid="0-13",
    flexible="9+",
    request="""
TransactionalId         string   v3+  null=v3+  default=null
Acks                    int16
TimeoutMs               int32
TopicData               []TopicProduceData
  Name                  string   v0-12
  TopicId               uuid     v13+
  PartitionData         []PartitionProduceData
    Index               int32
    Records             records  null=v0+
""",
    response="""
Responses               []TopicProduceResponse
  Name                  string   v0-12
  TopicId               uuid     v13+
  PartitionResponses    []PartitionProduceResponse
    Index               int32
    ErrorCode           int16
    BaseOffset          int64
    LogAppendTimeMs     int64    v2+  default=-1
    LogStartOffset      int64    v5+  default=-1
    RecordErrors        []BatchIndexAndErrorMessage  v8+
      BatchIndex        int32    v8+
      BatchIndexErrorMessage  string  v8+  null=v8+  default=null
    ErrorMessage        string   v8+  null=v8+  default=null
    CurrentLeader       LeaderIdAndEpoch  v10+  tag=0
      LeaderId          int32    v10+  default=-1
      LeaderEpoch       int32    v10+  default=-1
ThrottleTimeMs          int32    v1+
NodeEndpoints           []NodeEndpoint  v10+  tag=0
  NodeId                int32    v10+
  Host                  string   v10+
  Port                  int32    v10+
  Rack                  string   v10+  null=v10+  default=null
""",
)

APIS: list[Api] = [PRODUCE]
