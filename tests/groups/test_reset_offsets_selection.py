"""`sluice groups reset-offsets`, kafka-consumer-groups parity beyond the reset kinds: `--topic T:P,P`,
`--all-topics`, `--to-current`, `--by-duration`, `--export` to CSV and `--from-file` back, against a real
broker, plus bad selections and bad files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from group_helpers import committed_offsets, create_topic, produce
from typer.testing import CliRunner

from sluice.cli.groups import app

PER_PARTITION = 10
HOUR_MS = 3_600_000
runner = CliRunner()


def groups(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--bootstrap", bootstrap])
    return result.exit_code, result.stdout, result.stderr


def reset(bootstrap: str, group: str, *args: str) -> str:
    code, out, err = groups(bootstrap, "reset-offsets", group, *args)
    assert code == 0, err
    return out


@pytest.fixture
def two_topics(bootstrap: str, topic_name: str, group_name: str) -> tuple[str, str]:
    """Topic A (2 partitions) and B (1), 10 records each stamped one hour apart ending an hour ago (record
    seq is 10 - seq hours old); the group has committed 3 everywhere."""
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    now_ms = int(time.time() * 1000)
    for name, partitions in ((a, 2), (b, 1)):
        create_topic(bootstrap, name, partitions)
        produce(
            bootstrap,
            name,
            partitions,
            PER_PARTITION,
            timestamp_of=lambda _p, seq: now_ms - (PER_PARTITION - seq) * HOUR_MS,
        )
    reset(bootstrap, group_name, "--topic", a, "--topic", b, "--to-offset", "3")
    assert committed_offsets(bootstrap, group_name) == {(a, 0): 3, (a, 1): 3, (b, 0): 3}
    return a, b


def test_topic_partition_lists_all_topics_export_and_from_file(
    bootstrap: str, two_topics: tuple[str, str], group_name: str, tmp_path: Path
) -> None:
    a, b = two_topics
    # T:P,P picks partitions of one topic; the other topic is untouched.
    reset(bootstrap, group_name, "--topic", f"{a}:1", "--to-offset", "7")
    assert committed_offsets(bootstrap, group_name) == {(a, 0): 3, (a, 1): 7, (b, 0): 3}
    # --export of a dry run: the plan as CSV, nothing changed; --to-current keeps what is committed.
    csv_text = reset(bootstrap, group_name, "--all-topics", "--to-current", "--dry-run", "--export")
    assert sorted(csv_text.splitlines()) == sorted([f"{a},0,3", f"{a},1,7", f"{b},0,3"])
    plan = tmp_path / "plan.csv"
    plan.write_text("topic,partition,offset\n" + csv_text)  # a header row is allowed
    # --all-topics: every topic the group committed.
    reset(bootstrap, group_name, "--all-topics", "--to-latest")
    assert committed_offsets(bootstrap, group_name) == {(a, 0): 10, (a, 1): 10, (b, 0): 10}
    # --from-file puts back exactly what was exported.
    reset(bootstrap, group_name, "--from-file", str(plan))
    assert committed_offsets(bootstrap, group_name) == {(a, 0): 3, (a, 1): 7, (b, 0): 3}
    # A file offset past the end is clamped, and the answer says both.
    beyond = tmp_path / "beyond.csv"
    beyond.write_text(f"{b},0,500\n")
    rows = json.loads(reset(bootstrap, group_name, "--from-file", str(beyond), "--json"))["partitions"]
    assert [(r["topic"], r["requested_offset"], r["new_offset"]) for r in rows] == [(b, 500, 10)]
    # T:P,P with both partitions, shifting from what is committed.
    rows = json.loads(reset(bootstrap, group_name, "--topic", f"{a}:0,1", "--shift-by", "-2", "--json"))[
        "partitions"
    ]
    assert {r["partition"]: (r["current_offset"], r["new_offset"]) for r in rows} == {0: (3, 1), 1: (7, 5)}


def test_by_duration_goes_back_from_now(bootstrap: str, two_topics: tuple[str, str], group_name: str) -> None:
    _, b = two_topics
    # 5 h 30 min ago: the first record at or after it is 5 hours old, which is seq 5.
    reset(bootstrap, group_name, "--topic", b, "--by-duration", "PT5H30M")
    assert committed_offsets(bootstrap, group_name)[(b, 0)] == 5
    reset(bootstrap, group_name, "--topic", b, "--by-duration", "P1D")  # older than every record
    assert committed_offsets(bootstrap, group_name)[(b, 0)] == 0
    reset(bootstrap, group_name, "--topic", b, "--by-duration", "PT1M")  # newer than every record: the end
    assert committed_offsets(bootstrap, group_name)[(b, 0)] == PER_PARTITION


def test_bad_selections_and_files_are_refused_and_change_nothing(
    bootstrap: str, two_topics: tuple[str, str], group_name: str, tmp_path: Path
) -> None:
    a, b = two_topics
    before = committed_offsets(bootstrap, group_name)
    garbage = tmp_path / "garbage.csv"
    garbage.write_text(f"{a},0,1\n{a},zero,1\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("topic,partition,offset\n")
    unknown_partition = tmp_path / "unknown.csv"
    unknown_partition.write_text(f"{a},0,1\n{a},5,1\n")
    cases = [
        (("--from-file", str(garbage)), 2, "line 2"),
        (("--from-file", str(empty)), 2, "names no partitions"),
        (("--from-file", str(tmp_path / "absent.csv")), 2, "absent.csv"),
        (("--from-file", str(unknown_partition)), 1, "no partition 5"),
        (("--from-file", str(garbage), "--to-offset", "1"), 2, "exactly one"),
        (("--topic", f"{a}:x", "--to-earliest"), 2, "partitions must be numbers"),
        (("--topic", f"{a}:", "--to-earliest"), 2, "TOPIC:P"),
        (("--topic", f"{a}:0,9", "--to-earliest"), 1, "no partition 9"),
        (("--topic", b, "--by-duration", "5 hours"), 2, "P1DT2H30M"),
        (("--topic", b, "--by-duration", "PT1H", "--to-datetime", "2026-01-01T00:00:00"), 2, "exactly one"),
        (("--to-earliest",), 2, "--all-topics"),
    ]
    for args, code, message in cases:
        got, _, err = groups(bootstrap, "reset-offsets", group_name, *args)
        # typer draws usage errors in a box 80 columns wide: a long path is cut across its lines.
        unboxed = "".join(ch for ch in err if not ch.isspace() and ch not in "│╭╮╰╯─")
        assert (got, "".join(message.split()) in unboxed) == (code, True), (args, got, err)
    assert committed_offsets(bootstrap, group_name) == before
    # --all-topics of a group that never committed covers nothing.
    got, _, err = groups(bootstrap, "reset-offsets", f"{group_name}-new", "--all-topics", "--to-earliest")
    assert got == 1 and "covers nothing" in err
