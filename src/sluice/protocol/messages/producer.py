"""InitProducerId (22)."""

from sluice.protocol.schema import Api

# v6 (KIP-939 two-phase commit: Enable2Pc, KeepPreparedTxn, OngoingTxnProducer*) is still
# latestVersionUnstable in Kafka 4.3.1, so it is left out.
INIT_PRODUCER_ID = Api(
    key=22,
    name="InitProducerId",
    valid="0-5",
    flexible="2+",
    request="""
TransactionalId         string   null=v0+
TransactionTimeoutMs    int32
ProducerId              int64    v3+  default=-1
ProducerEpoch           int16    v3+  default=-1
""",
    response="""
ThrottleTimeMs          int32
ErrorCode               int16
ProducerId              int64    default=-1
ProducerEpoch           int16
""",
)

APIS: list[Api] = [INIT_PRODUCER_ID]
