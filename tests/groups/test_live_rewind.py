"""`sluice groups reset-offsets --live`: running confluent-kafka consumers (classic eager and cooperative,
and KIP-848) re-read exactly from the new offsets, without being stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from group_helpers import RawMember, committed_offsets, create_topic, fast_config, produce, wait_for

from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

PER_PARTITION = 20
TIMEOUT = 60.0
REREAD_WITHIN_S = 3.0


def sluice(*args: str) -> subprocess.CompletedProcess[str]:
    # Wide enough that rich never wraps a message the assertions look for.
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run([sys.executable, "-m", "sluice", *args], capture_output=True, text=True, timeout=120,
                          env=env)


class PollingMember:
    """A confluent-kafka consumer polling in its own thread, auto-committing every 100 ms, recording every
    (partition, offset) it is handed in order."""

    def __init__(self, bootstrap: str, group: str, topic: str, config: dict[str, Any]) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": True, "auto.commit.interval.ms": 100, **config,
        })
        self.consumer.subscribe([topic])
        self.seen: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    with self.lock:
                        self.seen.append((msg.partition(), msg.offset()))
        finally:
            self.consumer.close()
            self.closed.set()

    def mark(self) -> int:
        with self.lock:
            return len(self.seen)

    def since(self, mark: int) -> list[tuple[int, int]]:
        with self.lock:
            return self.seen[mark:]

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


CLASSIC = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300}
PROTOCOLS = {
    "classic-eager-range": {**CLASSIC, "partition.assignment.strategy": "range"},
    "classic-cooperative-sticky": {**CLASSIC, "partition.assignment.strategy": "cooperative-sticky"},
    "kip848-consumer": {"group.protocol": "consumer"},
}


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_live_rewind_makes_polling_members_reread_from_the_new_offsets(
    admin_broker: BrokerProcess, topic_name: str, group_name: str, protocol: str, tmp_path: Path
) -> None:
    bootstrap = admin_broker.bootstrap
    assert admin_broker.admin_url is not None
    admin = admin_broker.admin_url.removeprefix("http://")
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 2, PER_PARTITION)
    members = [PollingMember(bootstrap, group_name, topic_name, PROTOCOLS[protocol]) for _ in range(2)]
    try:
        def everything_read_and_committed() -> bool:
            seen = {key for m in members for key in m.since(0)}
            return len(seen) == 2 * PER_PARTITION and committed_offsets(bootstrap, group_name) == {
                (topic_name, 0): PER_PARTITION, (topic_name, 1): PER_PARTITION}

        wait_for(everything_read_and_committed, TIMEOUT, "the group to read and commit everything")
        marks = [m.mark() for m in members]
        # Without --live a running group is refused, as before.
        refused = sluice("groups", "reset-offsets", group_name, "-b", bootstrap, "--admin", admin,
                         "--topic", f"{topic_name}:0", "--to-offset", "5")
        assert refused.returncode == 1 and "inactive" in refused.stderr
        plan = tmp_path / "plan.csv"
        plan.write_text(f"{topic_name},0,5\n{topic_name},1,-3\n")
        done = sluice("groups", "reset-offsets", group_name, "-b", bootstrap, "--admin", admin,
                      "--from-file", str(plan), "--live", "--execute", "--json")
        assert done.returncode == 0, done.stderr
        rows = {r["partition"]: r for r in json.loads(done.stdout)["partitions"]}
        assert (rows[0]["requested_offset"], rows[0]["new_offset"]) == (5, 5)
        assert (rows[1]["requested_offset"], rows[1]["new_offset"]) == (-3, 0)  # clamped to the log start

        def reread() -> dict[int, list[int]]:
            by_partition: dict[int, list[int]] = {0: [], 1: []}
            for member, mark in zip(members, marks, strict=True):
                for partition, offset in member.since(mark):
                    by_partition[partition].append(offset)
            return by_partition

        expected = {0: list(range(5, PER_PARTITION)), 1: list(range(0, PER_PARTITION))}
        answered = time.monotonic()
        wait_for(lambda: all(set(reread()[p]) >= set(expected[p]) for p in (0, 1)), TIMEOUT,
                 "the members to re-read from the new offsets")
        # Heartbeats are 300 ms apart here (typically done in about one); well within the 3 s session
        # timeout shows the broker moved the members rather than waiting for anything to expire.
        assert time.monotonic() - answered < REREAD_WITHIN_S
        again = reread()
        for partition in (0, 1):
            # Exactly from the new offset on: nothing before it, nothing skipped, nothing read twice.
            assert sorted(again[partition]) == expected[partition], (partition, again[partition])
        wait_for(lambda: committed_offsets(bootstrap, group_name) == {
            (topic_name, 0): PER_PARTITION, (topic_name, 1): PER_PARTITION}, TIMEOUT,
            "the members to commit their new positions")
        # The group kept consuming new messages afterwards.
        produce(bootstrap, topic_name, 2, 1, start=PER_PARTITION)
        wait_for(lambda: committed_offsets(bootstrap, group_name) == {
            (topic_name, 0): PER_PARTITION + 1, (topic_name, 1): PER_PARTITION + 1}, TIMEOUT,
            "the group to go on consuming")
    finally:
        for member in members:
            member.stop()


def test_a_live_rewind_is_durable_once_answered(tmp_path: Path, topic_name: str, group_name: str) -> None:
    """kill -9 right after the rewind answered: the rewound offsets are what the restarted broker has."""
    proc = BrokerProcess(tmp_path / "data", config=fast_config(tmp_path), admin=True).start()
    try:
        bootstrap = proc.bootstrap
        assert proc.admin_url is not None
        create_topic(bootstrap, topic_name, 1)
        produce(bootstrap, topic_name, 1, PER_PARTITION)
        member = RawMember(bootstrap, group_name)
        member.join_fully([topic_name])
        assert member.sync({member.member_id: b""}).error_code == 0
        assert member.commit(topic_name, 0, PER_PARTITION) == 0
        done = sluice("groups", "reset-offsets", group_name, "-b", bootstrap, "--admin",
                      proc.admin_url.removeprefix("http://"), "--topic", topic_name, "--to-offset", "7", "--live")
        assert done.returncode == 0, done.stderr
        # Until the member has re-read, its commits of old positions are refused.
        assert member.commit(topic_name, 0, PER_PARTITION) == ErrorCode.REBALANCE_IN_PROGRESS
        member.close()
        proc.kill()
        proc.restart()
        assert committed_offsets(proc.bootstrap, group_name) == {(topic_name, 0): 7}
    finally:
        proc.stop()
