"""Share sessions (KIP-932's counterpart of KIP-227 fetch sessions), pure.

A member's ShareFetch and ShareAcknowledge requests run in a session keyed by (group id, member id):

* ShareSessionEpoch 0 opens a session (replacing the member's old one) and names its partitions;
* each later request carries the epoch the previous answer left (1, 2, ...), adds the partitions it names
  and drops its ForgottenTopicsData; a wrong epoch is INVALID_SHARE_SESSION_EPOCH, no session at all is
  SHARE_SESSION_NOT_FOUND;
* -1 is the member's last request: it acknowledges, fetches nothing, and closes the session. Whatever the
  member still holds in the session's partitions is released at once.

A session belongs to the connection that opened it: when that connection closes, the session closes too.
At most `max_sessions` sessions are kept; a new one beyond that is refused (SHARE_SESSION_LIMIT_REACHED).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from sluice.errors import ErrorCode

OPEN_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

SessionKey = tuple[str, str]  # (group id, member id)
SharePartitionId = tuple[uuid.UUID, int]  # (topic id, partition)


@dataclass(slots=True, eq=False)
class ShareSession:
    group_id: str
    member_id: str
    connection: Hashable
    # The epoch the next request must carry.
    epoch: int = 1
    # In the order they were added: fetches visit them round-robin from `cursor`, so one busy partition
    # does not starve the others of a response's byte budget.
    partitions: dict[SharePartitionId, None] = field(default_factory=dict)
    cursor: int = 0

    @property
    def key(self) -> SessionKey:
        return (self.group_id, self.member_id)

    def add(self, partitions: Iterable[SharePartitionId]) -> None:
        for partition in partitions:
            self.partitions.setdefault(partition, None)

    def forget(self, partitions: Iterable[SharePartitionId]) -> None:
        for partition in partitions:
            self.partitions.pop(partition, None)

    def in_turn(self) -> list[SharePartitionId]:
        """The session's partitions starting from the next one's turn (and moves the turn on)."""
        order = list(self.partitions)
        if not order:
            return order
        start = self.cursor % len(order)
        self.cursor = start + 1
        return order[start:] + order[:start]


class SessionRefused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ShareSessions:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}

    def enter(self, group_id: str, member_id: str, epoch: int, connection: Hashable) -> ShareSession:
        """The session a request with `epoch` runs in (opened when the epoch is 0). Raises SessionRefused."""
        key = (group_id, member_id)
        if epoch == OPEN_EPOCH:
            old = self.sessions.pop(key, None)
            if old is None and len(self.sessions) >= self.max_sessions:
                raise SessionRefused(
                    ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                    f"the broker keeps {self.max_sessions} share sessions (group.share.max.share.sessions)",
                )
            session = self.sessions[key] = ShareSession(group_id, member_id, connection)
            return session
        session = self.sessions.get(key)
        if session is None:
            raise SessionRefused(
                ErrorCode.SHARE_SESSION_NOT_FOUND, f"member {member_id!r} of group {group_id!r} has no share session"
            )
        if epoch == FINAL_EPOCH:
            return session
        if epoch != session.epoch:
            raise SessionRefused(
                ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                f"share session epoch {epoch} is not the expected {session.epoch}",
            )
        session.epoch = 1 if session.epoch == MAX_EPOCH else session.epoch + 1
        session.connection = connection
        return session

    def close(self, session: ShareSession) -> None:
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]

    def of_member(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def closed_connection(self, connection: Hashable) -> list[ShareSession]:
        """Close every session of a connection that closed; returns them (their records go back)."""
        gone = [s for s in self.sessions.values() if s.connection is connection]
        for session in gone:
            del self.sessions[session.key]
        return gone

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.group_id == group_id]
