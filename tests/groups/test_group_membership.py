"""Real consumers from three client libraries share groups while members come and go; every message is
processed exactly once because every member commits synchronously before its partitions move."""

from __future__ import annotations

import pytest
from group_churn import Churn, MemberFactory
from group_members import AiokafkaMember, ConfluentMember, KafkaPythonMember, Ledger, Member


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
