"""How fast a group reacts to members leaving, dying and restarting."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from group_helpers import RawMember, create_topic, decode_assignment, group_state, produce
from group_members import FAST_SESSION, ConfluentMember, Ledger, Member, partitions_covered, wait_until

from sluice.errors import ErrorCode


def test_a_clean_leave_settles_the_group_at_once(fast_bootstrap: str, topic_name: str, group_name: str,
                                                 started: list[Member]) -> None:
    create_topic(fast_bootstrap, topic_name, 6)
    ledger = Ledger()
    started += [ConfluentMember(f"m{i}", ledger, fast_bootstrap, group_name, topic_name).start() for i in range(3)]
    wait_until(lambda: partitions_covered(started, 6) and all(m.holding() for m in started), 30,
               "three members sharing six partitions", started)
    leaving, staying = started[0], started[1:]
    began = time.monotonic()
    leaving.stop()  # LeaveGroup: the coordinator rebalances now, not after a session timeout
    wait_until(lambda: partitions_covered(staying, 6), 10, "the two others to hold everything", staying)
    settled_s = time.monotonic() - began
    # Close, notice through a heartbeat (every 0.3 s), rejoin, sync: well under the 3 s session timeout.
    assert settled_s < 2.0, settled_s
    assert group_state(fast_bootstrap, group_name) == ("STABLE", 2)


def test_a_member_that_stops_heartbeating_is_evicted(fast_bootstrap: str, topic_name: str, group_name: str,
                                                     started: list[Member]) -> None:
    create_topic(fast_bootstrap, topic_name, 2)
    ledger = Ledger()
    survivor = ConfluentMember("survivor", ledger, fast_bootstrap, group_name, topic_name).start()
    started.append(survivor)
    wait_until(lambda: survivor.holding() == {0, 1}, 30, "the first member to hold both partitions", started)

    # A member on the bare protocol joins, takes its share, and then never sends another heartbeat.
    session_ms = 1500
    silent = RawMember(fast_bootstrap, group_name, client_id="silent")
    silent.join_fully([topic_name], session_timeout_ms=session_ms)
    synced = silent.sync()  # the survivor leads and hands out the assignment
    synced_at = time.monotonic()
    assert synced.error_code == ErrorCode.NONE
    silent_partitions = decode_assignment(synced.assignment)[topic_name]
    assert len(silent_partitions) == 1
    assert group_state(fast_bootstrap, group_name) == ("STABLE", 2)
    wait_until(lambda: survivor.holding() == {0, 1} - set(silent_partitions), 10,
               "the survivor to give up the silent member's share", started)

    wait_until(lambda: survivor.holding() == {0, 1}, 10, "the survivor to take everything back", started)
    evicted_after_s = time.monotonic() - synced_at
    produce(fast_bootstrap, topic_name, 2, 5)
    # Not before the session timeout ran out, and soon after it did.
    assert session_ms / 1000 * 0.9 <= evicted_after_s < session_ms / 1000 + 2.0, evicted_after_s
    assert group_state(fast_bootstrap, group_name) == ("STABLE", 1)
    # The silent member's partition is the survivor's now: it consumes it like its own.
    wait_until(lambda: ledger.total() == 10, 10, "both partitions consumed", started)
    ledger.check_exactly_once({0: 5, 1: 5})
    assert silent.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
    silent.close()


# A kafka-python member in its own process, reporting each assignment on stdout.
KAFKA_PYTHON_MEMBER = """
import sys
from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor

bootstrap, group, topic, session_ms = sys.argv[1:5]

class Report(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        print("assigned", *sorted(tp.partition for tp in assigned), flush=True)

consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         partition_assignment_strategy=[RangePartitionAssignor],
                         session_timeout_ms=int(session_ms), heartbeat_interval_ms=300)
consumer.subscribe([topic], listener=Report())
while True:
    consumer.poll(timeout_ms=100)
"""


def test_a_killed_member_process_is_evicted_after_its_session(fast_bootstrap: str, topic_name: str,
                                                              group_name: str, started: list[Member]) -> None:
    create_topic(fast_bootstrap, topic_name, 2)
    survivor = ConfluentMember("survivor", Ledger(), fast_bootstrap, group_name, topic_name).start()
    started.append(survivor)
    wait_until(lambda: survivor.holding() == {0, 1}, 30, "the first member to hold both partitions", started)
    session_ms = 1500
    child = subprocess.Popen([sys.executable, "-c", KAFKA_PYTHON_MEMBER, fast_bootstrap, group_name, topic_name,
                              str(session_ms)], stdout=subprocess.PIPE, text=True)
    reports: list[str] = []
    assert child.stdout is not None
    reader = threading.Thread(target=lambda: reports.extend(line.strip() for line in child.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any(r != "assigned" for r in reports) and len(survivor.holding()) == 1, 60,
                   "the kafka-python process to take a partition", started)
        child_partition = int(next(r for r in reports if r != "assigned").split()[1])
        assert survivor.holding() == {1 - child_partition}
        killed_at = time.monotonic()
        child.kill()  # SIGKILL: no LeaveGroup, no more heartbeats
        wait_until(lambda: survivor.holding() == {0, 1}, 15, "the survivor to take everything back", started)
        evicted_after_s = time.monotonic() - killed_at
    finally:
        child.kill()
        child.wait(10)
    slack_s = 2 * FAST_SESSION["heartbeat_interval_ms"] / 1000
    assert session_ms / 1000 - slack_s <= evicted_after_s < session_ms / 1000 + 3.0, evicted_after_s
    assert group_state(fast_bootstrap, group_name) == ("STABLE", 1)


def test_a_static_member_restarts_without_a_rebalance(fast_bootstrap: str, topic_name: str, group_name: str,
                                                      started: list[Member]) -> None:
    create_topic(fast_bootstrap, topic_name, 4)
    ledger = Ledger()

    # A longer session than the others': the restart must happen within it even on a loaded machine.
    static_session_ms = 6000

    def static_member(name: str) -> ConfluentMember:
        member = ConfluentMember(name, ledger, fast_bootstrap, group_name, topic_name, instance_id="static-1",
                                 **{"session.timeout.ms": static_session_ms})
        started.append(member)
        return member

    other = ConfluentMember("other", ledger, fast_bootstrap, group_name, topic_name).start()
    started.append(other)
    first = static_member("static-first").start()
    wait_until(lambda: partitions_covered([other, first], 4) and first.holding() and other.holding(), 30,
               "the two members to share the partitions", started)
    owned = first.holding()
    produce(fast_bootstrap, topic_name, 4, 5)
    wait_until(lambda: ledger.total() == 20, 20, "the first messages consumed", started)
    other_assigns, other_revokes = other.assign_events, other.revoke_events

    # A static member closing sends no LeaveGroup; its successor with the same group.instance.id takes over
    # its place, generation and partitions, and nobody else notices.
    first.stop()
    second = static_member("static-second").start()
    wait_until(lambda: second.holding() == owned, 10, "the restarted member to get its old partitions", started)
    produce(fast_bootstrap, topic_name, 4, 5, start=5)
    wait_until(lambda: ledger.total() == 40, 20, "the later messages consumed", started)
    assert (other.assign_events, other.revoke_events) == (other_assigns, other_revokes)
    ledger.check_exactly_once({p: 10 for p in range(4)})

    # A static member that does not come back is removed when its session runs out.
    stopping_at = time.monotonic()
    second.stop()
    wait_until(lambda: other.holding() == {0, 1, 2, 3}, 20, "the other member to inherit everything", started)
    expired_after_s = time.monotonic() - stopping_at
    # Its last heartbeat may predate the close by one heartbeat interval; a LeaveGroup would be instant.
    slack_s = 2 * FAST_SESSION["heartbeat_interval_ms"] / 1000
    assert expired_after_s >= static_session_ms / 1000 - slack_s, expired_after_s
