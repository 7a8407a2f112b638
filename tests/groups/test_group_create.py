"""`sluice groups create` (session timeout, ephemeral) and `groups delete [--force]` against a real broker,
through the broker's admin API; restarts after a clean stop and after kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from group_helpers import (
    CONSUMER_GROUP_SESSION_MS,
    RawMember,
    committed_offsets,
    create_topic,
    fast_config,
    group_state,
    produce,
    wait_for,
)

from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

TIMEOUT = 60.0


def sluice(*args: str) -> subprocess.CompletedProcess[str]:
    # Wide enough that rich never wraps a message the assertions look for.
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run([sys.executable, "-m", "sluice", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def admin_of(proc: BrokerProcess) -> str:
    assert proc.admin_url is not None
    return proc.admin_url.removeprefix("http://")


def listed(proc: BrokerProcess) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(proc.admin_url + "/v1/groups", timeout=10) as response:
        return {g["name"]: g for g in json.load(response)["groups"]}


def kafka_listed(bootstrap: str) -> set[str]:
    result = sluice("groups", "list", "--json", "-b", bootstrap)
    assert result.returncode == 0, result.stderr
    return {g["group"] for g in json.loads(result.stdout)}


def test_a_created_group_exists_before_members_and_sets_their_session_timeout(
        admin_broker: BrokerProcess, topic_name: str, group_name: str) -> None:
    bootstrap, admin = admin_broker.bootstrap, admin_of(admin_broker)
    create_topic(bootstrap, topic_name, 1)
    made = sluice("groups", "create", group_name, "--session-timeout-ms", "2000", "-b", bootstrap, "--admin", admin)
    assert made.returncode == 0, made.stderr
    assert "created consumer group" in made.stdout
    assert group_name in kafka_listed(bootstrap)  # Kafka's ListGroups shows it, with no member yet
    info = listed(admin_broker)[group_name]
    assert (info["members"], info["session_timeout_ms"], info["ephemeral"]) == (0, 2000, False)
    again = sluice("groups", "create", group_name, "-b", bootstrap, "--admin", admin)
    assert again.returncode == 1 and "already exists" in again.stderr

    # 100 ms is below the broker's minimum: refused in an ordinary group, the group's 2 s here.
    stranger = RawMember(bootstrap, f"{group_name}-plain")
    assert stranger.join([topic_name], session_timeout_ms=100).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    stranger.close()
    member = RawMember(bootstrap, group_name)
    member.join_fully([topic_name], session_timeout_ms=100)
    assert member.sync({member.member_id: b""}).error_code == 0
    started = time.monotonic()
    # No heartbeats: the member is dropped after the group's session timeout, not after 100 ms.
    time.sleep(1.0)
    assert member.heartbeat() == 0
    silent_since = time.monotonic()
    wait_for(lambda: listed(admin_broker)[group_name]["members"] == 0, TIMEOUT, "the member to expire")
    waited = time.monotonic() - silent_since
    assert 1.5 <= waited <= 10, waited
    assert time.monotonic() - started >= 2.5
    member.close()
    # Not ephemeral: the group outlives its last member.
    assert group_name in listed(admin_broker)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_an_ephemeral_group_goes_with_its_offsets_when_the_last_member_leaves(
        admin_broker: BrokerProcess, topic_name: str, group_name: str, protocol: str) -> None:
    bootstrap, admin = admin_broker.bootstrap, admin_of(admin_broker)
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, 1, 5)
    made = sluice("groups", "create", group_name, "--ephemeral", "-b", bootstrap, "--admin", admin, "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["ephemeral"] is True
    time.sleep(0.5)
    assert group_name in listed(admin_broker)  # nobody joined yet: it waits for its members
    extra = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300} if protocol == "classic" else {}
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": group_name, "group.protocol": protocol,
                           "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})
                 for _ in range(2)]
    for consumer in consumers:
        consumer.subscribe([topic_name])

    read: list[object] = []

    def both_in_and_reading() -> bool:
        # Poll every consumer each time: one left unpolled holds the rebalance (and the commit behind it).
        read.extend(m for m in (c.poll(0.1) for c in consumers) if m is not None)
        state, members = group_state(bootstrap, group_name)
        return bool(read) and (state.upper(), members) == ("STABLE", 2)

    wait_for(both_in_and_reading, TIMEOUT, "both members in and a message read")
    consumers[0].commit(offsets=[TopicPartition(topic_name, 0, 3)], asynchronous=False)
    assert committed_offsets(bootstrap, group_name) == {(topic_name, 0): 3}
    consumers[0].close()
    time.sleep(1.0)
    assert group_name in listed(admin_broker)  # one member is still in
    assert committed_offsets(bootstrap, group_name) == {(topic_name, 0): 3}
    consumers[1].close()
    wait_for(lambda: group_name not in listed(admin_broker), TIMEOUT, "the ephemeral group to go")
    assert committed_offsets(bootstrap, group_name) == {}
    assert group_name not in kafka_listed(bootstrap)


def test_an_ephemeral_group_goes_when_its_last_member_expires_or_the_broker_restarts_without_it(
        tmp_path: Path, topic_name: str, group_name: str) -> None:
    """A member that vanishes without leaving (its process killed) expires at its session timeout, and
    the ephemeral group goes with its offsets; so does one whose member was lost with a broker kill -9."""
    proc = BrokerProcess(tmp_path / "data", config=fast_config(tmp_path), admin=True).start()
    try:
        create_topic(proc.bootstrap, topic_name, 1)

        def vanishing_member(group: str) -> RawMember:
            made = sluice("groups", "create", group, "--ephemeral", "-b", proc.bootstrap, "--admin", admin_of(proc))
            assert made.returncode == 0, made.stderr
            member = RawMember(proc.bootstrap, group)
            member.join_fully([topic_name], session_timeout_ms=1000)
            assert member.sync({member.member_id: b""}).error_code == 0
            assert member.commit(topic_name, 0, 1) == 0
            assert committed_offsets(proc.bootstrap, group) == {(topic_name, 0): 1}
            return member

        vanishing_member(group_name).close()  # gone without a LeaveGroup, as a killed process
        wait_for(lambda: group_name not in listed(proc), TIMEOUT, "the expired ephemeral group to go")
        assert committed_offsets(proc.bootstrap, group_name) == {}

        second = f"{group_name}-2"
        member = vanishing_member(second)
        proc.kill()
        member.close()
        proc.restart()
        wait_for(lambda: second not in listed(proc), TIMEOUT, "the ephemeral group to go after the restart")
        assert committed_offsets(proc.bootstrap, second) == {}
    finally:
        proc.stop()


def test_an_ephemeral_kip848_group_after_a_restart_keeps_members_that_come_back_and_goes_without(
        tmp_path: Path, topic_name: str) -> None:
    """KIP-848 membership is not persisted: after a restart an ephemeral group waits a session timeout
    for its members. A live consumer rejoins and keeps it (and its offsets) until it leaves; a group
    whose consumer went away while the broker was down goes at the end of the wait."""
    proc = BrokerProcess(tmp_path / "data", config=fast_config(tmp_path), admin=True).start()
    kept, lost = "eph-kept", "eph-lost"
    consumers: dict[str, Consumer] = {}
    try:
        create_topic(proc.bootstrap, topic_name, 1)
        produce(proc.bootstrap, topic_name, 1, 5)
        for group in (kept, lost):
            made = sluice("groups", "create", group, "--ephemeral", "-b", proc.bootstrap, "--admin", admin_of(proc))
            assert made.returncode == 0, made.stderr
            consumer = consumers[group] = Consumer({
                "bootstrap.servers": proc.bootstrap, "group.id": group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False})
            consumer.subscribe([topic_name])
            wait_for(lambda c=consumer: c.poll(0.1) is not None, TIMEOUT, "a message")
            consumer.commit(offsets=[TopicPartition(topic_name, 0, 2)], asynchronous=False)
        assert proc.stop() == 0
        consumers.pop(lost).close()  # its leave cannot reach the broker
        proc.restart()
        # Past the wait (the fast config's consumer session timeout) with the other consumer polling on.
        deadline = time.monotonic() + CONSUMER_GROUP_SESSION_MS / 1000 * 2
        while time.monotonic() < deadline:
            consumers[kept].poll(0.1)
        groups = listed(proc)
        assert kept in groups and lost not in groups
        assert committed_offsets(proc.bootstrap, kept) == {(topic_name, 0): 2}
        assert committed_offsets(proc.bootstrap, lost) == {}
        consumers.pop(kept).close()
        wait_for(lambda: kept not in listed(proc), TIMEOUT, "the ephemeral group to go")
        assert committed_offsets(proc.bootstrap, kept) == {}
    finally:
        for consumer in consumers.values():
            consumer.close()
        proc.stop()


def test_delete_refuses_a_group_with_members_unless_forced(
        admin_broker: BrokerProcess, topic_name: str, group_name: str) -> None:
    bootstrap, admin = admin_broker.bootstrap, admin_of(admin_broker)
    create_topic(bootstrap, topic_name, 1)
    assert sluice("groups", "create", group_name, "-b", bootstrap, "--admin", admin).returncode == 0
    member = RawMember(bootstrap, group_name)
    member.join_fully([topic_name])
    assert member.sync({member.member_id: b""}).error_code == 0
    assert member.commit(topic_name, 0, 0) == 0
    refused = sluice("groups", "delete", group_name, "-b", bootstrap, "--admin", admin)
    assert refused.returncode == 1 and "not empty" in refused.stderr
    assert group_name in listed(admin_broker)
    forced = sluice("groups", "delete", group_name, "--force", "-b", bootstrap, "--admin", admin)
    assert forced.returncode == 0, forced.stderr
    assert group_name not in listed(admin_broker)
    assert committed_offsets(bootstrap, group_name) == {}
    assert member.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID  # the member learns at its next heartbeat
    member.close()
    missing = sluice("groups", "delete", group_name, "--force", "-b", bootstrap, "--admin", admin)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    # An empty created group goes through Kafka's own DeleteGroups too.
    assert sluice("groups", "create", group_name, "-b", bootstrap, "--admin", admin).returncode == 0
    assert sluice("groups", "delete", group_name, "-b", bootstrap).returncode == 0
    assert group_name not in listed(admin_broker)


@pytest.mark.parametrize("crash", [False, True], ids=["clean-stop", "kill-9"])
def test_created_groups_survive_restarts_and_ephemeral_flags_too(tmp_path: Path, crash: bool) -> None:
    proc = BrokerProcess(tmp_path / "data", config=fast_config(tmp_path), admin=True).start()
    try:
        bootstrap, admin = proc.bootstrap, admin_of(proc)
        for args in (["kept", "--session-timeout-ms", "2000"], ["brief", "--ephemeral"]):
            assert sluice("groups", "create", *args, "-b", bootstrap, "--admin", admin).returncode == 0
        assert sluice("groups", "create", "gone", "-b", bootstrap, "--admin", admin).returncode == 0
        assert sluice("groups", "delete", "gone", "-b", bootstrap, "--admin", admin).returncode == 0
        if crash:
            proc.kill()
        else:
            assert proc.stop() == 0
        proc.restart()
        groups = listed(proc)
        assert set(groups) >= {"kept", "brief"} and "gone" not in groups
        assert groups["kept"]["session_timeout_ms"] == 2000 and groups["brief"]["ephemeral"] is True
        # The default session timeout still applies after the restart.
        create_topic(proc.bootstrap, "t", 1)
        member = RawMember(proc.bootstrap, "kept")
        member.join_fully(["t"], session_timeout_ms=100)
        member.close()
    finally:
        proc.stop()


def test_bad_create_and_rewind_input_gets_clear_errors(admin_broker: BrokerProcess, group_name: str,
                                                       topic_name: str) -> None:
    bootstrap, admin = admin_broker.bootstrap, admin_of(admin_broker)
    low = sluice("groups", "create", group_name, "--session-timeout-ms", "10", "-b", bootstrap, "--admin", admin)
    assert low.returncode == 1 and "INVALID_SESSION_TIMEOUT" in low.stderr
    long_name = sluice("groups", "create", "g" * 300, "-b", bootstrap, "--admin", admin)
    assert long_name.returncode == 1 and "INVALID_GROUP_ID" in long_name.stderr
    nowhere = sluice("groups", "create", group_name, "-b", bootstrap, "--admin", "127.0.0.1:1")
    said = " ".join(nowhere.stderr.split())  # the console wraps long lines
    assert nowhere.returncode == 1
    assert "127.0.0.1:1" in said and "--admin-listen" in said and "--admin HOST:PORT" in said

    def post(path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(admin_broker.admin_url + path, data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    create_topic(bootstrap, topic_name, 1)
    status, body = post(f"/v1/groups/{group_name}/rewind",
                        json.dumps({"offsets": [{"topic": topic_name, "partition": 9, "offset": 0}]}).encode())
    assert status == 404 and body["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    status, body = post(f"/v1/groups/{group_name}/rewind", b'{"offsets": []}')
    assert status == 400 and "non-empty" in body["message"]
    status, body = post(f"/v1/groups/{group_name}/rewind", b'{"offsets": [{"topic": 1}]}')
    assert status == 400
    status, body = post("/v1/groups", b'{"name": "x", "ephemeral": "yes"}')
    assert status == 400
    status, body = post("/v1/groups", b"[]")
    assert status == 400 and "JSON object" in body["message"]
    # A running group without live: refused with Kafka's NON_EMPTY_GROUP.
    member = RawMember(bootstrap, group_name)
    member.join_fully([topic_name])
    status, body = post(f"/v1/groups/{group_name}/rewind",
                        json.dumps({"offsets": [{"topic": topic_name, "partition": 0, "offset": 0}]}).encode())
    assert status == 409 and body["error"] == "NON_EMPTY_GROUP"
    member.close()
