"""Java KafkaConsumer members in sluice's consumer groups. Classic protocol: every assignor while members come
and go, a group shared with librdkafka, static membership, the AdminClient's group operations. KIP-848
(group.protocol=consumer): both server-side assignors while members come and go, and a group shared with
librdkafka's KIP-848 consumer.

Members commit synchronously after every poll and when partitions are revoked, so each message must be
processed exactly once (see tests/groups/group_members.py, whose Ledger and bookkeeping these share)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from group_churn import Churn, MemberFactory
from group_helpers import committed_offsets, create_topic, produce, wait_for
from group_members import (
    ConfluentMember,
    ConsumerProtocolMember,
    Ledger,
    Member,
    partitions_covered,
    wait_until,
)
from java_driver import JavaClient, JavaError, JavaMember

ASSIGNORS = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "sticky": "org.apache.kafka.clients.consumer.StickyAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}
PARTITIONS = 6
PER_PHASE = 5  # messages per partition produced before each membership change


def run_churn(bootstrap: str, topic: str, group: str, started: list[Member], first: list[MemberFactory],
              later: list[MemberFactory], when_all_joined: Callable[[list[Member]], None] | None = None) -> Churn:
    """Two members, then one more, then the first leaves; messages flow before every change and are drained
    after it."""
    churn = Churn(bootstrap, topic, group, started, partitions=PARTITIONS, per_phase=PER_PHASE)
    for change in (lambda: churn.add(*first), lambda: churn.add(*later), lambda: churn.remove(churn.active[0])):
        churn.produce()
        change()
        if when_all_joined and len(churn.active) == len(first) + len(later):
            when_all_joined(churn.active)
        churn.drain()
    churn.finish()
    return churn


def java_member(java: JavaClient, group: str, topic: str, **config: str | int) -> MemberFactory:
    return lambda name, ledger: JavaMember(name, ledger, java, group, topic, config)


@pytest.mark.parametrize("assignor", list(ASSIGNORS))
def test_java_members_come_and_go(java: JavaClient, java_bootstrap: str, topic_name: str, group_name: str,
                                  started: list[Member], assignor: str) -> None:
    factory = java_member(java, group_name, topic_name, **{"partition.assignment.strategy": ASSIGNORS[assignor]})
    churn = run_churn(java_bootstrap, topic_name, group_name, started, [factory] * 2, [factory])
    if assignor == "cooperative-sticky":
        assert churn.survivors_revoked == 0  # incremental: when a member leaves, the others only gain
    else:
        assert churn.survivors_revoked > 0  # eager: every rebalance takes everything back first


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_java_and_librdkafka_share_a_group(java: JavaClient, java_bootstrap: str, topic_name: str,
                                           group_name: str, started: list[Member], assignor: str) -> None:
    """The protocol names match ("range", "cooperative-sticky"), so either client may lead the group."""
    in_java = java_member(java, group_name, topic_name, **{"partition.assignment.strategy": ASSIGNORS[assignor]})

    def rdkafka(name: str, ledger: Ledger) -> Member:
        return ConfluentMember(name, ledger, java_bootstrap, group_name, topic_name, assignor=assignor,
                               **{"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})

    run_churn(java_bootstrap, topic_name, group_name, started, [in_java, rdkafka], [in_java])
    assert {m.kind for m in started} == {"java", "confluent-kafka"}


def test_static_members_restart_without_a_rebalance(java: JavaClient, java_bootstrap: str, topic_name: str,
                                                    group_name: str, started: list[Member]) -> None:
    """A static member (group.instance.id) that closes does not leave; when it comes back within the
    session timeout it gets its old assignment in the same generation, and nobody else notices."""
    partitions = 4
    create_topic(java_bootstrap, topic_name, partitions)
    ledger = Ledger()

    def member(name: str, instance: str) -> JavaMember:
        # A 10 s session: the restart must happen within it even on a loaded machine.
        m = JavaMember(name, ledger, java, group_name, topic_name,
                       {"group.instance.id": instance, "partition.assignment.strategy": ASSIGNORS["range"],
                        "session.timeout.ms": 10_000})
        started.append(m)
        return m.start()  # type: ignore[return-value]

    def settle(members: list[JavaMember], what: str) -> None:
        wait_until(lambda: partitions_covered(members, partitions) and all(m.holding() for m in members),
                   30, what, members)

    produced = 0

    def produce_and_drain(members: list[JavaMember]) -> None:
        nonlocal produced
        produce(java_bootstrap, topic_name, partitions, 5, start=produced)
        produced += 5
        wait_until(lambda: ledger.total() >= partitions * produced, 30, "messages processed", members)

    leader = member("a1", "a")  # the first to join leads the group
    settle([leader], "a alone")
    follower = member("b1", "b")
    settle([leader, follower], "a and b")
    produce_and_drain([leader, follower])
    generation = follower.generations[-1]
    assert leader.generations[-1] == generation

    def restart(old: JavaMember, name: str, instance: str, other: JavaMember) -> JavaMember:
        held, other_events = old.holding(), (other.assign_events, other.revoke_events)
        old.stop()  # closes the consumer; a static member does not send LeaveGroup
        new = member(name, instance)
        wait_until(new.holding, 8, f"{name} to get its assignment back", [new, other])
        assert new.holding() == held
        assert new.generations == [generation]  # no new generation: no rebalance
        assert (other.assign_events, other.revoke_events) == other_events  # the other member saw nothing
        produce_and_drain([new, other])
        return new

    follower = restart(follower, "b2", "b", leader)
    restart(leader, "a2", "a", follower)  # the leader too, which must not be asked to assign again

    description = java.call("describe-groups", group_name)[group_name]
    assert description["state"] == "Stable"
    assert sorted(m["instance_id"] for m in description["members"]) == ["a", "b"]
    for m in started:
        if not m.closed.is_set():
            m.stop()
    assert not [e for m in started for e in m.errors]
    ledger.check_exactly_once(dict.fromkeys(range(partitions), produced))


def test_group_admin_operations(java: JavaClient, java_bootstrap: str, topic_name: str, group_name: str,
                                started: list[Member]) -> None:
    create_topic(java_bootstrap, topic_name, 2)
    produce(java_bootstrap, topic_name, 2, 5)
    ledger = Ledger()
    # Explicitly the classic protocol (the default of both 3.9 and 4.x, the only one sluice serves).
    member = JavaMember("m", ledger, java, group_name, topic_name, {"group.protocol": "classic"})
    started.append(member.start())
    wait_until(lambda: committed_offsets(java_bootstrap, group_name) == {(topic_name, 0): 5, (topic_name, 1): 5},
               30, "everything processed and committed", [member])

    assert java.call("list-groups")[group_name] == "Stable"
    description = java.call("describe-groups", group_name)[group_name]
    assert description["state"] == "Stable"
    assert description["assignor"] == "range"  # the Java consumer's default is [range, cooperative-sticky]
    assert description["coordinator"] == 1
    assert [(m["client_id"], m["partitions"]) for m in description["members"]] == [(member.java_name, [0, 1])]
    assert description["members"][0]["member_id"] == member.member_ids[-1]
    assert java.call("group-offsets", group_name) == {f"{topic_name}:0": 5, f"{topic_name}:1": 5}

    assert java.call("delete-groups", group_name)[group_name]["error"] == "GroupNotEmptyException"
    with pytest.raises(JavaError) as busy:  # only an empty group's offsets may be altered
        java.call("alter-group-offsets", group_name, topic_name, "0=1")
    assert busy.value.error == "UnknownMemberIdException"  # what Kafka answers, too

    member.stop()
    assert java.call("list-groups")[group_name] == "Empty"
    java.call("alter-group-offsets", group_name, topic_name, "0=2", "1=3")
    assert java.call("group-offsets", group_name) == {f"{topic_name}:0": 2, f"{topic_name}:1": 3}
    assert java.call("describe-groups", group_name)[group_name]["members"] == []

    assert java.call("delete-groups", group_name) == {group_name: "ok"}
    assert group_name not in java.call("list-groups")
    assert java.call("group-offsets", group_name) == {}
    assert ledger.total() == 10


def skip_preview_client(java: JavaClient) -> None:
    if java.major < 4:
        # KIP-848 was a preview in the 3.9 client. Its consumer sometimes never fetches the committed offset
        # of a partition added while another one's OffsetFetch is in flight (no OffsetFetch for it reaches
        # the broker) and starts it from auto.offset.reset, so messages are processed twice; 4.x does not.
        pytest.skip("the consumer group protocol is a preview in kafka-clients 3.9")


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_kip_848_members_come_and_go(java: JavaClient, java_bootstrap: str, topic_name: str, group_name: str,
                                     started: list[Member], assignor: str) -> None:
    """group.protocol=consumer: the broker assigns (group.remote.assignor), members only heartbeat."""
    skip_preview_client(java)
    factory = java_member(java, group_name, topic_name,
                          **{"group.protocol": "consumer", "group.remote.assignor": assignor})

    def described(members: list[Member]) -> None:
        # The admin asks with ConsumerGroupDescribe. The group is Stable once the members' heartbeats have
        # confirmed their partitions; the Java consumer confirms from its background thread and runs the
        # rebalance listener (what holding() reports) at its next poll, so the two views meet a moment apart.
        def settled() -> dict[str, Any] | None:
            found: dict[str, Any] = java.call("describe-groups", group_name)[group_name]
            if found["state"] != "Stable":
                return None
            by_client = {m["client_id"]: m["partitions"] for m in found["members"]}
            held = {m.java_name: sorted(m.holding()) for m in members}  # type: ignore[attr-defined]
            return found if by_client == held else None

        description = wait_for(settled, 10, "the group Stable, each member holding what the broker assigned it")
        assert description["assignor"] == assignor

    churn = run_churn(java_bootstrap, topic_name, group_name, started, [factory] * 2, [factory], described)
    if assignor == "uniform":
        assert churn.survivors_revoked == 0  # sticky and incremental: when a member leaves, the others only gain


def test_kip_848_java_and_librdkafka_share_a_group(java: JavaClient, java_bootstrap: str, topic_name: str,
                                                  group_name: str, started: list[Member]) -> None:
    skip_preview_client(java)
    in_java = java_member(java, group_name, topic_name, **{"group.protocol": "consumer"})

    def rdkafka(name: str, ledger: Ledger) -> Member:
        return ConsumerProtocolMember(name, ledger, java_bootstrap, group_name, topic_name)

    run_churn(java_bootstrap, topic_name, group_name, started, [in_java, rdkafka], [in_java])
    assert {m.kind for m in started} == {"java", ConsumerProtocolMember.kind}
