"""Consumer-group rebalance latency, sluice vs Tansu side by side.

    .venv/bin/python bench/group_bench.py                 # 5 alternating rounds
    .venv/bin/python bench/group_bench.py --rounds 3 --json-out /tmp/group-bench.json

Per round and broker, on a fresh topic and group:
  join    time from subscribing 4 confluent-kafka consumers until each holds a share of the partitions
          and together they hold all of them;
  leave   time from one member's close() (a clean LeaveGroup), at a random point of the heartbeat cycle,
          until the other 3 hold every partition. The survivors learn of the rebalance from their next
          heartbeat, so half a heartbeat interval (250 ms here) is the floor any broker can reach.

sluice runs as `sluice.testing.BrokerProcess` (durable data dir) with its default settings, and once more
with `group_initial_rebalance_delay_ms: 0` (Kafka's group.initial.rebalance.delay.ms, which holds a new
group's first rebalance back so members starting together land in one generation; Tansu has no such delay).
Tansu runs with its in-memory engine. The three alternate within each round, so they share whatever else
the machine is doing; the figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import libversion as rdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import TansuBroker, median, ratio

from sluice.testing import BrokerProcess

MEMBERS = 4
PARTITIONS = 8
# The same client settings against every broker. The heartbeat interval bounds how fast members learn
# that a rebalance started, so it dominates the leave figure; 6 s is sluice's (and Kafka's) minimum session.
CLIENT_CONFIG = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
                 "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"}
TIMEOUT_S = 60.0


class BenchMember:
    """A confluent-kafka consumer polling in its own thread; `held` follows its rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                                  **CLIENT_CONFIG})
        self.topic = topic
        self.held: frozenset[int] = frozenset()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.held = frozenset(tp.partition for tp in partitions)

    def _on_revoke(self, _consumer: Any, _partitions: list[TopicPartition]) -> None:
        self.held = frozenset()

    def _run(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        while not self.stop_event.is_set():
            self.consumer.poll(0.02)
        self.consumer.close()

    def start(self) -> BenchMember:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop_event.set()
        self.thread.join(TIMEOUT_S)


def wait_until(condition: Callable[[], bool], what: str) -> float:
    """Seconds until `condition()` holds, polled every millisecond."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > TIMEOUT_S:
            raise TimeoutError(f"{what} did not happen within {TIMEOUT_S}s")
        time.sleep(0.001)
    return time.perf_counter() - started


def share_everything(members: list[BenchMember]) -> bool:
    holdings = [m.held for m in members]
    return all(holdings) and sorted(p for h in holdings for p in h) == list(range(PARTITIONS))


def measure(bootstrap: str, round_no: int, label: str, rng: random.Random) -> dict[str, float]:
    topic = f"group-bench-{label}-{round_no}-{time.time_ns()}"
    group = f"{topic}-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    # The members find the topic in metadata at once; otherwise the first join races topic creation.
    wait_until(lambda: topic in admin.list_topics(timeout=10).topics, "topic metadata")
    members: list[BenchMember] = []
    try:
        started = time.perf_counter()
        members = [BenchMember(bootstrap, group, topic, f"m{i}").start() for i in range(MEMBERS)]
        wait_until(lambda: share_everything(members), "the first assignment")
        join_s = time.perf_counter() - started
        leaving, staying = members[0], members[1:]
        # Leave at a random point of the heartbeat cycle: right after the join every member's next
        # heartbeat is one full interval away, which would make the leave figure that interval exactly.
        time.sleep(rng.uniform(2, 3) * CLIENT_CONFIG["heartbeat.interval.ms"] / 1000)
        started = time.perf_counter()
        leaving.close()
        wait_until(lambda: share_everything(staying), "the group settling after a leave")
        leave_s = time.perf_counter() - started
    finally:
        for member in members:
            member.close()
    return {"join_s": join_s, "leave_s": leave_s}


@contextmanager
def sluice_broker(data_root: Path, *, initial_delay_ms: int | None) -> Iterator[str]:
    config = None
    if initial_delay_ms is not None:
        config = data_root / f"delay-{initial_delay_ms}.yaml"
        config.write_text(f"group_initial_rebalance_delay_ms: {initial_delay_ms}\n")
    proc = BrokerProcess(data_root / f"data-{initial_delay_ms}", config=config).start()
    try:
        yield proc.bootstrap
    finally:
        proc.stop()


@contextmanager
def tansu_broker() -> Iterator[str]:
    with TansuBroker() as broker:
        yield broker.bootstrap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--seed", type=int, default=1, help="for the moment of the leave")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    results: dict[str, list[dict[str, float]]] = {"sluice": [], "sluice-delay0": [], "tansu": []}
    with tempfile.TemporaryDirectory(prefix="group-bench-") as tmp, \
            sluice_broker(Path(tmp), initial_delay_ms=None) as sluice_default, \
            sluice_broker(Path(tmp), initial_delay_ms=0) as sluice_no_delay, \
            tansu_broker() as tansu:
        brokers = {"sluice": sluice_default, "sluice-delay0": sluice_no_delay, "tansu": tansu}
        for round_no in range(args.rounds):
            for label, bootstrap in brokers.items():
                figures = measure(bootstrap, round_no, label, rng)
                results[label].append(figures)
                print(f"round {round_no + 1}: {label:14} join {figures['join_s']:.3f} s  "
                      f"leave {figures['leave_s']:.3f} s", flush=True)

    summary = {label: {key: median(r[key] for r in runs) for key in ("join_s", "leave_s")}
               for label, runs in results.items()}
    print(f"\nmedians over {args.rounds} rounds ({MEMBERS} confluent-kafka consumers, librdkafka "
          f"{rdkafka_version()[0]}, {PARTITIONS} partitions, {CLIENT_CONFIG['heartbeat.interval.ms']} ms heartbeats)")
    print(f"{'':16}{'join (s)':>10}{'leave (s)':>11}")
    for label, figures in summary.items():
        print(f"{label:16}{figures['join_s']:>10.3f}{figures['leave_s']:>11.3f}")
    for label in ("sluice", "sluice-delay0"):
        join_ratio = ratio(summary[label]["join_s"], summary["tansu"]["join_s"])
        leave_ratio = ratio(summary[label]["leave_s"], summary["tansu"]["leave_s"])
        print(f"{label}/tansu: join x{join_ratio:.2f}, leave x{leave_ratio:.2f}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"rounds": results, "medians": summary,
                                             "client_config": CLIENT_CONFIG}, indent=2))


if __name__ == "__main__":
    main()
