"""A sessionless Fetch asked again, answered with the answer it got last time.

librdkafka, and so confluent-kafka and most clients outside Java, has no fetch sessions (KIP-227): an idle
consumer sends the same Fetch, naming every partition it is assigned, every fetch.wait.max.ms, and gets the
same empty answer each time. Building and encoding that answer for thousands of partitions is most of what
such a consumer costs. So when a sessionless fetch found nothing when its wait ended, the broker keeps an
`IdleAnswer`:
- the request object: the dispatcher hands back that same object while the connection's next Fetch bytes
  are the same (the request pipeline's Fetch case, sluice.protocol.fetch_shape.read_fetch), which is how
  the answer is found again;
- a hidden fetch session over its partitions (FetchSessionCache.open_hidden): it hears of every high-
  watermark move as a client's session does, and a waiting fetch waits on its one wake key instead of on
  each partition;
- what the answer said of each partition (high watermark, last stable offset, log start offset), with the
  partition state it was read from; and the answer encoded.
The same request again parks at once when its hidden session heard of no new data. When the wait ends, one
pass checks that each partition is the same partition, online, with the same three offsets, and the kept
bytes go out. Anything else (new data, a moved log start, a deleted topic) drops the kept answer and the
fetch takes the general path, which may keep a new one.

Only without an authorizer (which takes items out of requests) and without client quotas (which put a
throttle time in answers). The kept answers are bounded by their total partitions; the least recently used
go first, and an answer unused for `UNUSED_MS` goes at the next keep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.broker.fetch_sessions import FetchSession, FetchSessionCache, NameOf
from sluice.protocol.codec import Preencoded

# How many partitions all kept answers of one broker may name together.
MAX_PARTITIONS = 50_000
UNUSED_MS = 120_000

# (partition key, the partition state read, high watermark, last stable offset, log start offset)
Mark = tuple[tuple[str, int], Any, int, int, int]


class IdleAnswer:
    __slots__ = ("answer", "marks", "owner", "request", "session", "used_ms")

    def __init__(
        self,
        owner: Any,
        request: Any,
        session: FetchSession,
        marks: list[Mark],
        answer: Preencoded,
        now_ms: int,
    ) -> None:
        self.owner = owner
        self.request = request
        self.session = session
        self.marks = marks
        self.answer = answer
        self.used_ms = now_ms

    @property
    def heard_of_data(self) -> bool:
        """New data in one of its partitions since it was kept."""
        return bool(self.session.dirty)

    def still_true(self, state_of: Callable[[tuple[str, int]], Any]) -> bool:
        """Whether the kept answer is what a fetch would answer now: every partition the same one, online, and
        at the same high watermark, last stable offset and log start offset (a fetch at the same offsets then
        reads nothing from any of them, as it did)."""
        for key, state, high_watermark, stable, start in self.marks:
            if state_of(key) is not state or state.high_watermark != high_watermark:
                return False
            log = state.log
            if log.log_start_offset != start or log.offline_reason:
                return False
            # Below an unchanged high watermark the last stable offset moves only while a transaction that
            # began below it is open, and none was when the answer said it equalled the high watermark.
            if stable != high_watermark and state.last_stable_offset != stable:
                return False
        return True


class RepeatedFetches:
    """The kept answers of one broker, one per owner (the connection's security session: one per connection),
    each for one request object."""

    def __init__(self, sessions: FetchSessionCache, max_partitions: int = MAX_PARTITIONS) -> None:
        self.sessions = sessions
        self.max_partitions = max_partitions
        # By id(owner); each answer holds its owner, so the ids stay unique.
        self._answers: dict[int, IdleAnswer] = {}
        self._partitions = 0

    def get(self, owner: Any, request: Any, now_ms: int) -> IdleAnswer | None:
        """`owner`'s kept answer if it is for `request`."""
        kept = self._answers.get(id(owner))
        if kept is None or kept.request is not request:
            return None
        self._answers[id(owner)] = self._answers.pop(id(owner))  # most recently used last
        kept.used_ms = now_ms
        return kept

    def keep(
        self,
        owner: Any,
        request: Any,
        marks: list[Mark],
        answer: Preencoded,
        now_ms: int,
        by_id: bool,
        name_of: NameOf,
    ) -> None:
        """Keep `answer` for `owner`'s `request` (in place of any it had), read from the partitions in
        `marks` (the request's, in its order)."""
        old = self._answers.get(id(owner))
        if old is not None:
            self.drop(old)
        if len(marks) > self.max_partitions:
            return
        self._make_room(len(marks), now_ms)
        session = self.sessions.open_hidden(now_ms, request.topics, by_id, name_of)
        self._answers[id(owner)] = IdleAnswer(owner, request, session, marks, answer, now_ms)
        self._partitions += len(marks)

    def drop(self, kept: IdleAnswer) -> None:
        if self._answers.get(id(kept.owner)) is kept:
            del self._answers[id(kept.owner)]
            self._partitions -= len(kept.marks)
            self.sessions.close_hidden(kept.session)

    def _make_room(self, partitions: int, now_ms: int) -> None:
        for kept in list(self._answers.values()):  # least recently used first
            if self._partitions + partitions <= self.max_partitions and now_ms - kept.used_ms < UNUSED_MS:
                break
            self.drop(kept)
