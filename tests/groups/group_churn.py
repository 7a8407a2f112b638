"""Membership churn with messages flowing: members join and leave a group in phases, each phase's messages
are drained, and at the end every message must have been processed exactly once and the last commits must
be the log ends. Shared by the Python client group tests and the Java client tests."""

from __future__ import annotations

from collections.abc import Callable

from group_helpers import committed_offsets, create_topic, produce
from group_members import Ledger, Member, partitions_covered, wait_until

MemberFactory = Callable[[str, Ledger], Member]


class Churn:
    """Produces a phase of messages, changes membership, and waits for the group to settle each time."""

    def __init__(self, bootstrap: str, topic: str, group: str, started: list[Member], *,
                 partitions: int = 6, per_phase: int = 8) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.started = started  # every member ever started, for the final checks (and the test's cleanup)
        self.partitions, self.per_phase = partitions, per_phase
        self.ledger = Ledger()
        self.active: list[Member] = []
        self.produced_per_partition = 0
        # Partitions taken from members that stayed while another left: all of theirs under an eager
        # protocol, none under an incremental one.
        self.survivors_revoked = 0
        create_topic(bootstrap, topic, partitions)

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
        wait_until(lambda: partitions_covered(self.active, self.partitions) and all(m.holding() for m in self.active),
                   60, what, self.active)

    def produce(self) -> None:
        produce(self.bootstrap, self.topic, self.partitions, self.per_phase, start=self.produced_per_partition)
        self.produced_per_partition += self.per_phase

    def drain(self) -> None:
        expected = self.partitions * self.produced_per_partition
        wait_until(lambda: self.ledger.total() >= expected, 60, f"{expected} messages processed", self.active)

    def finish(self) -> None:
        for member in list(self.active):
            self.active.remove(member)
            member.stop()
        errors = [(m.name, e) for m in self.started for e in m.errors]
        assert not errors, errors
        ends = dict.fromkeys(range(self.partitions), self.produced_per_partition)
        self.ledger.check_exactly_once(ends)
        assert committed_offsets(self.bootstrap, self.group) == {(self.topic, p): end for p, end in ends.items()}
        idle = [m.name for m in self.started if not self.ledger.by_member[m.name]]
        assert not idle, f"members that never processed anything: {idle}"
