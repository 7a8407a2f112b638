"""Consumer groups through a Cluster's AdminClient: the list with total lag, one group's members and
offsets, and offset resets planned (a dry run) before they are executed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from sluice.client.group_states import RESETTABLE_STATES, state_name
from sluice.console.cluster import Cluster, ClusterError, as_cluster_error
from sluice.console.messages import offsets_for_time


@dataclass
class GroupRow:
    group_id: str
    state: str
    protocol: str
    type: str
    members: int
    lag: int | None


@dataclass
class GroupOffsetRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None:
            return None
        return max(self.end - self.committed, 0)


@dataclass
class GroupDetail:
    group_id: str
    state: str
    protocol: str
    type: str
    coordinator: str | None
    members: list[dict[str, Any]]
    offsets: list[GroupOffsetRow]

    @property
    def lag(self) -> int | None:
        lags = [row.lag for row in self.offsets if row.lag is not None]
        return sum(lags) if lags else None


@dataclass
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int
    start: int
    end: int

    @property
    def delta(self) -> int | None:
        return None if self.current is None else self.new - self.current


def new_offset(kind: str, *, earliest: int, latest: int, value: int = 0, for_time: int = -1) -> int:
    """Where a reset puts one partition, clamped to the log as Kafka clamps it. `for_time` is the broker's
    first offset at or after a time, -1 when every record is older (then the partition goes to its end)."""
    if kind == "earliest":
        target = earliest
    elif kind == "latest":
        target = latest
    elif kind in ("timestamp", "duration"):
        target = latest if for_time < 0 else for_time
    elif kind == "offset":
        target = value
    else:
        raise ValueError(f"unknown reset kind {kind!r}")
    return min(max(target, earliest), latest)


def _describe_groups(cluster: Cluster, ids: list[str]) -> dict[str, Any]:
    if not ids:
        return {}
    futures = cluster.admin.describe_consumer_groups(ids, request_timeout=cluster.timeout_s)
    out = {}
    for gid, future in futures.items():
        try:
            out[gid] = future.result(timeout=cluster.timeout_s)
        except Exception as exc:
            error = as_cluster_error(exc)
            if error.unreachable:
                raise error from None
    return out


def committed_offsets(cluster: Cluster, group: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    futures = cluster.admin.list_consumer_group_offsets(request, request_timeout=cluster.timeout_s)
    result = cluster._result(futures[group])
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def group_ids(cluster: Cluster) -> list[str]:
    listed = cluster._result(cluster.admin.list_consumer_groups(request_timeout=cluster.timeout_s))
    return sorted(g.group_id for g in listed.valid)


def group_rows(cluster: Cluster) -> list[GroupRow]:
    ids = group_ids(cluster)
    described = _describe_groups(cluster, ids)
    committed = {gid: committed_offsets(cluster, gid) for gid in ids}
    marks = cluster.watermarks(sorted({key for offsets in committed.values() for key in offsets}))
    rows = []
    for gid in ids:
        d = described.get(gid)
        lags = [max(marks[k][1] - off, 0) for k, off in committed[gid].items() if k in marks]
        rows.append(
            GroupRow(
                group_id=gid,
                state=state_name(d.state) if d is not None else "Unknown",
                protocol=(d.partition_assignor or "") if d is not None else "",
                type=getattr(getattr(d, "type", None), "name", "CLASSIC").lower() if d is not None else "",
                members=len(d.members) if d is not None else 0,
                lag=sum(lags) if lags else None,
            )
        )
    return rows


def group_detail(cluster: Cluster, group: str) -> GroupDetail:
    d = _describe_groups(cluster, [group]).get(group)
    committed = committed_offsets(cluster, group)
    if (d is None or (state_name(d.state) == "Dead" and not d.members)) and not committed:
        raise ClusterError("GROUP_ID_NOT_FOUND", f"consumer group {group!r} does not exist")
    members = []
    owner: dict[tuple[str, int], str] = {}
    for member in d.members if d is not None else []:
        assigned = sorted((tp.topic, tp.partition) for tp in (member.assignment.topic_partitions or []))
        members.append(
            {
                "member_id": member.member_id,
                "instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "host": member.host,
                "assignment": assigned,
            }
        )
        for key in assigned:
            owner[key] = member.client_id or member.member_id
    keys = sorted(set(committed) | set(owner))
    marks = cluster.watermarks(keys)
    offsets = [
        GroupOffsetRow(t, p, committed.get((t, p)), marks.get((t, p), (None, None))[1], owner.get((t, p)))
        for t, p in keys
    ]
    coordinator = getattr(d, "coordinator", None) if d is not None else None
    return GroupDetail(
        group_id=group,
        state=state_name(d.state) if d is not None else "Empty",
        protocol=(d.partition_assignor or "") if d is not None else "",
        type=getattr(getattr(d, "type", None), "name", "CLASSIC").lower() if d is not None else "classic",
        coordinator=f"{coordinator.host}:{coordinator.port}" if coordinator is not None else None,
        members=members,
        offsets=offsets,
    )


def plan_reset(
    cluster: Cluster, group: str, topic: str | None, kind: str, value: int | None, ts_ms: int | None
) -> list[ResetRow]:
    """The offsets a reset would commit, per partition of `topic` (or of every topic the group has
    committed offsets on): nothing is changed."""
    committed = committed_offsets(cluster, group)
    metadata = cluster.metadata()
    topics = [topic] if topic else sorted({t for t, _ in committed})
    if not topics:
        raise ClusterError("INVALID_REQUEST", "the group has no committed offsets: choose a topic to reset")
    keys = []
    for name in topics:
        described = metadata.topics.get(name)
        if described is None or described.error is not None:
            raise ClusterError("UNKNOWN_TOPIC_OR_PART", f"topic {name!r} does not exist")
        keys += [(name, p) for p in sorted(described.partitions)]
    marks = cluster.watermarks(keys)
    for_time: dict[tuple[str, int], int] = {}
    if kind in ("timestamp", "duration"):
        for name in topics:
            bounds = {p: marks[(t, p)] for t, p in keys if t == name}
            for p, off in offsets_for_time(cluster, name, bounds, ts_ms or 0).items():
                for_time[(name, p)] = off
    rows = []
    for key in keys:
        start, end = marks[key]
        target = new_offset(
            kind, earliest=start, latest=end, value=value or 0, for_time=for_time.get(key, -1)
        )
        rows.append(ResetRow(key[0], key[1], committed.get(key), target, start, end))
    return rows


def execute_reset(cluster: Cluster, group: str, rows: list[ResetRow]) -> None:
    d = _describe_groups(cluster, [group]).get(group)
    state = state_name(d.state) if d is not None else "Dead"
    if state not in RESETTABLE_STATES:
        raise ClusterError(
            "NON_EMPTY_GROUP",
            f"offsets can only be reset while the group is inactive, but it is {state} with "
            f"{len(d.members) if d is not None else 0} member(s); stop its consumers first",
        )
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(r.topic, r.partition, r.new) for r in rows])
    futures = cluster.admin.alter_consumer_group_offsets([request], request_timeout=cluster.timeout_s)
    result = cluster._result(futures[group])
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        first = failed[0].error
        raise ClusterError(
            first.name(), "; ".join(f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in failed)
        )


def delete_group(cluster: Cluster, group: str) -> None:
    cluster._result(cluster.admin.delete_consumer_groups([group], request_timeout=cluster.timeout_s)[group])
