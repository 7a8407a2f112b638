"""A hand-cranked clock and a few request builders for driving the coordinator in tests."""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field, replace

from sluice.coordinator import CoordinatorConfig, GroupCoordinator, Outcome, PersistRecord
from sluice.coordinator.consumer_protocol import encode_subscription
from sluice.coordinator.messages import (
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupProtocol,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    MemberIdentity,
    Result,
    SyncGroup,
    SyncGroupAssignment,
    SyncGroupResult,
)
from sluice.errors import ErrorCode

GROUP = "payments"
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def consumer_protocols(*topics: str, names: tuple[str, ...] = ("range",)) -> list[JoinGroupProtocol]:
    return [JoinGroupProtocol(name, encode_subscription(list(topics))) for name in names]


@dataclass
class Driver:
    """Calls the coordinator at ``now`` and collects replies by token and every record produced."""

    config: CoordinatorConfig = field(
        default_factory=lambda: CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    )
    now: int = 1_000_000
    records: list[PersistRecord] = field(default_factory=list)
    replies: dict[Hashable, Result] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counter = itertools.count(1)
        self.coordinator = GroupCoordinator(
            self.config, member_id_factory=lambda client: f"{client}-{next(counter)}"
        )
        self._tokens = itertools.count(1)

    def _collect(self, outcome: Outcome) -> Outcome:
        self.records += outcome.records
        for token, result in outcome.replies:
            assert token not in self.replies, f"second reply for {token}"
            self.replies[token] = result
        return outcome

    def send(self, method: str, request: object) -> int:
        """Send a request; returns its token (look the reply up in ``replies``; absent = parked)."""
        token = next(self._tokens)
        self._collect(getattr(self.coordinator, method)(request, self.now, token))
        return token

    def call(self, method: str, request: object) -> Result:
        """Send a request that must be answered at once."""
        token = self.send(method, request)
        assert token in self.replies, f"{method} was parked"
        return self.replies[token]

    def advance(self, ms: int) -> None:
        """Move the clock, firing every timer on the way exactly when it falls due."""
        target = self.now + ms
        while (deadline := self.coordinator.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self._collect(self.coordinator.tick(self.now))
        self.now = target

    def state(self, group_id: str = GROUP) -> str | None:
        return self.coordinator.group_state(group_id)

    # --- request shortcuts -------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        client_id: str = "client",
        protocols: list[JoinGroupProtocol] | None = None,
        **overrides: object,
    ) -> int:
        request = JoinGroup(
            group_id=GROUP,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            member_id=member_id,
            protocol_type="consumer",
            protocols=protocols if protocols is not None else consumer_protocols("orders"),
            client_id=client_id,
            client_host="/127.0.0.1",
        )
        return self.send("join_group", replace(request, **overrides))

    def join_with_member_id(self, client_id: str = "client", **overrides: object) -> tuple[str, int]:
        """The v4+ two-step join: returns the assigned member id and the token of the second join."""
        first = self.replies[self.join(client_id=client_id, **overrides)]
        assert isinstance(first, JoinGroupResult)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        return first.member_id, self.join(member_id=first.member_id, client_id=client_id, **overrides)

    def sync(
        self, member_id: str, generation_id: int, assignments: dict[str, bytes] | None = None, **kw: object
    ) -> int:
        pairs = [SyncGroupAssignment(m, a) for m, a in (assignments or {}).items()]
        return self.send("sync_group", SyncGroup(GROUP, generation_id, member_id, pairs, **kw))  # type: ignore[arg-type]

    def heartbeat(
        self, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> ErrorCode:
        result = self.call("heartbeat", Heartbeat(GROUP, generation_id, member_id, group_instance_id))
        assert isinstance(result, HeartbeatResult)
        return result.error_code

    def leave(self, *members: MemberIdentity) -> LeaveGroupResult:
        result = self.call("leave_group", LeaveGroup(GROUP, list(members)))
        assert isinstance(result, LeaveGroupResult)
        return result

    def join_result(self, token: int) -> JoinGroupResult:
        result = self.replies[token]
        assert isinstance(result, JoinGroupResult)
        return result

    def sync_result(self, token: int) -> SyncGroupResult:
        result = self.replies[token]
        assert isinstance(result, SyncGroupResult)
        return result

    def stable_group(self, *clients: str) -> dict[str, str]:
        """Members joined, leader assigned, group Stable; returns client -> member id.

        Every client first collects its member id; the rebalance cannot complete while any of those
        ids is still pending, so all of them land in the same generation.
        """
        members = {}
        for client in clients:
            first = self.join_result(self.join(client_id=client))
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
            members[client] = first.member_id
        tokens = [self.join(member_id=members[client], client_id=client) for client in clients]
        self.advance(self.config.group_initial_rebalance_delay_ms * 3)
        results = [self.join_result(token) for token in tokens]
        generation = results[0].generation_id
        leader = results[0].leader
        for member_id in members.values():
            if member_id != leader:
                self.sync(member_id, generation)
        self.sync(leader, generation, {m: f"assigned:{m}".encode() for m in members.values()})
        assert self.state() == "Stable"
        return members
