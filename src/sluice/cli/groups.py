"""`sluice groups`: list, describe, delete and reset consumer groups on any Kafka, like kafka-consumer-groups.

Everything goes through confluent-kafka's AdminClient (groups, committed offsets) and a non-subscribing
Consumer (watermarks, offsets for a time), so the commands work against sluice, Apache Kafka or Tansu alike.
The offset arithmetic of reset-offsets is the pure function :func:`new_offset`, kept apart from the I/O.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sluice.cli.common import (
    DEFAULT_BOOTSTRAP,
    Admin,
    Bootstrap,
    Settings,
    admin_address,
    admin_call,
    admin_client,
    client_config,
    parse_settings,
)

app = typer.Typer(
    help="List, describe, delete consumer groups and reset their offsets.", no_args_is_help=True
)
console = Console()
err_console = Console(stderr=True)
# Table cells wrap long ids onto more lines instead of cutting them short: a truncated member id is useless.
OVERFLOW = "fold"

REQUEST_TIMEOUT_S = 15.0
# -X settings of the running command, for every client it makes (set once per command by _use).
_client_settings: list[str] = []
JsonOutput = Annotated[bool, typer.Option("--json", help="Machine-readable JSON instead of tables.")]

# librdkafka's enum names, spelled as Kafka itself prints group states.
_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "UNKNOWN": "Unknown",
    "UNKOWN": "Unknown",  # librdkafka's old misspelling, still an alias
}
# Offsets may only be reset while nobody consumes: an active member would overwrite them at its next commit.
RESETTABLE_STATES = {"Empty", "Dead"}


def state_name(state: Any) -> str:
    name = getattr(state, "name", None) or str(state)
    return _STATE_NAMES.get(name, name)


def _fail(message: str) -> None:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def _use(settings: list[str] | None) -> None:
    _client_settings[:] = settings or []
    parse_settings(_client_settings)  # a malformed -X fails here, before any client is made


def _admin(bootstrap: str) -> Any:
    return admin_client(bootstrap, _client_settings)


@contextmanager
def _offsets_reader(bootstrap: str) -> Iterator[Any]:
    """A Consumer that never subscribes, so it never joins any group: only for offset lookups."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        client_config(
            bootstrap,
            _client_settings,
            group_id="sluice-groups-cli",
            enable_auto_commit=False,
            socket_timeout_ms=10000,
        )
    )
    try:
        yield consumer
    finally:
        consumer.close()


def _kafka_error(exc: BaseException) -> Any:
    """The KafkaError inside a KafkaException from a future, or None."""
    args = getattr(exc, "args", ())
    return args[0] if args and hasattr(args[0], "code") else None


# ----- lookups -----


def _describe_group(admin: Any, group: str) -> Any | None:
    """The group's ConsumerGroupDescription, or None if the broker does not know it."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        description = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[
            group
        ].result()
    except KafkaException as exc:
        error = _kafka_error(exc)
        if error is not None and error.code() == KafkaError.GROUP_ID_NOT_FOUND:
            return None
        raise
    # Brokers before DescribeGroups v6 answer an unknown group with state Dead and no error.
    if state_name(description.state) == "Dead" and not description.members:
        return None
    return description


def _committed_offsets(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group].result()
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def _watermarks(consumer: Any, topic: str, partition: int) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S)


def _topic_partitions(admin: Any, topic: str) -> list[int]:
    # All topics, not list_topics(topic=...): asking for one by name lets the broker auto-create it.
    metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        _fail(f"topic {topic!r} does not exist")
    return sorted(described.partitions)


# ----- list -----


@app.command("list")
def list_groups(
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP, setting: Settings = None, json_output: JsonOutput = False
) -> None:
    """List consumer groups with their state and type."""
    _use(setting)
    admin = _admin(bootstrap)  # held until the future resolves: a collected client cancels its requests
    result = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result()
    for error in result.errors:
        err_console.print(f"[yellow]warning:[/yellow] {error}")
    rows = sorted(
        (
            {
                "group": g.group_id,
                "state": state_name(g.state),
                "type": getattr(g.type, "name", str(g.type)).lower(),
            }
            for g in result.valid
        ),
        key=lambda row: row["group"],
    )
    if json_output:
        print(json.dumps(rows))
        return
    table = Table(title="consumer groups")
    for column in ("group", "state", "type"):
        table.add_column(column, overflow=OVERFLOW)
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
    with _offsets_reader(bootstrap) as reader:
        for topic, partition in sorted(set(committed) | set(owner)):
            _, log_end = _watermarks(reader, topic, partition)
            current = committed.get((topic, partition))
            member = owner.get((topic, partition))
            offsets.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "current_offset": current,
                    "log_end_offset": log_end,
                    # No commit yet: the lag is undefined, as kafka-consumer-groups prints it ("-").
                    "lag": None if current is None else max(log_end - current, 0),
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


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


@app.command("describe")
def describe_group(
    group: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    json_output: JsonOutput = False,
) -> None:
    """State, assignor, members with their partitions, and committed offsets with lag."""
    _use(setting)
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
    members = Table(title="members")
    for column in ("member id", "instance id", "client id", "host", "partitions"):
        members.add_column(column, overflow=OVERFLOW)
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
    offsets = Table(title="offsets")
    for column in ("topic", "partition", "current offset", "log end offset", "lag", "member id", "host"):
        offsets.add_column(column, overflow=OVERFLOW)
    for row in data["offsets"]:
        offsets.add_row(
            row["topic"],
            str(row["partition"]),
            _dash(row["current_offset"]),
            str(row["log_end_offset"]),
            _dash(row["lag"]),
            _dash(row["member_id"]),
            _dash(row["host"]),
        )
    console.print(offsets)


# ----- create / delete -----


def _admin_result(status: int, body: Any, what: str) -> Any:
    if 200 <= status < 300:
        return body
    detail = body.get("message", body) if isinstance(body, dict) else body
    name = body.get("error", status) if isinstance(body, dict) else status
    _fail(f"{what}: {name}: {detail}")
    return None


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
    """Delete a group and its committed offsets; refused while it has members unless --force."""
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
        client.delete_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group].result()
    except KafkaException as exc:
        error = _kafka_error(exc)
        code = error.code() if error is not None else None
        if code == KafkaError.NON_EMPTY_GROUP:
            _fail(
                f"consumer group {group!r} is not empty: it still has active members; stop them first "
                "(or --force)"
            )
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            _fail(f"consumer group {group!r} does not exist")
        _fail(f"could not delete consumer group {group!r}: {exc}")
    console.print(f"deleted consumer group {group}")


# ----- reset-offsets -----


class ResetKind(StrEnum):
    EARLIEST = "to-earliest"
    LATEST = "to-latest"
    DATETIME = "to-datetime"
    OFFSET = "to-offset"
    SHIFT = "shift-by"
    CURRENT = "to-current"


@dataclass(frozen=True)
class PartitionPlan:
    topic: str
    partition: int
    current: int | None
    new: int
    requested: int | None = None  # before clamping to the log; None when it equals `new`


def target_offset(
    kind: ResetKind,
    *,
    current: int | None,
    earliest: int,
    latest: int,
    value: int = 0,
    offset_for_time: int = -1,
) -> int:
    """Where a reset asks to put one partition, before clamping to the log."""
    if kind is ResetKind.EARLIEST:
        return earliest
    if kind is ResetKind.LATEST:
        return latest
    if kind is ResetKind.DATETIME:
        return latest if offset_for_time < 0 else offset_for_time
    if kind is ResetKind.OFFSET:
        return value
    if current is None:
        raise ValueError("no committed offset to start from")
    return current if kind is ResetKind.CURRENT else current + value


def new_offset(
    kind: ResetKind,
    *,
    current: int | None,
    earliest: int,
    latest: int,
    value: int = 0,
    offset_for_time: int = -1,
) -> int:
    """Where a reset puts one partition; every result lies in [earliest, latest] as Kafka clamps it.

    ``offset_for_time`` is the broker's answer for --to-datetime: the first offset whose timestamp is at
    or after the time, or -1 when every record is older (then the partition goes to its end).
    """
    target = target_offset(
        kind, current=current, earliest=earliest, latest=latest, value=value, offset_for_time=offset_for_time
    )
    return min(max(target, earliest), latest)


def parse_datetime_ms(text: str) -> int:
    """ISO-8601 (e.g. 2024-05-01T12:00:00Z or ...+02:00) to epoch ms; no zone means local time, as Kafka."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"expected an ISO-8601 date-time, got {text!r}", param_hint="--to-datetime"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration_ms(text: str) -> int:
    """ISO-8601 duration as kafka-consumer-groups takes it: PnDTnHnM (and nS)."""
    match = _DURATION.match(text.strip().upper())
    if match is None or text.strip().upper() in {"P", "PT"} or text.strip().upper().endswith("T"):
        raise typer.BadParameter(
            f"expected a duration like P1DT2H30M, got {text!r}", param_hint="--by-duration"
        )
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """--topic T or T:P[,P...] as kafka-consumer-groups takes it."""
    topic, sep, parts = text.partition(":")
    if not topic:
        raise typer.BadParameter(f"expected TOPIC or TOPIC:P,P, got {text!r}", param_hint="--topic")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise typer.BadParameter(f"partitions must be numbers, got {parts!r}", param_hint="--topic") from None
    if not partitions or any(p < 0 for p in partitions):
        raise typer.BadParameter(f"expected TOPIC:P[,P...], got {text!r}", param_hint="--topic")
    return topic, partitions


def read_plan_file(path: Path) -> dict[tuple[str, int], int]:
    """A CSV of TOPIC,PARTITION,OFFSET rows (what --export writes; a header row is allowed)."""
    offsets: dict[tuple[str, int], int] = {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise typer.BadParameter(str(exc), param_hint="--from-file") from None
    for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or row[0].strip().startswith("#") or row[0].strip().lower() == "topic":
            continue
        try:
            topic, partition, offset = (cell.strip() for cell in row[:3])
            offsets[(topic, int(partition))] = int(offset)
        except ValueError:
            raise typer.BadParameter(
                f"line {number}: expected TOPIC,PARTITION,OFFSET, got {','.join(row)!r}",
                param_hint="--from-file",
            ) from None
    if not offsets:
        raise typer.BadParameter("the file names no partitions", param_hint="--from-file")
    return offsets


def plan_reset(
    bootstrap: str,
    admin: Any,
    group: str,
    topic: str,
    partitions: list[int],
    kind: ResetKind,
    value: int,
    timestamp_ms: int | None,
    committed: dict[tuple[str, int], int] | None = None,
    values: dict[int, int] | None = None,
) -> list[PartitionPlan]:
    """The plan for one topic; `values` gives a per-partition --to-offset (from a file)."""
    from confluent_kafka import TopicPartition

    if committed is None:
        committed = _committed_offsets(admin, group)
    plans = []
    with _offsets_reader(bootstrap) as reader:
        for_time: dict[int, int] = {}
        if kind is ResetKind.DATETIME:
            assert timestamp_ms is not None
            found = reader.offsets_for_times(
                [TopicPartition(topic, p, timestamp_ms) for p in partitions], timeout=REQUEST_TIMEOUT_S
            )
            for tp in found:
                if tp.error is not None:
                    _fail(f"offset lookup for {topic}-{tp.partition} failed: {tp.error}")
                for_time[tp.partition] = tp.offset
        for partition in partitions:
            earliest, latest = _watermarks(reader, topic, partition)
            current = committed.get((topic, partition))
            if kind in (ResetKind.SHIFT, ResetKind.CURRENT) and current is None:
                verb = "shift" if kind is ResetKind.SHIFT else "keep the current offset of"
                _fail(f"cannot {verb} {topic}-{partition}: group {group!r} has no committed offset there")
            asked = target_offset(
                kind,
                current=current,
                earliest=earliest,
                latest=latest,
                value=values[partition] if values is not None else value,
                offset_for_time=for_time.get(partition, -1),
            )
            plans.append(PartitionPlan(topic, partition, current, min(max(asked, earliest), latest), asked))
    return plans


def _selected_topics(
    admin: Any, group: str, topics: list[str], all_topics: bool, partition: list[int] | None
) -> dict[str, list[int]]:
    """topic -> partitions the reset covers."""
    chosen: dict[str, list[int] | None] = {}
    for spec in topics:
        name, parts = parse_topic_spec(spec)
        chosen[name] = sorted(set(parts or []) | set(chosen.get(name) or [])) if parts else chosen.get(name)
    if all_topics:
        for name, _ in _committed_offsets(admin, group):
            chosen.setdefault(name, None)
        if not chosen:
            _fail(f"consumer group {group!r} has no committed offsets: --all-topics covers nothing")
    if not chosen:
        raise typer.BadParameter("give --topic (repeatable), --all-topics or --from-file")
    out: dict[str, list[int]] = {}
    for name, parts in chosen.items():
        available = _topic_partitions(admin, name)
        wanted = parts if parts is not None else (sorted(set(partition)) if partition else available)
        missing = [p for p in wanted if p not in available]
        if missing:
            _fail(f"topic {name!r} has no partition {', '.join(map(str, missing))}")
        out[name] = wanted
    return out


def _apply_offline(admin: Any, group: str, plans: list[PartitionPlan]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(p.topic, p.partition, p.new) for p in plans]
    )
    result = admin.alter_consumer_group_offsets([request], request_timeout=REQUEST_TIMEOUT_S)[group].result()
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        _fail("; ".join(f"{tp.topic}-{tp.partition}: {tp.error}" for tp in failed))


def _apply_live(address: str, group: str, plans: list[PartitionPlan]) -> list[PartitionPlan]:
    """Rewind through the broker's admin API; the answer has the offsets the broker actually set."""
    from urllib.parse import quote

    body = {
        "live": True,
        "offsets": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "offset": p.requested if p.requested is not None else p.new,
            }
            for p in plans
        ],
    }
    status, answer = admin_call(address, "POST", f"/v1/groups/{quote(group, safe='')}/rewind", body)
    result = _admin_result(status, answer, f"could not rewind consumer group {group!r}")
    actual = {(row["topic"], row["partition"]): row["actual"] for row in result["offsets"]}
    return [
        PartitionPlan(p.topic, p.partition, p.current, actual[(p.topic, p.partition)], p.requested)
        for p in plans
    ]


@app.command("reset-offsets")
def reset_offsets(
    group: str,
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", "-t", help="TOPIC or TOPIC:P[,P...] (repeatable)."),
    ] = None,
    all_topics: Annotated[
        bool, typer.Option("--all-topics", help="Every topic the group has committed offsets for.")
    ] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Reset to the log start.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Reset to the log end.")] = False,
    to_current: Annotated[bool, typer.Option("--to-current", help="Reset to the committed offset.")] = False,
    to_datetime: Annotated[
        str | None, typer.Option("--to-datetime", help="ISO-8601 time; first offset at or after it.")
    ] = None,
    by_duration: Annotated[
        str | None, typer.Option("--by-duration", help="PnDTnHnM before now; first offset at or after it.")
    ] = None,
    to_offset: Annotated[
        int | None, typer.Option("--to-offset", help="An absolute offset (clamped to the log).")
    ] = None,
    shift_by: Annotated[
        int | None, typer.Option("--shift-by", help="Move committed offsets by N (may be negative).")
    ] = None,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="CSV of TOPIC,PARTITION,OFFSET (as --export writes).")
    ] = None,
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", help="Only this partition (repeatable).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, change nothing.")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Apply the plan (the default).")] = False,
    live: Annotated[
        bool,
        typer.Option("--live", help="Rewind a running group: its members resume from the new offsets."),
    ] = False,
    export: Annotated[bool, typer.Option("--export", help="Print the plan as CSV.")] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    admin: Admin = None,
    json_output: JsonOutput = False,
) -> None:
    """Move a group's committed offsets. Without --live the group must have no active members; with --live
    the broker moves a running group's members to the new offsets (sluice's admin API)."""
    _use(setting)
    chosen = [
        kind
        for kind, given in (
            (ResetKind.EARLIEST, to_earliest),
            (ResetKind.LATEST, to_latest),
            (ResetKind.CURRENT, to_current),
            (ResetKind.DATETIME, to_datetime is not None or by_duration is not None),
            (ResetKind.OFFSET, to_offset is not None or from_file is not None),
            (ResetKind.SHIFT, shift_by is not None),
        )
        if given
    ]
    several_times = to_datetime is not None and by_duration is not None
    several_offsets = to_offset is not None and from_file is not None
    if len(chosen) != 1 or several_times or several_offsets:
        raise typer.BadParameter(
            "give exactly one of --to-earliest, --to-latest, --to-current, --to-datetime, --by-duration, "
            "--to-offset, --shift-by, --from-file"
        )
    if dry_run and execute:
        raise typer.BadParameter("give --dry-run or --execute, not both")
    kind = chosen[0]
    timestamp_ms = None
    if to_datetime is not None:
        timestamp_ms = parse_datetime_ms(to_datetime)
    elif by_duration is not None:
        timestamp_ms = int(datetime.now().timestamp() * 1000) - parse_duration_ms(by_duration)
        kind = ResetKind.DATETIME
    value = to_offset if to_offset is not None else shift_by if shift_by is not None else 0
    file_offsets = read_plan_file(from_file) if from_file is not None else None
    client = _admin(bootstrap)
    description = _describe_group(client, group)
    state = state_name(description.state) if description is not None else "Dead"
    if state not in RESETTABLE_STATES and not live:
        _fail(
            f"offsets of consumer group {group!r} can only be reset while it is inactive, but it is {state} "
            f"with {len(description.members)} member(s); stop its consumers first, or rewind it --live"
        )
    committed = _committed_offsets(client, group)
    if file_offsets is not None:
        by_topic: dict[str, dict[int, int]] = {}
        for (name, p), offset in file_offsets.items():
            by_topic.setdefault(name, {})[p] = offset
        for name, parts in by_topic.items():
            missing = [p for p in parts if p not in _topic_partitions(client, name)]
            if missing:
                _fail(f"topic {name!r} has no partition {', '.join(map(str, missing))}")
        selected = {name: sorted(parts) for name, parts in by_topic.items()}
    else:
        selected = _selected_topics(client, group, topic or [], all_topics, partition)
    plans: list[PartitionPlan] = []
    for name, parts in selected.items():
        plans += plan_reset(
            bootstrap,
            client,
            group,
            name,
            parts,
            kind,
            value,
            timestamp_ms,
            committed,
            values=by_topic[name] if file_offsets is not None else None,
        )
    if not dry_run:
        if live:
            plans = _apply_live(admin_address(admin, bootstrap), group, plans)
        else:
            _apply_offline(client, group, plans)
    _print_plans(group, plans, dry_run, live, export, json_output)


def _print_plans(
    group: str, plans: list[PartitionPlan], dry_run: bool, live: bool, export: bool, json_output: bool
) -> None:
    if export:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        for p in plans:
            writer.writerow([p.topic, p.partition, p.new])
        return
    if json_output:
        rows = [
            {
                "topic": p.topic,
                "partition": p.partition,
                "current_offset": p.current,
                "requested_offset": p.requested if p.requested is not None else p.new,
                "new_offset": p.new,
            }
            for p in plans
        ]
        print(json.dumps({"group": group, "dry_run": dry_run, "live": live, "partitions": rows}))
        return
    mode = "dry run, nothing changed" if dry_run else "applied live" if live else "applied"
    table = Table(title=f"reset of {group} ({mode})")
    for column in ("topic", "partition", "current offset", "requested offset", "new offset"):
        table.add_column(column, overflow=OVERFLOW)
    for p in plans:
        requested = p.requested if p.requested is not None else p.new
        table.add_row(p.topic, str(p.partition), _dash(p.current), str(requested), str(p.new))
    console.print(table)
