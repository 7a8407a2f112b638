"""`sluice groups`: list, describe, delete and reset consumer groups on any Kafka, like kafka-consumer-groups,
and share groups (KIP-932), like kafka-share-groups.

list, describe, delete and offline reset-offsets go through confluent-kafka's AdminClient and a
non-subscribing Consumer, so they work against sluice, Apache Kafka or Tansu alike; share groups through
Kafka's share-group APIs (:mod:`sluice.cli.share_groups`). What Kafka has no API for (create, delete
--force, reset-offsets --live) goes to a sluice broker's admin HTTP API (--admin). reset-offsets lives in
:mod:`sluice.cli.group_offsets`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from sluice.cli.common import (
    DEFAULT_BOOTSTRAP,
    Admin,
    Bootstrap,
    Settings,
    admin_address,
    admin_call,
    console,
    err_console,
    serving,
)
from sluice.cli.group_lookups import (
    REQUEST_TIMEOUT_S,
    JsonOutput,
    _admin,
    _admin_result,
    _committed_offsets,
    _dash,
    _describe_group,
    _existing_partitions,
    _fail,
    _kafka_error,
    _offsets_reader,
    _table,
    _use,
    _watermarks,
    state_name,
)
from sluice.cli.group_offsets import (
    ResetKind,
    new_offset,
    parse_datetime_ms,
    parse_duration_ms,
    reset_offsets,
)
from sluice.cli.share_groups import delete_offsets, share_admin, share_group_rows
from sluice.cli.share_groups import describe_data as share_describe_data
from sluice.cli.share_groups import lookup as share_lookup
from sluice.cli.share_groups import print_description as print_share_description

app = typer.Typer(
    help="List, describe, delete consumer and share groups and reset their offsets.", no_args_is_help=True
)


# ----- list -----


@app.command("list")
def list_groups(
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP, setting: Settings = None, json_output: JsonOutput = False
) -> None:
    """List consumer groups and share groups with their state and type."""
    _use(setting)
    admin = _admin(bootstrap)  # held until the future resolves: a collected client cancels its requests
    listed = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S)
    result = serving(admin, listed.result, REQUEST_TIMEOUT_S + 5)
    if result.errors and not result.valid:
        # No broker answered (unreachable, authentication refused...): an empty table would be a lie.
        _fail("could not list consumer groups: " + "; ".join(str(e) for e in result.errors))
    for error in result.errors:
        err_console.print(f"[yellow]warning:[/yellow] {error}")
    listed = {
        g.group_id: {
            "group": g.group_id,
            "state": state_name(g.state),
            "type": getattr(g.type, "name", str(g.type)).lower(),
        }
        for g in result.valid
    }
    # librdkafka lists consumer and classic groups only; the share groups come from Kafka's share-group type.
    listed |= {row["group"]: row for row in share_group_rows(bootstrap)}
    rows = sorted(listed.values(), key=lambda row: row["group"])
    if json_output:
        print(json.dumps(rows))
        return
    table = _table("groups", "group", "state", "type")
    for row in rows:
        table.add_row(row["group"], row["state"], row["type"])
    console.print(table)


# ----- describe -----


def describe_data(bootstrap: str, group: str) -> dict[str, Any] | None:
    """Everything `describe` shows, as plain data; None for an unknown group."""
    admin = _admin(bootstrap)
    description = _describe_group(admin, group)
    committed = _committed_offsets(admin, group)
    if description is None and not committed:
        return None
    members = []
    owner: dict[tuple[str, int], dict[str, Any]] = {}
    for member in description.members if description is not None else []:
        assigned = sorted((tp.topic, tp.partition) for tp in (member.assignment.topic_partitions or []))
        entry = {
            "member_id": member.member_id,
            "group_instance_id": member.group_instance_id,
            "client_id": member.client_id,
            "host": member.host,
            "assignment": [{"topic": t, "partition": p} for t, p in assigned],
        }
        members.append(entry)
        for key in assigned:
            owner[key] = entry
    offsets = []
    existing = _existing_partitions(admin)
    with _offsets_reader(bootstrap) as reader:
        for topic, partition in sorted(set(committed) | set(owner)):
            # An offset of a partition that does not exist (its topic deleted, or made again with fewer
            # partitions, on a cluster that kept the offset) has no log end: kafka-consumer-groups shows it
            # with "-" for both, and so do we, instead of failing the whole describe.
            found = (topic, partition) in existing
            log_end = _watermarks(reader, topic, partition)[1] if found else None
            current = committed.get((topic, partition))
            member = owner.get((topic, partition))
            offsets.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "current_offset": current,
                    "log_end_offset": log_end,
                    # No commit yet: the lag is undefined, as kafka-consumer-groups prints it ("-").
                    "lag": None if current is None or log_end is None else max(log_end - current, 0),
                    "member_id": member["member_id"] if member else None,
                    "client_id": member["client_id"] if member else None,
                    "host": member["host"] if member else None,
                }
            )
    return {
        "group": group,
        "state": state_name(description.state) if description is not None else "Empty",
        "type": getattr(description.type, "name", "CLASSIC").lower()
        if description is not None
        else "classic",
        "assignor": (description.partition_assignor or None) if description is not None else None,
        "members": members,
        "offsets": offsets,
    }


@app.command("describe")
def describe_group(
    group: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    json_output: JsonOutput = False,
) -> None:
    """State, assignor, members with their partitions, and offsets with lag.

    A consumer group's committed offsets; a share group's start offset of each share-partition."""
    _use(setting)
    with share_admin(bootstrap) as admin:
        shared = share_lookup(admin, group)
        if shared is not None:
            data = share_describe_data(admin, shared)
            if json_output:
                print(json.dumps(data))
            else:
                print_share_description(data)
            return
    data = describe_data(bootstrap, group)
    if data is None:
        _fail(f"consumer group {group!r} does not exist")
        return
    if json_output:
        print(json.dumps(data))
        return

    console.print(
        f"group [bold]{group}[/bold]  state {data['state']}  type {data['type']}  "
        f"assignor {_dash(data['assignor'])}  members {len(data['members'])}"
    )
    members = _table("members", "member id", "instance id", "client id", "host", "partitions")
    for member in data["members"]:
        assigned = ", ".join(f"{a['topic']}-{a['partition']}" for a in member["assignment"])
        members.add_row(
            member["member_id"],
            _dash(member["group_instance_id"]),
            member["client_id"],
            member["host"],
            _dash(assigned),
        )
    console.print(members)
    offsets = _table(
        "offsets", "topic", "partition", "current offset", "log end offset", "lag", "member id", "host"
    )
    for row in data["offsets"]:
        offsets.add_row(
            row["topic"],
            str(row["partition"]),
            _dash(row["current_offset"]),
            _dash(row["log_end_offset"]),
            _dash(row["lag"]),
            _dash(row["member_id"]),
            _dash(row["host"]),
        )
    console.print(offsets)


# ----- create / delete -----


@app.command("create")
def create_group(
    group: str,
    session_timeout_ms: Annotated[
        int | None,
        typer.Option(help="Session timeout members get when they ask for none the broker allows."),
    ] = None,
    ephemeral: Annotated[
        bool, typer.Option(help="Delete the group and its offsets when its last member leaves.")
    ] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    admin: Admin = None,
    json_output: JsonOutput = False,
) -> None:
    """Create a consumer group before any member joins (a sluice extension: the broker's admin API)."""
    body: dict[str, Any] = {"name": group, "ephemeral": ephemeral}
    if session_timeout_ms is not None:
        body["session_timeout_ms"] = session_timeout_ms
    status, answer = admin_call(admin_address(admin, bootstrap), "POST", "/v1/groups", body)
    if status == 409:
        _fail(f"consumer group {group!r} already exists")
    created = _admin_result(status, answer, f"could not create consumer group {group!r}")
    if json_output:
        print(json.dumps(created))
        return
    console.print(
        f"created consumer group {group}"
        + (f", session timeout {session_timeout_ms} ms" if session_timeout_ms is not None else "")
        + (", ephemeral" if ephemeral else "")
    )


@app.command("delete")
def delete_group(
    group: str,
    force: Annotated[
        bool, typer.Option(help="Delete even with active members (through the broker's admin API).")
    ] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    admin: Admin = None,
) -> None:
    """Delete a group and its offsets; refused while it has members unless --force.

    A share group goes with its share-partitions' state."""
    from confluent_kafka import KafkaError, KafkaException

    _use(setting)
    if force:
        from urllib.parse import quote

        status, answer = admin_call(
            admin_address(admin, bootstrap), "DELETE", f"/v1/groups/{quote(group, safe='')}?force=true"
        )
        if status == 404:
            _fail(f"consumer group {group!r} does not exist")
        _admin_result(status, answer, f"could not delete consumer group {group!r}")
        console.print(f"deleted consumer group {group}")
        return
    client = _admin(bootstrap)
    try:
        deleted = client.delete_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group]
        serving(client, deleted.result, REQUEST_TIMEOUT_S + 5)
    except KafkaException as exc:
        error = _kafka_error(exc)
        code = error.code() if error is not None else None
        if code == KafkaError.NON_EMPTY_GROUP:
            with share_admin(bootstrap) as shares:
                if share_lookup(shares, group) is not None:
                    _fail(f"Share group '{group}' is not empty.")
            _fail(
                f"consumer group {group!r} is not empty: it still has active members; stop them first "
                "(or --force)"
            )
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            _fail(f"consumer group {group!r} does not exist")
        _fail(f"could not delete consumer group {group!r}: {exc}")
    console.print(f"deleted group {group}")


# The reset lives in its own module; it is a command of this family all the same.
app.command("reset-offsets")(reset_offsets)
app.command("delete-offsets")(delete_offsets)

__all__ = ["ResetKind", "app", "new_offset", "parse_datetime_ms", "parse_duration_ms", "reset_offsets"]
