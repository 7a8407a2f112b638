"""kill -9 of the broker: groups form again after the restart and resume from their committed offsets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from group_helpers import committed_offsets, create_topic, fast_config, group_state, produce
from group_members import ConfluentMember, Ledger, Member, partitions_covered, wait_until

from sluice.testing import BrokerProcess

PARTITIONS = 4
PER_PHASE = 6
# Reconnect quickly: librdkafka's default backoff grows to 10 s while the broker is down.
QUICK_RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300}


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", config=fast_config(tmp_path)).start()
    yield proc
    proc.kill()


def test_groups_resume_from_committed_offsets_after_kill_9(own_broker: BrokerProcess, topic_name: str,
                                                           group_name: str) -> None:
    bootstrap = own_broker.bootstrap
    create_topic(bootstrap, topic_name, PARTITIONS)
    ledger = Ledger()
    members: list[Member] = []

    def member(name: str) -> Member:
        started = ConfluentMember(name, ledger, bootstrap, group_name, topic_name, **QUICK_RECONNECT).start()
        members.append(started)
        return started

    def drain(phases: int) -> None:
        expected = PARTITIONS * PER_PHASE * phases
        wait_until(lambda: ledger.total() >= expected, 60, f"{expected} messages processed", members)

    try:
        first, second = member("first"), member("second")
        produce(bootstrap, topic_name, PARTITIONS, PER_PHASE)
        drain(1)

        # Crash with both members running; their commits so far were acknowledged, hence durable.
        own_broker.kill()
        own_broker.restart()
        produce(bootstrap, topic_name, PARTITIONS, PER_PHASE, start=PER_PHASE)
        drain(2)
        wait_until(lambda: partitions_covered([first, second], PARTITIONS), 30, "the group to form again", members)
        # Members that rejoin after the restart may start a rebalance first; it must end Stable with both.
        wait_until(lambda: group_state(bootstrap, group_name) == ("STABLE", 2), 30, "the group to be Stable",
                   members)
        first.stop()
        second.stop()

        # Crash while nobody consumes: a newcomer starts where the group left off, skipping nothing.
        own_broker.kill()
        own_broker.restart()
        assert committed_offsets(bootstrap, group_name) == {(topic_name, p): 2 * PER_PHASE
                                                            for p in range(PARTITIONS)}
        produce(bootstrap, topic_name, PARTITIONS, PER_PHASE, start=2 * PER_PHASE)
        newcomer = member("newcomer")
        drain(3)
        newcomer.stop()
    finally:
        for each in members:
            if not each.closed.is_set():
                each.stop()

    assert not [e for m in members for e in m.errors]
    ledger.check_exactly_once({p: 3 * PER_PHASE for p in range(PARTITIONS)})
    assert ledger.by_member["newcomer"] == PARTITIONS * PER_PHASE
    assert committed_offsets(bootstrap, group_name) == {(topic_name, p): 3 * PER_PHASE for p in range(PARTITIONS)}
