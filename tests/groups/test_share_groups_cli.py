"""`sluice groups` on share groups (KIP-932) made by confluent-kafka's ShareConsumer against the real broker:
list, describe (members, start offsets, lag), reset-offsets, delete-offsets and delete, refused with Kafka's
words while the group has members."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import AcknowledgeType
from group_helpers import create_topic, produce
from typer.testing import CliRunner

from sluice.cli.groups import app

PARTITIONS = 2
PER_PARTITION = 10
runner = CliRunner()


def groups(bootstrap: str, *args: str) -> tuple[int, str, str]:
    """Exit code, output, and the error output with rich's line wrapping undone."""
    result = runner.invoke(app, [*args, "--bootstrap", bootstrap])
    return result.exit_code, result.stdout, " ".join(result.stderr.split())


def groups_json(bootstrap: str, *args: str) -> Any:
    code, out, err = groups(bootstrap, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def share_offsets(bootstrap: str, group: str) -> dict[int, tuple[int | None, int | None]]:
    """partition -> (start offset, lag), as `groups describe` shows them."""
    described = groups_json(bootstrap, "describe", group)
    assert described["type"] == "share"
    return {row["partition"]: (row["start_offset"], row["lag"]) for row in described["offsets"]}


def release_3_and_4_of_partition_1(message: Any) -> AcknowledgeType:
    if message.partition() == 1 and message.offset() in (3, 4):
        return AcknowledgeType.RELEASE
    return AcknowledgeType.ACCEPT


def test_a_share_group_is_listed_described_reset_and_deleted(
    bootstrap: str, topic_name: str, group_name: str, share_member: Any
) -> None:
    base_ms = (int(time.time()) - 60) * 1000
    create_topic(bootstrap, topic_name, PARTITIONS)
    produce(
        bootstrap, topic_name, PARTITIONS, PER_PARTITION, timestamp_of=lambda _p, seq: base_ms + seq * 1000
    )
    member = share_member(bootstrap, group_name, [topic_name], client_id="cli-share-member")
    member.take(PARTITIONS * PER_PARTITION, release_3_and_4_of_partition_1)

    assert {"group": group_name, "state": "Stable", "type": "share"} in groups_json(bootstrap, "list")
    described = groups_json(bootstrap, "describe", group_name)
    assert (described["state"], described["type"], described["assignor"]) == ("Stable", "share", "simple")
    [shown] = described["members"]
    assert shown["client_id"] == "cli-share-member" and shown["host"].endswith("127.0.0.1")
    assert shown["assignment"] == [{"topic": topic_name, "partition": p} for p in range(PARTITIONS)]
    # Partition 1 starts at its first released record; 5-9 were accepted, so 2 records (3, 4) are left.
    assert {
        row["partition"]: (row["start_offset"], row["lag"], row["member_ids"]) for row in described["offsets"]
    } == {
        0: (10, 0, [shown["member_id"]]),
        1: (3, 2, [shown["member_id"]]),
    }
    code, table, _ = groups(bootstrap, "describe", group_name)
    assert code == 0 and "share-partitions" in table and "cli-share-member" in table and "simple" in table

    # Kafka's rule, in kafka-share-groups' words: nothing moves while the group has members.
    refusal = f"Share group '{group_name}' is not empty."
    for args in (
        ["reset-offsets", group_name, "--topic", topic_name, "--to-earliest", "--dry-run"],
        ["reset-offsets", group_name, "--topic", topic_name, "--to-earliest"],
        ["delete-offsets", group_name, "--topic", topic_name],
        ["delete", group_name],
    ):
        code, out, err = groups(bootstrap, *args)
        assert code == 1 and refusal in err, (args, out, err)
    code, _, err = groups(
        bootstrap, "reset-offsets", group_name, "--topic", topic_name, "--to-earliest", "--live"
    )
    assert code == 1 and "no live rewind" in err
    assert share_offsets(bootstrap, group_name) == {0: (10, 0), 1: (3, 2)}

    member.close()
    assert groups_json(bootstrap, "describe", group_name)["state"] == "Empty"
    plan = groups_json(bootstrap, "reset-offsets", group_name, "--all-topics", "--to-earliest", "--dry-run")
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in plan["partitions"]] == [
        (0, 10, 0),
        (1, 3, 0),
    ]
    assert share_offsets(bootstrap, group_name) == {0: (10, 0), 1: (3, 2)}  # a dry run changes nothing

    # --to-datetime: the first record at or after the time, here the sixth of each partition.
    moment = datetime.fromtimestamp((base_ms + 5000) / 1000, UTC).isoformat()
    plan = groups_json(
        bootstrap, "reset-offsets", group_name, "--topic", topic_name, "--to-datetime", moment, "--execute"
    )
    assert [r["new_offset"] for r in plan["partitions"]] == [5, 5]
    assert share_offsets(bootstrap, group_name) == {0: (5, 5), 1: (5, 5)}
    # A member now gets exactly the records from there on, the released ones before it no more.
    again = share_member(bootstrap, group_name, [topic_name], client_id="after-reset")
    assert sorted((m.partition(), m.offset()) for m in again.take(10)) == [
        (p, o) for p in (0, 1) for o in range(5, 10)
    ]
    again.close()
    assert share_offsets(bootstrap, group_name) == {0: (10, 0), 1: (10, 0)}
    groups(bootstrap, "reset-offsets", group_name, "--topic", f"{topic_name}:1", "--to-offset", "7")
    assert share_offsets(bootstrap, group_name) == {0: (10, 0), 1: (7, 3)}

    code, out, _ = groups(bootstrap, "delete-offsets", group_name, "--topic", topic_name)
    assert code == 0 and "Successful" in out
    assert share_offsets(bootstrap, group_name) == {}
    code, out, _ = groups(bootstrap, "delete-offsets", group_name, "--topic", topic_name, "--json")
    assert code == 1
    assert json.loads(out)["topics"] == [
        {
            "topic": topic_name,
            "error": "UNKNOWN_TOPIC_OR_PARTITION",
            "message": "There is no offset information to delete.",
        }
    ]

    code, out, _ = groups(bootstrap, "delete", group_name)
    assert code == 0 and f"deleted group {group_name}" in out
    assert group_name not in {row["group"] for row in groups_json(bootstrap, "list")}
    code, _, err = groups(bootstrap, "describe", group_name)
    assert code == 1 and "does not exist" in err


def test_a_reset_with_share_creates_the_share_group(bootstrap: str, topic_name: str, group_name: str) -> None:
    create_topic(bootstrap, topic_name, PARTITIONS)
    produce(bootstrap, topic_name, PARTITIONS, PER_PARTITION)
    code, _, err = groups(bootstrap, "delete-offsets", group_name, "--topic", topic_name)
    assert code == 1 and f"Share group '{group_name}' does not exist." in err

    plan = groups_json(
        bootstrap, "reset-offsets", group_name, "--share", "--topic", topic_name, "--to-offset", "4"
    )
    assert [(r["current_offset"], r["new_offset"]) for r in plan["partitions"]] == [(None, 4), (None, 4)]
    assert {"group": group_name, "state": "Empty", "type": "share"} in groups_json(bootstrap, "list")
    assert share_offsets(bootstrap, group_name) == {0: (4, 6), 1: (4, 6)}
    # Once a share group, recognised without --share.
    groups(bootstrap, "reset-offsets", group_name, "--topic", topic_name, "--to-latest")
    assert share_offsets(bootstrap, group_name) == {0: (10, 0), 1: (10, 0)}
