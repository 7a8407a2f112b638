"""InitProducerId (22)."""

from sluice.protocol.schema import Api

# v6 is KIP-939 (two-phase commit): Enable2Pc and KeepPreparedTxn in, OngoingTxnProducer* out. It is still
# latestVersionUnstable in Kafka 4.3.1, so released clients do not pick it; it is served so that a client
# asking for either flag hears a clear error code rather than a closed connection.
INIT_PRODUCER_ID = Api(
    key=22,
    name="InitProducerId",
    valid="0-6",
    flexible="2+",
    request="""
TransactionalId         string   null=v0+
TransactionTimeoutMs    int32
ProducerId              int64    v3+  default=-1
ProducerEpoch           int16    v3+  default=-1
Enable2Pc               bool     v6+  default=false
KeepPreparedTxn         bool     v6+  default=false
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ProducerId              int64    default=-1
ProducerEpoch           int16
OngoingTxnProducerId    int64    v6+  default=-1
OngoingTxnProducerEpoch int16    v6+  default=-1
""",
)

APIS: list[Api] = [INIT_PRODUCER_ID]
