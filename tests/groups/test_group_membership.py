"""Real consumers from three client libraries share groups while members come and go; every message is
processed exactly once because every member commits synchronously before its partitions move."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from group_helpers import committed_offsets, create_topic, produce
from group_members import (
    AiokafkaMember,
    ConfluentMember,
    KafkaPythonMember,
    Ledger,
    Member,
    partitions_covered,
    wait_until,
)

PARTITIONS = 6
PER_PHASE = 8  # messages per partition produced in each phase of membership
MemberFactory = Callable[[str, Ledger], Member]


@pytest.fixture
def started() -> Iterator[list[Member]]:
    """Members a test started; whatever is still running at the end is stopped."""
    members: list[Member] = []
    yield members
    for member in members:
        if not member.closed.is_set():
            member.stop()


class Churn:
    """Produces a phase of messages, changes membership, and waits for the group to settle each time."""

    def __init__(self, bootstrap: str, topic: str, group: str, started: list[Member]) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.started = started
        self.ledger = Ledger()
        self.active: list[Member] = []
        self.produced_per_partition = 0
        # Partitions taken from members that stayed while another left: all of theirs under an eager
        # protocol, none under an incremental one.
        self.survivors_revoked = 0
        create_topic(bootstrap, topic, PARTITIONS)

    def add(self, *factories: MemberFactory) -> None:
        for factory in factories:
            member = factory(f"m{len(self.started)}", self.ledger)
            self.started.append(member)
            self.active.append(member.start())
        self.settle("the joined members to share every partition")

    def remove(self, member: Member) -> None:
        self.active.remove(member)
        before = sum(m.revoked_partitions for m in self.active)
        member.stop()
        self.settle(f"the rest to take over from {member.name}")
        self.survivors_revoked += sum(m.revoked_partitions for m in self.active) - before

    def settle(self, what: str) -> None:
        wait_until(lambda: partitions_covered(self.active, PARTITIONS) and all(m.holding() for m in self.active),
                   60, what, self.active)

    def produce(self) -> None:
        produce(self.bootstrap, self.topic, PARTITIONS, PER_PHASE, start=self.produced_per_partition)
        self.produced_per_partition += PER_PHASE

    def drain(self) -> None:
        expected = PARTITIONS * self.produced_per_partition
        wait_until(lambda: self.ledger.total() >= expected, 60, f"{expected} messages processed", self.active)

    def finish(self) -> None:
        for member in list(self.active):
            self.active.remove(member)
            member.stop()
        errors = [(m.name, e) for m in self.started for e in m.errors]
        assert not errors, errors
        ends = {p: self.produced_per_partition for p in range(PARTITIONS)}
        self.ledger.check_exactly_once(ends)
        assert committed_offsets(self.bootstrap, self.group) == {(self.topic, p): end for p, end in ends.items()}
        idle = [m.name for m in self.started if not self.ledger.by_member[m.name]]
        assert not idle, f"members that never processed anything: {idle}"


def run_churn(bootstrap: str, topic: str, group: str, started: list[Member],
              first: list[MemberFactory], later: list[MemberFactory]) -> Churn:
    """Two members, then two more, then members leave one by one, with messages flowing throughout."""
    churn = Churn(bootstrap, topic, group, started)
    churn.produce()  # before anyone is there: the first members start from the beginning
    churn.add(*first)
    churn.drain()
    # Messages arrive while the membership changes, and are drained before the next change.
    for change in (lambda: churn.add(*later), lambda: churn.remove(churn.active[0]),
                   lambda: churn.remove(churn.active[0])):
        churn.produce()
        change()
        churn.drain()
    churn.finish()
    return churn


def confluent(bootstrap: str, group: str, topic: str, assignor: str) -> MemberFactory:
    return lambda name, ledger: ConfluentMember(name, ledger, bootstrap, group, topic, assignor=assignor)


def test_confluent_range_members_come_and_go(fast_bootstrap: str, topic_name: str, group_name: str,
                                             started: list[Member]) -> None:
    factory = confluent(fast_bootstrap, group_name, topic_name, "range")
    churn = run_churn(fast_bootstrap, topic_name, group_name, started, [factory] * 2, [factory] * 2)
    assert churn.survivors_revoked > 0  # eager: every rebalance takes everything back first


def test_confluent_cooperative_sticky_members_come_and_go(fast_bootstrap: str, topic_name: str, group_name: str,
                                                          started: list[Member]) -> None:
    factory = confluent(fast_bootstrap, group_name, topic_name, "cooperative-sticky")
    churn = run_churn(fast_bootstrap, topic_name, group_name, started, [factory] * 2, [factory] * 2)
    # Incremental rebalancing: when a member leaves, the others only gain partitions.
    assert churn.survivors_revoked == 0


def test_three_client_libraries_share_a_range_group(fast_bootstrap: str, topic_name: str, group_name: str,
                                                    started: list[Member]) -> None:
    """librdkafka, kafka-python and aiokafka agree on the "range" protocol, so they can share a group."""

    def kafka_python(name: str, ledger: Ledger) -> Member:
        return KafkaPythonMember(name, ledger, fast_bootstrap, group_name, topic_name)

    def aiokafka(name: str, ledger: Ledger) -> Member:
        return AiokafkaMember(name, ledger, fast_bootstrap, group_name, topic_name)

    rdkafka = confluent(fast_bootstrap, group_name, topic_name, "range")
    run_churn(fast_bootstrap, topic_name, group_name, started, [kafka_python, rdkafka], [aiokafka, rdkafka])
    assert {m.kind for m in started} == {"kafka-python", "confluent-kafka", "aiokafka"}


def test_confluent_roundrobin_members_come_and_go(fast_bootstrap: str, topic_name: str, group_name: str,
                                                  started: list[Member]) -> None:
    factory = confluent(fast_bootstrap, group_name, topic_name, "roundrobin")
    churn = run_churn(fast_bootstrap, topic_name, group_name, started, [factory] * 2, [factory] * 2)
    assert churn.survivors_revoked > 0


@pytest.mark.parametrize("protocol", ["sticky", "roundrobin"])
def test_python_clients_share_a_group_with_other_assignors(fast_bootstrap: str, topic_name: str, group_name: str,
                                                            started: list[Member], protocol: str) -> None:
    """kafka-python and aiokafka also agree on "sticky" and "roundrobin", whichever of them leads."""
    if protocol == "sticky":
        from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
            StickyPartitionAssignor as AioAssignor,
        )
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor as KpAssignor
    else:
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as AioAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as KpAssignor

    def kafka_python(name: str, ledger: Ledger) -> Member:
        return KafkaPythonMember(name, ledger, fast_bootstrap, group_name, topic_name, assignor=KpAssignor)

    def aiokafka(name: str, ledger: Ledger) -> Member:
        return AiokafkaMember(name, ledger, fast_bootstrap, group_name, topic_name, assignor=AioAssignor)

    run_churn(fast_bootstrap, topic_name, group_name, started, [kafka_python, aiokafka], [aiokafka, kafka_python])
