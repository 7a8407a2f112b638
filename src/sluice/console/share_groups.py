"""Share groups (KIP-932) in the console: their rows on the groups page and one group's page.

Members, start offsets and lag come from Kafka's share-group APIs (sluice.client.share_admin), so any Kafka
4.2+ cluster shows them; a cluster without share groups (older Kafka, Tansu) simply has none. How many
records of each share-partition are acquired, acknowledged and archived, Kafka's protocol does not tell:
with `--admin URL` (a sluice broker's admin API) the page asks `/v1/share-groups/NAME` for them, and says
they are not reported otherwise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from sluice.client.secure import supported
from sluice.client.share_admin import ShareAdmin, share_partitions
from sluice.console.cluster import Cluster, ClusterError
from sluice.console.groups import GroupRow
from sluice.errors import ErrorCode, KafkaError
from sluice.security.http_auth import redact_url

log = logging.getLogger("sluice.console")
COUNTS = ("acquired", "acknowledged", "archived")


@dataclass
class SharePartitionRow:
    topic: str
    partition: int
    start_offset: int | None
    lag: int | None
    readers: list[str]  # the members assigned the partition (client ids)
    counts: dict[str, int] | None = None  # acquired, acknowledged, archived: from a sluice admin API


@dataclass
class ShareGroupDetail:
    group_id: str
    state: str
    assignor: str
    coordinator: str
    members: list[dict[str, Any]]
    partitions: list[SharePartitionRow]
    counts_note: str | None = field(default=None)  # why the counts are not shown

    @property
    def lag(self) -> int | None:
        lags = [row.lag for row in self.partitions if row.lag is not None]
        return sum(lags) if lags else None


def _admin(cluster: Cluster) -> ShareAdmin | None:
    """A share-group admin with the console's client settings; None when they ask for a login the wire
    client cannot make (OAUTHBEARER, GSSAPI): share groups are then not shown."""
    if not supported(cluster.settings):
        return None
    return ShareAdmin(
        cluster.bootstrap, cluster.settings, timeout_s=cluster.timeout_s, client_id="sluice-console"
    )


def _failed(exc: Exception) -> ClusterError:
    if isinstance(exc, KafkaError):
        return ClusterError(exc.code.name, exc.message)
    return ClusterError("_TRANSPORT", str(exc), unreachable=True)


def share_group_rows(cluster: Cluster) -> list[GroupRow]:
    """The cluster's share groups as rows of the groups page (none where it serves no share groups)."""
    admin = _admin(cluster)
    if admin is None:
        return []
    rows = []
    with admin:
        try:
            listed = admin.list_groups()
            for group in listed:
                described = admin.describe(group.group_id)
                lags = [row.lag for row in admin.offsets(group.group_id) if row.lag is not None]
                rows.append(
                    GroupRow(
                        group_id=group.group_id,
                        state=described.state if described is not None else group.state,
                        protocol=described.assignor if described is not None else "",
                        type="share",
                        members=len(described.members) if described is not None else 0,
                        lag=sum(lags) if lags else None,
                    )
                )
        except KafkaError as exc:
            if exc.code is ErrorCode.UNSUPPORTED_VERSION:
                return []
            raise _failed(exc) from None
        except OSError as exc:
            raise _failed(exc) from None
    return rows


def share_group_detail(cluster: Cluster, name: str) -> ShareGroupDetail | None:
    """The share group `name`, or None when the cluster has no share group of that id."""
    admin = _admin(cluster)
    if admin is None:
        return None
    with admin:
        try:
            described = admin.describe(name)
            if described is None:
                return None
            offsets = admin.offsets(name)
        except KafkaError as exc:
            if exc.code is ErrorCode.UNSUPPORTED_VERSION:
                return None
            raise _failed(exc) from None
        except OSError as exc:
            raise _failed(exc) from None
    members = [
        {"member_id": m.member_id, "client_id": m.client_id, "host": m.host, "assignment": m.assignment}
        for m in described.members
    ]
    partitions = [
        SharePartitionRow(
            view.topic,
            view.partition,
            view.start_offset,
            view.lag,
            [member.client_id or member.member_id for member in view.readers],
        )
        for view in share_partitions(described, offsets)
    ]
    _, host, port = described.coordinator
    return ShareGroupDetail(
        group_id=name,
        state=described.state,
        assignor=described.assignor,
        coordinator=f"{host}:{port}",
        members=members,
        partitions=partitions,
    )


async def add_counts(detail: ShareGroupDetail, admin_url: str | None, timeout_s: float) -> None:
    """Each share-partition's acquired, acknowledged and archived counts from a sluice broker's admin API;
    without one, or when it cannot answer, `counts_note` says why they are not shown."""
    if admin_url is None:
        detail.counts_note = (
            "Kafka's protocol does not report how many records are acquired, acknowledged or archived: "
            "a sluice broker's admin API (--admin URL) does."
        )
        return
    from aiohttp import ClientError, ClientSession, ClientTimeout

    url = f"{admin_url.rstrip('/')}/v1/share-groups/{quote(detail.group_id, safe='')}"
    try:
        async with (
            ClientSession(timeout=ClientTimeout(total=timeout_s)) as session,
            session.get(url) as reply,
        ):
            answer = await reply.json(content_type=None) if reply.status == 200 else None
            status = reply.status
    except (ClientError, TimeoutError, ValueError) as exc:
        detail.counts_note = f"not reported: cannot reach {redact_url(url)} ({exc or type(exc).__name__})"
        return
    if not isinstance(answer, dict):
        detail.counts_note = f"not reported: {redact_url(url)} answered HTTP {status}"
        return
    counts = {(row["topic"], row["partition"]): row for row in answer.get("partitions", [])}
    for row in detail.partitions:
        found = counts.get((row.topic, row.partition))
        row.counts = {kind: found[kind] for kind in COUNTS} if found is not None else dict.fromkeys(COUNTS, 0)
