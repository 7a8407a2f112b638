"""The table of every Kafka API key: the versions sluice serves (from the handler registry, which ApiVersions
answers from too) or why it does not serve it."""

from __future__ import annotations

import sluice.broker.handlers  # noqa: F401  (registers every handler)
from sluice.broker.api import HANDLERS
from sluice.protocol.messages import APIS_BY_KEY

_ZK = "ZooKeeper-era inter-broker API, gone in Kafka 4.0; a single node has no peers"
_KRAFT = "KRaft controller/inter-broker API; a single node is its own only voter"
_TXN = "transactions are not supported yet"
_SECURITY = (
    "delegation tokens (KIP-48) are not implemented; a Kafka broker without delegation.token.secret.key "
    "refuses them too (DELEGATION_TOKEN_AUTH_DISABLED)"
)
_SHARE = "share groups (KIP-932) are not supported"
_STREAMS = "streams groups (KIP-1071) are not supported"
_TELEMETRY = (
    "client telemetry (KIP-714) is not collected; Kafka too leaves these out of ApiVersions unless a metrics "
    "reporter takes client telemetry, and clients treat their absence as disabled"
)

# Every Kafka API key (Kafka 4.x), with why sluice does not serve it. An API with a handler is listed as
# served whatever this says, so a key served after a merge moves by itself.
KAFKA_APIS: dict[int, tuple[str, str]] = {
    4: ("LeaderAndIsr", _ZK),
    5: ("StopReplica", _ZK),
    6: ("UpdateMetadata", _ZK),
    7: ("ControlledShutdown", _ZK),
    17: ("SaslHandshake", _SECURITY),
    24: ("AddPartitionsToTxn", _TXN),
    25: ("AddOffsetsToTxn", _TXN),
    26: ("EndTxn", _TXN),
    27: ("WriteTxnMarkers", _TXN),
    28: ("TxnOffsetCommit", _TXN),
    29: ("DescribeAcls", _SECURITY),
    30: ("CreateAcls", _SECURITY),
    31: ("DeleteAcls", _SECURITY),
    36: ("SaslAuthenticate", _SECURITY),
    38: ("CreateDelegationToken", _SECURITY),
    39: ("RenewDelegationToken", _SECURITY),
    40: ("ExpireDelegationToken", _SECURITY),
    41: ("DescribeDelegationToken", _SECURITY),
    50: ("DescribeUserScramCredentials", _SECURITY),
    51: ("AlterUserScramCredentials", _SECURITY),
    52: ("Vote", _KRAFT),
    53: ("BeginQuorumEpoch", _KRAFT),
    54: ("EndQuorumEpoch", _KRAFT),
    56: ("AlterPartition", _KRAFT),
    58: ("Envelope", _KRAFT),
    59: ("FetchSnapshot", _KRAFT),
    62: ("BrokerRegistration", _KRAFT),
    63: ("BrokerHeartbeat", _KRAFT),
    64: ("UnregisterBroker", "there is no other broker to unregister"),
    65: ("DescribeTransactions", _TXN),
    66: ("ListTransactions", _TXN),
    67: ("AllocateProducerIds", _KRAFT),
    70: ("ControllerRegistration", _KRAFT),
    71: ("GetTelemetrySubscriptions", _TELEMETRY),
    72: ("PushTelemetry", _TELEMETRY),
    73: ("AssignReplicasToDirs", _KRAFT),
    76: ("ShareGroupHeartbeat", _SHARE),
    77: ("ShareGroupDescribe", _SHARE),
    78: ("ShareFetch", _SHARE),
    79: ("ShareAcknowledge", _SHARE),
    80: ("AddRaftVoter", "the quorum is this one node; voters cannot change"),
    81: ("RemoveRaftVoter", "the quorum is this one node; voters cannot change"),
    82: ("UpdateRaftVoter", _KRAFT),
    83: ("InitializeShareGroupState", _SHARE),
    84: ("ReadShareGroupState", _SHARE),
    85: ("WriteShareGroupState", _SHARE),
    86: ("DeleteShareGroupState", _SHARE),
    87: ("ReadShareGroupStateSummary", _SHARE),
    88: ("StreamsGroupHeartbeat", _STREAMS),
    89: ("StreamsGroupDescribe", _STREAMS),
    90: ("DescribeShareGroupOffsets", _SHARE),
    91: ("AlterShareGroupOffsets", _SHARE),
    92: ("DeleteShareGroupOffsets", _SHARE),
}


INTRO = """\
# Kafka APIs

Every API key Kafka defines, with the versions sluice serves or why it does not serve it. Written from the
broker's handler registry when the site is built; ApiVersions answers the same ranges. What the admin APIs
answer on one node, quotas, and Kafka's error texts: [Kafka compatibility](../guide/kafka-compatibility.md).
"""


def rows() -> list[tuple[int, str, str, str]]:
    """(key, name, versions served or "—", why not served) for every API key, in key order."""
    served = {key: (low, high) for key, low, high in HANDLERS.supported()}
    table = []
    for key in sorted(set(served) | set(KAFKA_APIS) | set(APIS_BY_KEY)):
        name = APIS_BY_KEY[key].name if key in APIS_BY_KEY else KAFKA_APIS[key][0]
        if key in served:
            low, high = served[key]
            table.append((key, name, f"{low}-{high}" if low != high else f"{low}", ""))
        else:
            reason = KAFKA_APIS.get(key, (name, "defined in sluice's messages but no handler yet"))[1]
            table.append((key, name, "—", reason))
    return table


def page() -> str:
    served = sum(1 for _, _, _, reason in rows() if not reason)
    lines = [
        INTRO,
        f"sluice serves {served} Kafka APIs.",
        "",
        "| Key | API | Versions served | Not served because |",
        "|----:|-----|-----------------|--------------------|",
        *(f"| {key} | {name} | {versions} | {reason} |" for key, name, versions, reason in rows()),
    ]
    return "\n".join(lines) + "\n"
