"""`sluice groups` against the real broker: list, describe, delete and every reset-offsets option."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
import typer
from confluent_kafka import Consumer, TopicPartition
from group_helpers import committed_offsets, create_topic, produce, wait_for
from typer.testing import CliRunner

from sluice.cli.groups import ResetKind, app, new_offset, parse_datetime_ms

PARTITIONS = 3
PER_PARTITION = 10
runner = CliRunner()


def groups(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--bootstrap", bootstrap])
    return result.exit_code, result.stdout, result.stderr


def groups_json(bootstrap: str, *args: str) -> object:
    code, out, err = groups(bootstrap, *args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def seeded_topic(bootstrap: str, topic_name: str) -> tuple[str, int]:
    """A topic of 3 x 10 messages stamped one second apart, starting a minute ago; returns (topic, base ms)."""
    base_ms = (int(time.time()) - 60) * 1000
    create_topic(bootstrap, topic_name, PARTITIONS)
    produce(bootstrap, topic_name, PARTITIONS, PER_PARTITION, timestamp_of=lambda _p, seq: base_ms + seq * 1000)
    return topic_name, base_ms


@pytest.fixture
def active_member(bootstrap: str, seeded_topic: tuple[str, int], group_name: str) -> Iterator[Consumer]:
    """One subscribed consumer holding every partition, with offsets 3, 4 and 5 committed."""
    topic, _ = seeded_topic
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_name, "client.id": "cli-test-member",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    wait_for(lambda: consumer.poll(0.1) is not None and len(consumer.assignment()) == PARTITIONS, 30,
             "the consumer to be assigned every partition")
    consumer.commit(offsets=[TopicPartition(topic, p, 3 + p) for p in range(PARTITIONS)], asynchronous=False)
    yield consumer
    consumer.close()


def test_list_and_describe_an_active_group(bootstrap: str, seeded_topic: tuple[str, int], group_name: str,
                                           active_member: Consumer) -> None:
    topic, _ = seeded_topic
    listed = groups_json(bootstrap, "list")
    assert {"group": group_name, "state": "Stable", "type": "classic"} in listed

    described = groups_json(bootstrap, "describe", group_name)
    assert described["state"] == "Stable"
    assert described["assignor"] == "range"
    [member] = described["members"]
    assert member["client_id"] == "cli-test-member"
    assert member["host"].endswith("127.0.0.1")
    assert member["assignment"] == [{"topic": topic, "partition": p} for p in range(PARTITIONS)]
    offsets = {row["partition"]: row for row in described["offsets"]}
    for p in range(PARTITIONS):
        assert offsets[p]["current_offset"] == 3 + p
        assert offsets[p]["log_end_offset"] == PER_PARTITION
        assert offsets[p]["lag"] == PER_PARTITION - 3 - p
        assert offsets[p]["member_id"] == member["member_id"]

    code, table, _ = groups(bootstrap, "describe", group_name)
    assert code == 0 and group_name in table and "Stable" in table and "cli-test-member" in table
    # Long ids wrap inside their cells rather than being cut short.
    first_column = "".join(cell.strip() for line in table.splitlines() for cell in line.split("│")[1:2])
    assert member["member_id"] in first_column
    code, table, _ = groups(bootstrap, "list")
    assert code == 0 and "Stable" in table and "classic" in table


def test_an_active_group_refuses_reset_and_delete(bootstrap: str, seeded_topic: tuple[str, int],
                                                  group_name: str, active_member: Consumer) -> None:
    topic, _ = seeded_topic
    before = committed_offsets(bootstrap, group_name)
    for dry_run in ([], ["--dry-run"]):
        code, out, err = groups(bootstrap, "reset-offsets", group_name, "--topic", topic, "--to-earliest", *dry_run)
        assert code == 1 and "inactive" in err and "Stable" in err, (out, err)
    code, _, err = groups(bootstrap, "delete", group_name)
    assert code == 1 and "not empty" in err
    assert committed_offsets(bootstrap, group_name) == before
    assert groups_json(bootstrap, "describe", group_name)["state"] == "Stable"


def test_reset_offsets_every_option(bootstrap: str, seeded_topic: tuple[str, int], group_name: str,
                                    active_member: Consumer) -> None:
    topic, base_ms = seeded_topic
    active_member.close()  # an Empty group may be reset

    def reset(*args: str) -> dict[int, tuple[int | None, int]]:
        plan = groups_json(bootstrap, "reset-offsets", group_name, "--topic", topic, *args)
        return {row["partition"]: (row["current_offset"], row["new_offset"]) for row in plan["partitions"]}

    def committed() -> list[int]:
        offsets = committed_offsets(bootstrap, group_name)
        return [offsets[(topic, p)] for p in range(PARTITIONS)]

    assert committed() == [3, 4, 5]
    # A dry run shows the plan, with the current offsets, and changes nothing.
    assert reset("--to-latest", "--dry-run") == {0: (3, 10), 1: (4, 10), 2: (5, 10)}
    assert committed() == [3, 4, 5]
    assert reset("--to-earliest") == {0: (3, 0), 1: (4, 0), 2: (5, 0)}
    assert committed() == [0, 0, 0]
    reset("--to-latest")
    assert committed() == [10, 10, 10]
    reset("--shift-by", "-3")
    assert committed() == [7, 7, 7]
    reset("--shift-by", "100")  # clamped to the log end, as Kafka does
    assert committed() == [10, 10, 10]
    reset("--shift-by", "-100")  # clamped to the log start
    assert committed() == [0, 0, 0]
    assert reset("--to-offset", "4", "--partition", "1") == {1: (0, 4)}
    assert committed() == [0, 4, 0]
    reset("--to-offset", "999", "-p", "0", "-p", "2")
    assert committed() == [10, 4, 10]
    # Record seq has timestamp base + seq s: 4.5 s in, the first record at or after it is offset 5.
    moment = datetime.fromtimestamp(base_ms / 1000 + 4.5, tz=UTC)
    reset("--to-datetime", moment.isoformat().replace("+00:00", "Z"))
    assert committed() == [5, 5, 5]
    plus_two = moment.astimezone(timezone(timedelta(hours=2)))
    reset("--to-datetime", (plus_two + timedelta(seconds=2)).isoformat(), "-p", "2")
    assert committed() == [5, 5, 7]
    reset("--to-datetime", (moment + timedelta(hours=1)).isoformat())  # after every record: the log end
    assert committed() == [10, 10, 10]

    code, table, _ = groups(bootstrap, "reset-offsets", group_name, "--topic", topic, "--to-offset", "2", "--dry-run")
    assert code == 0 and "dry run" in table and topic in table
    assert committed() == [10, 10, 10]


def test_reset_options_are_validated(bootstrap: str, seeded_topic: tuple[str, int], group_name: str) -> None:
    topic, _ = seeded_topic
    code, _, err = groups(bootstrap, "reset-offsets", group_name, "--topic", topic)
    assert code == 2 and "exactly one" in err
    code, _, err = groups(bootstrap, "reset-offsets", group_name, "--topic", topic, "--to-earliest", "--to-latest")
    assert code == 2 and "exactly one" in err
    code, _, err = groups(bootstrap, "reset-offsets", group_name, "--topic", topic, "--to-datetime", "last tuesday")
    assert code == 2 and "ISO-8601" in err
    code, _, err = groups(bootstrap, "reset-offsets", group_name, "--topic", topic, "--to-earliest", "-p", "7")
    assert code == 1 and "no partition 7" in err
    code, _, err = groups(bootstrap, "reset-offsets", group_name, "--topic", f"{topic}-absent", "--to-earliest")
    assert code == 1 and "does not exist" in err
    # Shifting needs something to shift from; the group never committed.
    code, _, err = groups(bootstrap, "reset-offsets", group_name, "--topic", topic, "--shift-by", "1")
    assert code == 1 and "no committed offset" in err
    assert committed_offsets(bootstrap, group_name) == {}


def test_reset_creates_offsets_for_a_new_group(bootstrap: str, seeded_topic: tuple[str, int],
                                               group_name: str) -> None:
    topic, _ = seeded_topic
    groups_json(bootstrap, "reset-offsets", group_name, "--topic", topic, "--to-offset", "6")
    assert committed_offsets(bootstrap, group_name) == {(topic, p): 6 for p in range(PARTITIONS)}
    assert groups_json(bootstrap, "describe", group_name)["state"] == "Empty"
    # A consumer of the group starts exactly there.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_name, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    first = wait_for(lambda: consumer.poll(0.2), 30, "the first message")
    consumer.close()
    assert first.offset() == 6


def test_delete_an_empty_group(bootstrap: str, seeded_topic: tuple[str, int], group_name: str,
                               active_member: Consumer) -> None:
    active_member.close()
    code, out, err = groups(bootstrap, "delete", group_name)
    assert code == 0 and "deleted" in out, err
    assert committed_offsets(bootstrap, group_name) == {}
    assert group_name not in {g["group"] for g in groups_json(bootstrap, "list")}
    code, _, err = groups(bootstrap, "describe", group_name)
    assert code == 1 and "does not exist" in err
    code, _, err = groups(bootstrap, "delete", group_name)
    assert code == 1 and "does not exist" in err


def test_the_sluice_command_mounts_groups(bootstrap: str, seeded_topic: tuple[str, int],
                                          group_name: str, active_member: Consumer) -> None:
    done = subprocess.run([sys.executable, "-m", "sluice", "groups", "list", "--json", "--bootstrap", bootstrap],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert group_name in {g["group"] for g in json.loads(done.stdout)}


def test_new_offset_clamps_like_kafka() -> None:
    bounds = {"earliest": 10, "latest": 20}
    assert new_offset(ResetKind.EARLIEST, current=15, **bounds) == 10
    assert new_offset(ResetKind.LATEST, current=None, **bounds) == 20
    assert new_offset(ResetKind.OFFSET, current=None, value=5, **bounds) == 10
    assert new_offset(ResetKind.OFFSET, current=None, value=25, **bounds) == 20
    assert new_offset(ResetKind.OFFSET, current=None, value=12, **bounds) == 12
    assert new_offset(ResetKind.SHIFT, current=15, value=-3, **bounds) == 12
    assert new_offset(ResetKind.SHIFT, current=15, value=-30, **bounds) == 10
    assert new_offset(ResetKind.SHIFT, current=15, value=30, **bounds) == 20
    assert new_offset(ResetKind.DATETIME, current=None, offset_for_time=13, **bounds) == 13
    assert new_offset(ResetKind.DATETIME, current=None, offset_for_time=-1, **bounds) == 20
    with pytest.raises(ValueError):
        new_offset(ResetKind.SHIFT, current=None, value=1, **bounds)


def test_datetimes_parse_as_iso_8601() -> None:
    assert parse_datetime_ms("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_datetime_ms("2024-05-01T14:00:00+02:00") == 1714564800000
    assert parse_datetime_ms("2024-05-01T12:00:00.250+00:00") == 1714564800250
    naive = datetime(2024, 5, 1, 12, 0).astimezone()  # no zone: local time, as kafka-consumer-groups
    assert parse_datetime_ms("2024-05-01T12:00:00") == int(naive.timestamp() * 1000)
    with pytest.raises(typer.BadParameter):
        parse_datetime_ms("01/05/2024")
