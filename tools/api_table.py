"""Print or write README.md's table of the Kafka APIs sluice serves (from the handler registry, so it cannot
drift) and the ones it does not serve, with the reason.

    python tools/api_table.py           # print the table
    python tools/api_table.py --write   # rewrite it in README.md between the api-table markers
    python tools/api_table.py --check   # exit 1 when README.md is out of date (tests/compat runs this)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import sluice.broker.handlers  # noqa: E402,F401  (registers every handler)
from sluice.broker.api import HANDLERS  # noqa: E402
from sluice.protocol.messages import APIS_BY_KEY  # noqa: E402

README = ROOT / "README.md"
START, END = "<!-- api-table:start -->", "<!-- api-table:end -->"

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


def table() -> str:
    served = {key: (low, high) for key, low, high in HANDLERS.supported()}
    lines = [
        f"sluice serves {len(served)} Kafka APIs. Generated from the handler registry by `python tools/api_table.py"
        " --write`; ApiVersions answers the same ranges.",
        "",
        "| Key | API | Versions served | Not served because |",
        "|----:|-----|-----------------|--------------------|",
    ]
    for key in sorted(set(served) | set(KAFKA_APIS) | set(APIS_BY_KEY)):
        name = APIS_BY_KEY[key].name if key in APIS_BY_KEY else KAFKA_APIS[key][0]
        if key in served:
            low, high = served[key]
            lines.append(
                f"| {key} | {name} | {low}-{high} | |" if low != high else f"| {key} | {name} | {low} | |"
            )
        else:
            reason = KAFKA_APIS.get(key, (name, "defined in sluice's messages but no handler yet"))[1]
            lines.append(f"| {key} | {name} | — | {reason} |")
    return "\n".join(lines) + "\n"


def render(readme: str) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"{README} has no {START} ... {END} markers")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}{END}{tail}"


def main(argv: list[str]) -> int:
    if "--write" in argv:
        README.write_text(render(README.read_text()))
        return 0
    if "--check" in argv:
        current = README.read_text()
        if render(current) != current:
            print(
                "README.md's API table is out of date: run python tools/api_table.py --write", file=sys.stderr
            )
            return 1
        return 0
    sys.stdout.write(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
