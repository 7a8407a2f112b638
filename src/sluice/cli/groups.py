"""`sluice groups`: list, describe, delete and reset consumer groups on any Kafka, like kafka-consumer-groups.

Everything goes through confluent-kafka's AdminClient (groups, committed offsets) and a non-subscribing
Consumer (watermarks, offsets for a time), so the commands work against sluice, Apache Kafka or Tansu alike.
The offset arithmetic of reset-offsets is the pure function :func:`new_offset`, kept apart from the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="List, describe, delete consumer groups and reset their offsets.", no_args_is_help=True
)
console = Console()
err_console = Console(stderr=True)
# Table cells wrap long ids onto more lines instead of cutting them short: a truncated member id is useless.
OVERFLOW = "fold"

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
REQUEST_TIMEOUT_S = 15.0
Bootstrap = Annotated[str, typer.Option("--bootstrap", "-b", help="Kafka bootstrap servers (host:port,...)")]
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


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


@contextmanager
def _offsets_reader(bootstrap: str) -> Iterator[Any]:
    """A Consumer that never subscribes, so it never joins any group: only for offset lookups."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sluice-groups-cli",
            "enable.auto.commit": False,
            "socket.timeout.ms": 10000,
        }
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
def list_groups(bootstrap: Bootstrap = DEFAULT_BOOTSTRAP, json_output: JsonOutput = False) -> None:
    """List consumer groups with their state and type."""
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
    group: str, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP, json_output: JsonOutput = False
) -> None:
    """State, assignor, members with their partitions, and committed offsets with lag."""
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


# ----- delete -----


@app.command("delete")
def delete_group(group: str, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> None:
    """Delete a group and its committed offsets (only when it has no members)."""
    from confluent_kafka import KafkaError, KafkaException

    admin = _admin(bootstrap)
    try:
        admin.delete_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group].result()
    except KafkaException as exc:
        error = _kafka_error(exc)
        code = error.code() if error is not None else None
        if code == KafkaError.NON_EMPTY_GROUP:
            _fail(f"consumer group {group!r} is not empty: it still has active members; stop them first")
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


@dataclass(frozen=True)
class PartitionPlan:
    topic: str
    partition: int
    current: int | None
    new: int


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
    if kind is ResetKind.EARLIEST:
        target = earliest
    elif kind is ResetKind.LATEST:
        target = latest
    elif kind is ResetKind.DATETIME:
        target = latest if offset_for_time < 0 else offset_for_time
    elif kind is ResetKind.OFFSET:
        target = value
    else:
        if current is None:
            raise ValueError("no committed offset to shift from")
        target = current + value
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


def plan_reset(
    bootstrap: str,
    admin: Any,
    group: str,
    topic: str,
    partitions: list[int],
    kind: ResetKind,
    value: int,
    timestamp_ms: int | None,
) -> list[PartitionPlan]:
    from confluent_kafka import TopicPartition

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
            if kind is ResetKind.SHIFT and current is None:
                _fail(f"cannot shift {topic}-{partition}: group {group!r} has no committed offset there")
            target = new_offset(
                kind,
                current=current,
                earliest=earliest,
                latest=latest,
                value=value,
                offset_for_time=for_time.get(partition, -1),
            )
            plans.append(PartitionPlan(topic, partition, current, target))
    return plans


@app.command("reset-offsets")
def reset_offsets(
    group: str,
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic whose offsets to reset.")],
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Reset to the log start.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Reset to the log end.")] = False,
    to_datetime: Annotated[
        str | None, typer.Option("--to-datetime", help="ISO-8601 time; first offset at or after it.")
    ] = None,
    to_offset: Annotated[
        int | None, typer.Option("--to-offset", help="An absolute offset (clamped to the log).")
    ] = None,
    shift_by: Annotated[
        int | None, typer.Option("--shift-by", help="Move committed offsets by N (may be negative).")
    ] = None,
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", help="Only this partition (repeatable).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, change nothing.")] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    json_output: JsonOutput = False,
) -> None:
    """Move a group's committed offsets on one topic; the group must have no active members."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    chosen = [
        kind
        for kind, given in (
            (ResetKind.EARLIEST, to_earliest),
            (ResetKind.LATEST, to_latest),
            (ResetKind.DATETIME, to_datetime is not None),
            (ResetKind.OFFSET, to_offset is not None),
            (ResetKind.SHIFT, shift_by is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        raise typer.BadParameter(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by"
        )
    kind = chosen[0]
    timestamp_ms = parse_datetime_ms(to_datetime) if to_datetime is not None else None
    value = to_offset if kind is ResetKind.OFFSET else shift_by if kind is ResetKind.SHIFT else 0
    assert value is not None
    admin = _admin(bootstrap)
    description = _describe_group(admin, group)
    state = state_name(description.state) if description is not None else "Dead"
    if state not in RESETTABLE_STATES:
        _fail(
            f"offsets of consumer group {group!r} can only be reset while it is inactive, but it is {state} "
            f"with {len(description.members)} member(s); stop its consumers first"
        )
    available = _topic_partitions(admin, topic)
    partitions = sorted(set(partition)) if partition else available
    missing = [p for p in partitions if p not in available]
    if missing:
        _fail(f"topic {topic!r} has no partition {', '.join(map(str, missing))}")
    plans = plan_reset(bootstrap, admin, group, topic, partitions, kind, value, timestamp_ms)
    if not dry_run:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(p.topic, p.partition, p.new) for p in plans]
        )
        result = admin.alter_consumer_group_offsets([request], request_timeout=REQUEST_TIMEOUT_S)[
            group
        ].result()
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            _fail("; ".join(f"{tp.topic}-{tp.partition}: {tp.error}" for tp in failed))
    if json_output:
        print(
            json.dumps(
                {
                    "group": group,
                    "dry_run": dry_run,
                    "partitions": [
                        {
                            "topic": p.topic,
                            "partition": p.partition,
                            "current_offset": p.current,
                            "new_offset": p.new,
                        }
                        for p in plans
                    ],
                }
            )
        )
        return
    table = Table(title=f"reset of {group} ({'dry run, nothing changed' if dry_run else 'applied'})")
    for column in ("topic", "partition", "current offset", "new offset"):
        table.add_column(column, overflow=OVERFLOW)
    for p in plans:
        table.add_row(p.topic, str(p.partition), _dash(p.current), str(p.new))
    console.print(table)
