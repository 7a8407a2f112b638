"""Share groups' admin calls (KIP-932) over Kafka's protocol, for tools that talk to any Kafka 4.2+ cluster.

What Kafka's Admin does for kafka-share-groups.sh: ListGroups with the `share` type (every broker),
ShareGroupDescribe, DescribeShareGroupOffsets (v1 brings the lag, KIP-1226), AlterShareGroupOffsets,
DeleteShareGroupOffsets and DeleteGroups, each sent to the group's coordinator (FindCoordinator) at the
highest version both sides speak. confluent-kafka's AdminClient has none of them (2.16), so they go through
sluice's wire client, connected as librdkafka would be with the same settings (client.secure: TLS, SASL
PLAIN or SCRAM).

Blocking, one connection per broker, opened when first needed. A call the coordinator answers with "not
here" or "loading" finds the coordinator again and is retried until the timeout, as Kafka's Admin does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sluice.client.api_versions import api_versions
from sluice.client.secure import SecureConnectError, connect_secure
from sluice.client.wire import WireClient
from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.messages import APIS_BY_NAME

T = TypeVar("T")
GROUP_KEY_TYPE = 0
# FindCoordinator v4 asks for several keys at once (CoordinatorKeys) instead of one Key.
BATCHED_FIND_COORDINATOR = 4
LIST_GROUPS_WITH_TYPES = 5
SHARE_TYPE = "share"
# The coordinator moved, or is loading its partition: find it again and retry.
RETRIABLE = frozenset(
    {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
)
RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class BootstrapUnreachable(ConnectionError):
    """No bootstrap server could be connected to: final, not retried (the cluster is not there)."""


@dataclass(frozen=True)
class ListedShareGroup:
    group_id: str
    state: str


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    client_id: str
    host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: list[str]
    assignment: list[tuple[str, int]]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    coordinator: tuple[int, str, int]  # node id, host, port
    members: list[ShareMember]


@dataclass(frozen=True)
class ShareOffset:
    """One share-partition's start offset (None: the group has no state there) and lag (None: not known,
    as before DescribeShareGroupOffsets v1)."""

    topic: str
    partition: int
    start_offset: int | None
    lag: int | None
    leader_epoch: int
    error: KafkaError | None = None


@dataclass(frozen=True)
class SharePartitionView:
    """One share-partition as a tool shows it: its offsets and the members assigned it."""

    topic: str
    partition: int
    start_offset: int | None
    lag: int | None
    readers: list[ShareMember]


def share_partitions(
    description: ShareGroupDescription, offsets: list[ShareOffset]
) -> list[SharePartitionView]:
    """Every share-partition the group has state for or a member is assigned, in order."""
    readers: dict[tuple[str, int], list[ShareMember]] = {}
    for member in description.members:
        for key in member.assignment:
            readers.setdefault(key, []).append(member)
    found = {(row.topic, row.partition): row for row in offsets}
    views = []
    for key in sorted(set(found) | set(readers)):
        row = found.get(key)
        views.append(
            SharePartitionView(
                key[0],
                key[1],
                row.start_offset if row is not None else None,
                row.lag if row is not None else None,
                readers.get(key, []),
            )
        )
    return views


@dataclass
class _Link:
    client: WireClient
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)


def _error(code: int, message: str | None) -> KafkaError | None:
    if not code:
        return None
    error_code = ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
    return KafkaError(error_code, message or error_code.name)


def _raise_for(code: int, message: str | None) -> None:
    error = _error(code, message)
    if error is not None:
        raise error


class ShareAdmin:
    def __init__(
        self,
        bootstrap: str,
        settings: Mapping[str, str] | None = None,
        *,
        timeout_s: float = 15.0,
        client_id: str = "sluice-admin",
    ) -> None:
        self.bootstrap = [address.strip() for address in bootstrap.split(",") if address.strip()]
        self.settings = dict(settings or {})
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._links: dict[tuple[str, int], _Link] = {}
        self._coordinators: dict[str, tuple[int, str, int]] = {}  # group -> node id, host, port

    def close(self) -> None:
        for link in self._links.values():
            link.client.close()
        self._links.clear()

    def __enter__(self) -> ShareAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- connections -----

    def _link(self, host: str, port: int) -> _Link:
        link = self._links.get((host, port))
        if link is None:
            try:
                client = connect_secure(host, port, self.settings, self.timeout_s, client_id=self.client_id)
            except SecureConnectError as exc:
                raise ConnectionError(f"{host}:{port}: {exc}") from None
            link = _Link(client, api_versions(client).versions)
            self._links[(host, port)] = link
        return link

    def _any_link(self) -> _Link:
        if self._links:
            return next(iter(self._links.values()))
        failures = []
        for address in self.bootstrap:
            host, _, port = address.rpartition(":")
            try:
                return self._link(host.strip("[]"), int(port))
            except (OSError, ValueError) as exc:
                failures.append(f"{address}: {exc}")
        raise BootstrapUnreachable(
            f"cannot connect to any bootstrap server ({'; '.join(failures) or 'none given'})"
        )

    def _drop(self, address: tuple[str, int]) -> None:
        link = self._links.pop(address, None)
        if link is not None:
            link.client.close()

    @staticmethod
    def version(link: _Link, api: str) -> int | None:
        """The highest version of `api` both sides speak, None when the broker does not serve it."""
        spec = APIS_BY_NAME[api]
        served = link.versions.get(spec.key)
        ours = spec.versions
        if served is None or served[1] < ours.low or served[0] > ours.high:
            return None
        return min(served[1], ours.high)

    def _call(self, link: _Link, api: str, **fields: Any) -> tuple[Any, int]:
        version = self.version(link, api)
        if version is None:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"the cluster does not serve {api}: share groups need Kafka 4.1 or later",
            )
        request = link.client.request_class(api)(**fields)
        return link.client.call(api, version, request), version

    # ----- coordinators -----

    def brokers(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every broker, from Metadata."""
        answer, _ = self._call(self._any_link(), "Metadata", topics=[], allow_auto_topic_creation=False)
        return sorted((b.node_id, b.host, b.port) for b in answer.brokers)

    def _coordinator(self, group: str) -> tuple[int, str, int]:
        known = self._coordinators.get(group)
        if known is not None:
            return known
        link = self._any_link()
        answer, version = self._call(
            link, "FindCoordinator", key=group, key_type=GROUP_KEY_TYPE, coordinator_keys=[group]
        )
        found = answer.coordinators[0] if version >= BATCHED_FIND_COORDINATOR else answer
        _raise_for(found.error_code, found.error_message)
        coordinator = self._coordinators[group] = (found.node_id, found.host, found.port)
        return coordinator

    def _at_coordinator(self, group: str, ask: Callable[[_Link], tuple[int, str | None, T]]) -> T:
        """`ask` the group's coordinator; `ask` returns (top-level error code, message, result). Retried
        while the coordinator moves or loads, until the timeout."""
        deadline = time.monotonic() + self.timeout_s
        for attempt in range(1_000):
            try:
                _, host, port = self._coordinator(group)
                code, message, result = ask(self._link(host, port))
            except KafkaError as exc:
                code, message, result = exc.code, exc.message, None
            except BootstrapUnreachable:
                raise
            except OSError:
                # A coordinator that went away: forget its connection, and where it was.
                _, host, port = self._coordinators.pop(group, (-1, "", 0))
                self._drop((host, port))
                if time.monotonic() >= deadline:
                    raise
                time.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
                continue
            if code in RETRIABLE and time.monotonic() < deadline:
                self._coordinators.pop(group, None)
                time.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
                continue
            _raise_for(code, message)
            return result  # type: ignore[return-value]
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"group {group!r}: the coordinator did not settle")

    # ----- the calls -----

    def list_groups(self, states: list[str] | None = None) -> list[ListedShareGroup]:
        """Every share group of the cluster (ListGroups to each broker, as Kafka's Admin does). A broker that
        does not know group types (ListGroups before v5) has no share groups."""
        found: dict[str, ListedShareGroup] = {}
        for _, host, port in self.brokers():
            link = self._link(host, port)
            version = self.version(link, "ListGroups")
            if version is None or version < LIST_GROUPS_WITH_TYPES:
                continue
            answer, _ = self._call(link, "ListGroups", states_filter=states or [], types_filter=[SHARE_TYPE])
            _raise_for(answer.error_code, None)
            for group in answer.groups:
                if group.group_type == SHARE_TYPE:
                    found[group.group_id] = ListedShareGroup(group.group_id, group.group_state)
        return sorted(found.values(), key=lambda g: g.group_id)

    def describe(self, group: str) -> ShareGroupDescription | None:
        """The share group, or None when the cluster has no share group of that id (none at all, or a
        group of another type: Kafka answers both GROUP_ID_NOT_FOUND)."""

        def ask(link: _Link) -> tuple[int, str | None, ShareGroupDescription | None]:
            answer, _ = self._call(
                link, "ShareGroupDescribe", group_ids=[group], include_authorized_operations=False
            )
            described = answer.groups[0]
            if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                return 0, None, None
            coordinator = self._coordinators.get(group, (-1, "", 0))
            return described.error_code, described.error_message, _description(described, coordinator)

        return self._at_coordinator(group, ask)

    def offsets(self, group: str, topics: Mapping[str, list[int]] | None = None) -> list[ShareOffset]:
        """Start offset and lag of the group's share-partitions: those named, or every one it has state for."""
        R = self._any_link().client.request_class("DescribeShareGroupOffsets")
        asked = (
            None
            if topics is None
            else [
                R.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=p) for t, p in topics.items()
            ]
        )

        def ask(link: _Link) -> tuple[int, str | None, list[ShareOffset]]:
            request = R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=asked)
            answer, version = self._call(link, "DescribeShareGroupOffsets", groups=[request])
            described = answer.groups[0]
            rows = [
                ShareOffset(
                    topic.topic_name,
                    part.partition_index,
                    part.start_offset if part.start_offset >= 0 else None,
                    part.lag if version >= 1 and part.lag >= 0 else None,
                    part.leader_epoch,
                    _error(part.error_code, part.error_message),
                )
                for topic in described.topics
                for part in topic.partitions
            ]
            return (
                described.error_code,
                described.error_message,
                sorted(rows, key=lambda r: (r.topic, r.partition)),
            )

        return self._at_coordinator(group, ask)

    def alter_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Set the group's start offsets (AlterShareGroupOffsets): refused while the group has members;
        creates the group when it does not exist. Per partition: None, or the error that refused it."""
        R = self._any_link().client.request_class("AlterShareGroupOffsets")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                R.AlterShareGroupOffsetsRequestPartition(partition_index=partition, start_offset=offset)
            )
        request_topics = [
            R.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=p) for t, p in by_topic.items()
        ]

        def ask(link: _Link) -> tuple[int, str | None, dict[tuple[str, int], KafkaError | None]]:
            answer, _ = self._call(link, "AlterShareGroupOffsets", group_id=group, topics=request_topics)
            results = {
                (topic.topic_name, part.partition_index): _error(part.error_code, part.error_message)
                for topic in answer.responses
                for part in topic.partitions
            }
            return answer.error_code, answer.error_message, results

        return self._at_coordinator(group, ask)

    def delete_offsets(self, group: str, topics: list[str]) -> dict[str, KafkaError | None]:
        """Drop the group's state of whole topics (DeleteShareGroupOffsets): refused while it has members.
        Per topic: None, or the error that refused it."""
        R = self._any_link().client.request_class("DeleteShareGroupOffsets")
        request_topics = [R.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics]

        def ask(link: _Link) -> tuple[int, str | None, dict[str, KafkaError | None]]:
            answer, _ = self._call(link, "DeleteShareGroupOffsets", group_id=group, topics=request_topics)
            results = {t.topic_name: _error(t.error_code, t.error_message) for t in answer.responses}
            return answer.error_code, answer.error_message, results

        return self._at_coordinator(group, ask)

    def delete_group(self, group: str) -> None:
        """DeleteGroups, as Kafka's Admin deleteShareGroups sends it (NON_EMPTY_GROUP while it has members)."""

        def ask(link: _Link) -> tuple[int, str | None, None]:
            answer, _ = self._call(link, "DeleteGroups", groups_names=[group])
            return answer.results[0].error_code, None, None

        self._at_coordinator(group, ask)


def _description(described: Any, coordinator: tuple[int, str, int]) -> ShareGroupDescription:
    return ShareGroupDescription(
        group_id=described.group_id,
        state=described.group_state,
        group_epoch=described.group_epoch,
        assignment_epoch=described.assignment_epoch,
        assignor=described.assignor_name,
        coordinator=coordinator,
        members=[
            ShareMember(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.client_host,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                subscribed_topics=list(m.subscribed_topic_names),
                assignment=sorted(
                    (t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions
                ),
            )
            for m in described.members
        ],
    )
