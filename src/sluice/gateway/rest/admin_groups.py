"""The admin calls behind v3 consumer groups and ACLs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AclBinding, AclBindingFilter

from .admin import ADMIN_TIMEOUT_SECONDS, RestAdmin
from .errors import RestError


@dataclass(frozen=True)
class Member:
    consumer_id: str
    instance_id: str | None
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Group:
    group_id: str
    is_simple: bool
    assignor: str
    state: str
    coordinator: int
    members: tuple[Member, ...]
    # CLASSIC, CONSUMER (KIP-848) or UNKNOWN, as DescribeGroups/ConsumerGroupDescribe tell it.
    protocol: str = "UNKNOWN"


@dataclass(frozen=True)
class Lag:
    topic: str
    partition: int
    current_offset: int
    log_end_offset: int
    member: Member | None

    @property
    def lag(self) -> int:
        return max(self.log_end_offset - max(self.current_offset, 0), 0)


def _name(value: Any) -> str:
    return str(getattr(value, "name", value))


async def group_ids(admin: RestAdmin) -> list[str]:
    def listing() -> list[str]:
        found = admin.client.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_SECONDS).result()
        return sorted(g.group_id for g in found.valid)

    return await admin.call("list consumer groups", listing)


async def describe_groups(admin: RestAdmin, ids: list[str]) -> list[Group]:
    if not ids:
        return []

    def describe() -> list[Group]:
        futures = admin.client.describe_consumer_groups(ids, request_timeout=ADMIN_TIMEOUT_SECONDS)
        groups = []
        for group_id in ids:
            found = futures[group_id].result()
            members = tuple(
                Member(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.host,
                    tuple(
                        (tp.topic, tp.partition)
                        for tp in (m.assignment.topic_partitions if m.assignment else [])
                    ),
                )
                for m in found.members
            )
            coordinator = found.coordinator.id if found.coordinator is not None else -1
            groups.append(
                Group(
                    group_id,
                    bool(found.is_simple_consumer_group),
                    found.partition_assignor or "",
                    _name(found.state).upper(),
                    coordinator,
                    members,
                    _name(getattr(found, "type", "UNKNOWN")).upper(),
                )
            )
        return groups

    return await admin.call("describe consumer groups", describe)


async def group(admin: RestAdmin, group_id: str) -> Group:
    if group_id not in await group_ids(admin):
        raise RestError(404, 404, f"Consumer group {group_id} cannot be found.")
    return (await describe_groups(admin, [group_id]))[0]


async def lags(admin: RestAdmin, found: Group) -> list[Lag]:
    """The lag of every partition the group has committed an offset for and that still exists, as
    Confluent's REST Proxy reports them (404 when the group has committed nothing)."""

    def committed() -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(found.group_id)]
        futures = admin.client.list_consumer_group_offsets(request, request_timeout=ADMIN_TIMEOUT_SECONDS)
        result = futures[found.group_id].result()
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    offsets = await admin.call(f"offsets of {found.group_id}", committed)
    if not offsets:
        raise RestError(404, 404, f"Consumer group {found.group_id} has no committed offsets.")
    owner = {tp: member for member in found.members for tp in member.partitions}
    ends = await admin.end_offsets(sorted(offsets))
    return [Lag(t, p, offsets[(t, p)], end, owner.get((t, p))) for (t, p), end in sorted(ends.items())]


async def describe_acls(admin: RestAdmin, filter_: AclBindingFilter) -> list[AclBinding]:
    def describe() -> list[AclBinding]:
        return list(admin.client.describe_acls(filter_, request_timeout=ADMIN_TIMEOUT_SECONDS).result())

    return await admin.call("describe ACLs", describe)


async def create_acls(admin: RestAdmin, bindings: list[AclBinding]) -> None:
    def create() -> None:
        for future in admin.client.create_acls(bindings, request_timeout=ADMIN_TIMEOUT_SECONDS).values():
            future.result()

    await admin.call("create ACLs", create)


async def delete_acls(admin: RestAdmin, filter_: AclBindingFilter) -> list[AclBinding]:
    def delete() -> list[AclBinding]:
        return list(
            admin.client.delete_acls([filter_], request_timeout=ADMIN_TIMEOUT_SECONDS)[filter_].result()
        )

    return await admin.call("delete ACLs", delete)
