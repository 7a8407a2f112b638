"""The share groups (KIP-932) in `sluice groups`: listed, described, reset and deleted like
kafka-share-groups.sh does it, through Kafka's share-group APIs (sluice.client.share_admin), so against
sluice or any Kafka 4.2+ cluster. The commands themselves live in :mod:`sluice.cli.groups` and
:mod:`sluice.cli.group_offsets`: a group id names one kind of group, and they ask which before they act.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sluice.cli.common import DEFAULT_BOOTSTRAP, Bootstrap, Settings, console, err_console, parse_settings
from sluice.cli.group_lookups import (
    REQUEST_TIMEOUT_S,
    JsonOutput,
    _client_settings,
    _dash,
    _fail,
    _table,
    _use,
)
from sluice.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from sluice.client.share_admin import ShareAdmin, ShareGroupDescription


def share_admin(bootstrap: str) -> ShareAdmin:
    """A share-group admin with the command's -X settings (TLS, SASL PLAIN or SCRAM, as librdkafka's)."""
    from sluice.client.share_admin import ShareAdmin

    return ShareAdmin(
        bootstrap,
        parse_settings(_client_settings),
        timeout_s=REQUEST_TIMEOUT_S,
        client_id="sluice-groups-cli",
    )


def not_empty(group: str) -> str:
    return f"Share group '{group}' is not empty."  # kafka-share-groups.sh's words


@contextmanager
def answered(group: str) -> Iterator[None]:
    """A share-group call whose failure ends the command: Kafka's refusal in kafka-share-groups' words, or
    why the cluster could not be asked."""
    try:
        yield
    except KafkaError as exc:
        _fail(
            not_empty(group) if exc.code is ErrorCode.NON_EMPTY_GROUP else f"{exc.code.name}: {exc.message}"
        )
    except OSError as exc:
        _fail(f"share group {group!r}: {exc}")


def lookup(admin: ShareAdmin, group: str, *, strict: bool = False) -> ShareGroupDescription | None:
    """The share group `group`, or None when it is no share group (unknown, of another type, or the cluster
    serves no share groups, or the settings ask for a login this client cannot make: OAUTHBEARER, GSSAPI).
    A failure to ask is a warning, and the caller goes on as for a consumer group; `strict` (a command only
    for share groups) ends the command instead."""
    from sluice.client.secure import supported

    if not supported(admin.settings):
        return None
    if strict:
        with answered(group):
            return admin.describe(group)
    try:
        return admin.describe(group)
    except KafkaError as exc:
        if exc.code is not ErrorCode.UNSUPPORTED_VERSION:
            err_console.print(f"[yellow]warning:[/yellow] share groups not looked up: {exc.message}")
        return None
    except OSError as exc:
        err_console.print(f"[yellow]warning:[/yellow] share groups not looked up: {exc}")
        return None


# ----- list -----


def share_group_rows(bootstrap: str) -> list[dict[str, str]]:
    """`groups list` rows of the cluster's share groups; a cluster without them gives none."""
    try:
        with share_admin(bootstrap) as admin:
            listed = admin.list_groups()
    except (KafkaError, OSError) as exc:
        err_console.print(f"[yellow]warning:[/yellow] share groups not listed: {exc}")
        return []
    return [{"group": g.group_id, "state": g.state, "type": "share"} for g in listed]


# ----- describe -----


def describe_data(admin: ShareAdmin, description: ShareGroupDescription) -> dict[str, Any]:
    """What `groups describe` shows of a share group, as plain data: members and, per share-partition, the
    start offset and lag (DescribeShareGroupOffsets; lag from v1, Kafka 4.3, else None)."""
    from sluice.client.share_admin import share_partitions

    with answered(description.group_id):
        offsets = admin.offsets(description.group_id)
    members = [
        {
            "member_id": member.member_id,
            "client_id": member.client_id,
            "host": member.host,
            "rack_id": member.rack_id,
            "member_epoch": member.member_epoch,
            "assignment": [{"topic": t, "partition": p} for t, p in member.assignment],
        }
        for member in description.members
    ]
    offsets = [
        {
            "topic": view.topic,
            "partition": view.partition,
            "start_offset": view.start_offset,
            "lag": view.lag,
            "member_ids": [member.member_id for member in view.readers],
        }
        for view in share_partitions(description, offsets)
    ]
    node, host, port = description.coordinator
    return {
        "group": description.group_id,
        "state": description.state,
        "type": "share",
        "assignor": description.assignor,
        "group_epoch": description.group_epoch,
        "assignment_epoch": description.assignment_epoch,
        "coordinator": {"node_id": node, "host": host, "port": port},
        "members": members,
        "offsets": offsets,
    }


def print_description(data: dict[str, Any]) -> None:

    group = data["group"]
    coordinator = data["coordinator"]
    console.print(
        f"group [bold]{group}[/bold]  state {data['state']}  type share  assignor {data['assignor']}  "
        f"members {len(data['members'])}  coordinator {coordinator['host']}:{coordinator['port']} "
        f"({coordinator['node_id']})"
    )
    if not data["members"]:
        err_console.print(f"Share group '{group}' has no active members.")
    members = _table("members", "member id", "client id", "host", "partitions")
    for member in data["members"]:
        assigned = ", ".join(f"{a['topic']}-{a['partition']}" for a in member["assignment"])
        members.add_row(member["member_id"], member["client_id"], member["host"], _dash(assigned))
    console.print(members)
    offsets = _table("share-partitions", "topic", "partition", "start offset", "lag", "members")
    for row in data["offsets"]:
        offsets.add_row(
            row["topic"],
            str(row["partition"]),
            _dash(row["start_offset"]),
            _dash(row["lag"]),
            str(len(row["member_ids"])),
        )
    console.print(offsets)


# ----- reset -----


def start_offsets(admin: ShareAdmin, group: str) -> dict[tuple[str, int], int]:
    """The group's start offsets where it has them: what a reset starts from (its "current offset")."""
    with answered(group):
        found = admin.offsets(group)
    return {(row.topic, row.partition): row.start_offset for row in found if row.start_offset is not None}


def apply_reset(admin: ShareAdmin, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """AlterShareGroupOffsets; any refusal ends the command with the broker's reason."""
    with answered(group):
        results = admin.alter_offsets(group, offsets)
    failed = [(key, error) for key, error in sorted(results.items()) if error is not None]
    if failed:
        _fail("; ".join(f"{t}-{p}: {error.code.name}: {error.message}" for (t, p), error in failed))


# ----- delete-offsets -----


def delete_offsets(
    group: str,
    topic: Annotated[list[str], typer.Option("--topic", "-t", help="A topic whose offsets go (repeatable).")],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    json_output: JsonOutput = False,
) -> None:
    """Delete a share group's offsets of whole topics, as kafka-share-groups.sh --delete-offsets.

    Its members start those topics again where share.auto.offset.reset says. Refused while it has members."""
    _use(setting)
    with share_admin(bootstrap) as admin:
        if lookup(admin, group, strict=True) is None:
            _fail(f"Share group '{group}' does not exist.")
        with answered(group):
            results = admin.delete_offsets(group, sorted(set(topic)))
    rows = [
        {
            "topic": name,
            "error": None if error is None else error.code.name,
            "message": None if error is None else error.message,
        }
        for name, error in sorted(results.items())
    ]
    if json_output:
        print(json.dumps({"group": group, "topics": rows}))
    else:
        table = _table(f"offsets of {group} deleted", "topic", "status")
        for row in rows:
            table.add_row(row["topic"], "Successful" if row["error"] is None else f"Error: {row['message']}")
        console.print(table)
    if any(row["error"] is not None for row in rows):
        raise typer.Exit(1)
