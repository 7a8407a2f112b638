"""`sluice groups reset-offsets`: plan new offsets (pure arithmetic in :func:`new_offset`), then apply
them offline (AdminClient, like kafka-consumer-groups) or live (the broker's admin API)."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
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
    _fail,
    _offsets_reader,
    _table,
    _topic_partitions,
    _use,
    _watermarks,
    state_name,
)
from sluice.cli.share_groups import apply_reset, not_empty, share_admin, start_offsets
from sluice.cli.share_groups import lookup as share_lookup
from sluice.client.group_states import RESETTABLE_STATES


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
    admin: Any,
    group: str,
    topics: list[str],
    all_topics: bool,
    partition: list[int] | None,
    committed: dict[tuple[str, int], int],
) -> dict[str, list[int]]:
    """topic -> partitions the reset covers (--all-topics: those the group has offsets for)."""
    chosen: dict[str, list[int] | None] = {}
    for spec in topics:
        name, parts = parse_topic_spec(spec)
        chosen[name] = sorted(set(parts or []) | set(chosen.get(name) or [])) if parts else chosen.get(name)
    if all_topics:
        for name, _ in committed:
            chosen.setdefault(name, None)
        if not chosen:
            _fail(f"group {group!r} has no offsets: --all-topics covers nothing")
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
    altered = admin.alter_consumer_group_offsets([request], request_timeout=REQUEST_TIMEOUT_S)[group]
    result = serving(admin, altered.result, REQUEST_TIMEOUT_S + 5)
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
    share: Annotated[
        bool,
        typer.Option(
            "--share",
            help="GROUP is a share group: needed only while it does not exist (the reset creates it, as "
            "kafka-share-groups does); an existing one is recognised.",
        ),
    ] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    admin: Admin = None,
    json_output: JsonOutput = False,
) -> None:
    """Move a group's committed offsets. Without --live the group must have no active members; with --live
    the broker moves a running group's members to the new offsets (sluice's admin API).

    A share group's start offsets move the same way (AlterShareGroupOffsets), only while it has no members."""
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
    with share_admin(bootstrap) as shares:
        shared = share_lookup(shares, group)
        share = share or shared is not None
        if share:
            if live:
                _fail("a share group has no live rewind: stop its consumers first")
            if shared is not None and shared.members:
                _fail(not_empty(group))
            committed = start_offsets(shares, group) if shared is not None else {}
        else:
            committed = _consumer_group_offsets(client, group, live)
        plans = _plans(
            bootstrap,
            client,
            group,
            committed,
            kind,
            value,
            timestamp_ms,
            file_offsets,
            _selected_topics(client, group, topic or [], all_topics, partition, committed)
            if file_offsets is None
            else None,
        )
        if not dry_run:
            if share:
                apply_reset(shares, group, {(p.topic, p.partition): p.new for p in plans})
            elif live:
                plans = _apply_live(admin_address(admin, bootstrap), group, plans)
            else:
                _apply_offline(client, group, plans)
    _print_plans(group, plans, dry_run, live, export, json_output)


def _consumer_group_offsets(client: Any, group: str, live: bool) -> dict[tuple[str, int], int]:
    """A consumer group's committed offsets, once it is sure it may be reset."""
    description = _describe_group(client, group)
    state = state_name(description.state) if description is not None else "Dead"
    if state not in RESETTABLE_STATES and not live:
        _fail(
            f"offsets of consumer group {group!r} can only be reset while it is inactive, but it is {state} "
            f"with {len(description.members)} member(s); stop its consumers first, or rewind it --live"
        )
    return _committed_offsets(client, group)


def _plans(
    bootstrap: str,
    client: Any,
    group: str,
    committed: dict[tuple[str, int], int],
    kind: ResetKind,
    value: int,
    timestamp_ms: int | None,
    file_offsets: dict[tuple[str, int], int] | None,
    selected: dict[str, list[int]] | None,
) -> list[PartitionPlan]:
    """The plan of every partition the reset covers: `selected` topics, or those of the file's offsets."""
    if file_offsets is not None:
        by_topic: dict[str, dict[int, int]] = {}
        for (name, p), offset in file_offsets.items():
            by_topic.setdefault(name, {})[p] = offset
        for name, parts in by_topic.items():
            missing = [p for p in parts if p not in _topic_partitions(client, name)]
            if missing:
                _fail(f"topic {name!r} has no partition {', '.join(map(str, missing))}")
        selected = {name: sorted(parts) for name, parts in by_topic.items()}
    assert selected is not None
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
    return plans


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

    table = _table(
        f"reset of {group} ({mode})", "topic", "partition", "current offset", "requested offset", "new offset"
    )
    for p in plans:
        requested = p.requested if p.requested is not None else p.new
        table.add_row(p.topic, str(p.partition), _dash(p.current), str(requested), str(p.new))
    console.print(table)
