"""Incremental fetch sessions (KIP-227): a consumer of many partitions sends and receives only what changed.

The client opens a session with a full fetch at epoch 0 (SessionId 0); the broker answers with a session
id and remembers the partitions and what it last told the client about each. Each later fetch carries the
id and the next epoch, lists only partitions whose fetch position changed (or new ones), and names the
ones to drop in ForgottenTopicsData. The answer holds only partitions with records, an error, or a changed
high watermark, last stable offset or log start offset. Epoch -1 closes the session (a sessionless fetch).

Errors at the top level of the response: FETCH_SESSION_ID_NOT_FOUND for an unknown (or evicted) id,
INVALID_FETCH_SESSION_EPOCH for an epoch other than the expected one; the client then starts over with a
full fetch. Kafka's cache rules: at most `max_sessions` sessions (max.incremental.fetch.session.cache.slots,
1,000); a new session takes the place of one unused for `eviction_ms` (min.incremental.fetch.session.
eviction.ms, 120 s), else of the smallest session if the new one has strictly more partitions; else the
fetch is answered without a session (SessionId 0).

Idle partitions cost nothing per fetch: the cache hears of every high-watermark move (`touch`) and marks
the partition dirty in each session holding it; an incremental fetch reads only dirty partitions: those
with new data, those the request names, and those not caught up yet. Anything else that changes what the
client was told (a log start moved by DeleteRecords or retention) is picked up by a full pass every
`SWEEP_MS`. A fetch waiting for data in a session waits on the session's `wake_key`, which `touch`
reports, instead of on each of its partitions.

Pure: no I/O, time is passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from sluice.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
NO_SESSION = 0
MAX_SESSIONS = 1000
EVICTION_MS = 120_000
SWEEP_MS = 10_000
_MAX_EPOCH = 2**31 - 1
NameOf = Callable[[Any], "str | None"]


class SessionPartition:
    """One partition of a session, shaped like a request's FetchPartition so a fetch can read it."""

    __slots__ = (
        "fetch_offset",
        "high_watermark",
        "key",
        "last_stable_offset",
        "log_start_offset",
        "partition",
        "partition_max_bytes",
    )

    def __init__(self, key: tuple[str | None, int], fetch_offset: int, partition_max_bytes: int) -> None:
        self.key = key  # (topic name, partition): what the broker reports new data for; None: unknown id
        self.partition = key[1]
        self.fetch_offset = fetch_offset
        self.partition_max_bytes = partition_max_bytes
        # What the client was last told; -2 never matches, so the first answer always carries it.
        self.high_watermark = self.last_stable_offset = self.log_start_offset = -2

    def unchanged(self, high_watermark: int, last_stable_offset: int, log_start_offset: int) -> bool:
        return (
            self.high_watermark == high_watermark
            and self.last_stable_offset == last_stable_offset
            and self.log_start_offset == log_start_offset
        )


class SessionTopic:
    """A topic of a session, shaped like a request's FetchTopic."""

    __slots__ = ("partitions", "topic", "topic_id")

    def __init__(self, topic: str, topic_id: Any) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partitions: list[SessionPartition] = []


class FetchSession:
    __slots__ = ("dirty", "epoch", "id", "last_sweep_ms", "last_used_ms", "topics")

    def __init__(self, session_id: int, now_ms: int) -> None:
        self.id = session_id
        self.epoch = 1  # the epoch the next incremental fetch must carry
        self.last_used_ms = self.last_sweep_ms = now_ms
        # By topic key (the name before Fetch v13, the topic id from v13), in the order first fetched.
        self.topics: dict[Hashable, SessionTopic] = {}
        # Partitions to read at the next fetch: new data, named by a request, or not caught up yet.
        self.dirty: dict[SessionPartition, SessionTopic] = {}

    def __len__(self) -> int:
        return sum(len(topic.partitions) for topic in self.topics.values())

    def partitions(self) -> Iterator[tuple[SessionPartition, SessionTopic]]:
        for topic in self.topics.values():
            for part in topic.partitions:
                yield part, topic

    def update(
        self, request_topics: Iterable[Any], forgotten: Iterable[Any], by_id: bool, name_of: NameOf
    ) -> tuple[list[SessionPartition], list[SessionPartition]]:
        """Add or update the partitions the request names (all marked dirty), then drop the forgotten
        ones. Returns (added, dropped)."""
        added: list[SessionPartition] = []
        for topic in request_topics:
            key = topic.topic_id if by_id else topic.topic
            held = self.topics.get(key)
            if held is None:
                held = self.topics[key] = SessionTopic(topic.topic, topic.topic_id)
            name = name_of(topic.topic_id) if by_id else topic.topic
            known = {part.partition: part for part in held.partitions}
            for part in topic.partitions:
                mine = known.get(part.partition)
                if mine is None:
                    mine = SessionPartition(
                        (name, part.partition), part.fetch_offset, part.partition_max_bytes
                    )
                    held.partitions.append(mine)
                    added.append(mine)
                else:
                    mine.fetch_offset, mine.partition_max_bytes = part.fetch_offset, part.partition_max_bytes
                self.dirty[mine] = held
        dropped: list[SessionPartition] = []
        for gone in forgotten:
            key = gone.topic_id if by_id else gone.topic
            held = self.topics.get(key)
            if held is None:
                continue
            names = set(gone.partitions)
            kept = []
            for part in held.partitions:
                if part.partition in names:
                    dropped.append(part)
                    self.dirty.pop(part, None)
                else:
                    kept.append(part)
            held.partitions = kept
            if not kept:
                del self.topics[key]
        return added, dropped

    def to_read(self, now_ms: int) -> list[SessionTopic]:
        """The dirty partitions by topic, or every partition when the last full pass is `SWEEP_MS` old."""
        pairs: list[tuple[SessionPartition, SessionTopic]]
        if now_ms - self.last_sweep_ms >= SWEEP_MS:
            self.last_sweep_ms = now_ms
            pairs = list(self.partitions())
        else:
            pairs = list(self.dirty.items())
        grouped: dict[int, SessionTopic] = {}
        for part, topic in pairs:
            subset = grouped.get(id(topic))
            if subset is None:
                subset = grouped[id(topic)] = SessionTopic(topic.topic, topic.topic_id)
            subset.partitions.append(part)
        return list(grouped.values())

    def advance(self, now_ms: int) -> None:
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        self.last_used_ms = now_ms


def wake_key(session_id: int) -> tuple[str, int]:
    """What a fetch waiting in a session waits on (no topic has an empty name)."""
    return ("", session_id)


class FetchSessionCache:
    def __init__(self, max_sessions: int = MAX_SESSIONS, eviction_ms: int = EVICTION_MS) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._random = random.Random()
        # (topic, partition) -> {session id: (session, its entry for the partition, the entry's topic)}.
        self._holders: dict[
            tuple[str | None, int], dict[int, tuple[FetchSession, SessionPartition, SessionTopic]]
        ]
        self._holders = {}
        self._hidden_ids = 0

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def open_hidden(
        self, now_ms: int, request_topics: Iterable[Any], by_id: bool, name_of: NameOf
    ) -> FetchSession:
        """A session no client knows of (sluice.broker.fetch_repeat), over `request_topics`, with nothing
        dirty: it hears of new data like any other and is woken through its own key, but takes no slot and
        is never evicted here. Its ids are negative, so they never meet a client's."""
        self._hidden_ids -= 1
        session = FetchSession(self._hidden_ids, now_ms)
        self.update(session, request_topics, (), by_id, name_of)
        session.dirty.clear()
        return session

    def close_hidden(self, session: FetchSession) -> None:
        self._forget(session, [part for part, _ in session.partitions()])

    def remove(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self._forget(session, [part for part, _ in session.partitions()])

    def touch(self, key: tuple[str, int]) -> list[tuple[str, int]]:
        """New data in partition `key`: mark it dirty in every session holding it; their wake keys."""
        holders = self._holders.get(key)
        if not holders:
            return []
        for session, part, topic in holders.values():
            session.dirty[part] = topic
        return [wake_key(session_id) for session_id in holders]

    def update(
        self,
        session: FetchSession,
        request_topics: Iterable[Any],
        forgotten: Iterable[Any],
        by_id: bool,
        name_of: NameOf,
    ) -> None:
        added, dropped = session.update(request_topics, forgotten, by_id, name_of)
        self._forget(session, dropped)
        for part in added:
            self._holders.setdefault(part.key, {})[session.id] = (session, part, session.dirty[part])

    def _forget(self, session: FetchSession, parts: Iterable[SessionPartition]) -> None:
        for part in parts:
            holders = self._holders.get(part.key)
            if holders is not None:
                holders.pop(session.id, None)
                if not holders:
                    del self._holders[part.key]

    def create(self, now_ms: int, size: int) -> FetchSession | None:
        """A new session for a full fetch of `size` partitions, or None when the cache keeps its sessions."""
        if len(self.sessions) >= self.max_sessions and not self._evict_for(size, now_ms):
            return None
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self.sessions:
            session_id = self._random.randint(1, _MAX_EPOCH)
        session = self.sessions[session_id] = FetchSession(session_id, now_ms)
        return session

    def _evict_for(self, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            victim = stalest
        else:
            victim = min(self.sessions.values(), key=lambda s: (len(s), s.id))
            if size <= len(victim):
                return False
        self.remove(victim.id)
        self.evictions += 1
        return True


class FetchPlan:
    """What one Fetch reads, and how its answer is trimmed: from the request alone (no session), or from
    the session's partitions (`session` set; `incremental` when the answer lists only changes)."""

    __slots__ = ("_request_topics", "incremental", "session", "session_id")

    def __init__(self, request_topics: list[Any], session: FetchSession | None, incremental: bool) -> None:
        self._request_topics = request_topics
        self.session = session
        self.session_id = session.id if session is not None else NO_SESSION
        self.incremental = incremental

    def topics(self, now_ms: int) -> list[Any]:
        """What to read now; asked again by each retry of a long poll, as new data marks more dirty."""
        if self.session is None:
            return self._request_topics
        if not self.incremental:
            return list(self.session.topics.values())
        return self.session.to_read(now_ms)

    @property
    def incremental_session(self) -> bool:
        return self.session is not None and self.incremental

    def idle(self, part: Any, high_watermark: int, last_stable_offset: int, log_start_offset: int) -> bool:
        """True for a session partition with nothing to read and nothing new to tell: it is left out
        unread, and is no longer dirty."""
        if (
            self.session is not None
            and self.incremental
            and part.fetch_offset >= high_watermark
            and part.unchanged(high_watermark, last_stable_offset, log_start_offset)
        ):
            self.session.dirty.pop(part, None)
            return True
        return False

    def trim(self, responses: list[Any], by_id: bool) -> list[Any]:
        """Record what the answer tells the client; an incremental answer keeps only what changed."""
        if self.session is None:
            return responses
        kept_topics = []
        for topic in responses:
            held = self.session.topics.get(topic.topic_id if by_id else topic.topic)
            mine = {part.partition: part for part in held.partitions} if held is not None else {}
            kept = []
            for out in topic.partitions:
                part = mine.get(out.partition_index)
                changed = part is None or not part.unchanged(
                    out.high_watermark, out.last_stable_offset, out.log_start_offset
                )
                if changed and part is not None:
                    part.high_watermark = out.high_watermark
                    part.last_stable_offset = out.last_stable_offset
                    part.log_start_offset = out.log_start_offset
                if not self.incremental or changed or out.error_code or len(out.records or b""):
                    kept.append(out)
            if kept:
                topic.partitions = kept
                kept_topics.append(topic)
        return kept_topics


def plan_fetch(
    cache: FetchSessionCache, request: Any, by_id: bool, now_ms: int, name_of: NameOf
) -> FetchPlan | ErrorCode:
    """The plan for a Fetch request (v7+ fields; older versions arrive as session 0, epoch -1), or the
    top-level error that refuses it. `name_of` gives a topic id's name (Fetch v13+), None if unknown."""
    session_id, epoch = request.session_id, request.session_epoch
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != NO_SESSION:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return FetchPlan(request.topics, None, incremental=False)
        size = sum(len(topic.partitions) for topic in request.topics)
        session = cache.create(now_ms, size)
        if session is None:
            return FetchPlan(request.topics, None, incremental=False)
        cache.update(session, request.topics, (), by_id, name_of)
        return FetchPlan(request.topics, session, incremental=False)
    session = cache.get(session_id)
    if session is None:
        return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if epoch != session.epoch:
        return ErrorCode.INVALID_FETCH_SESSION_EPOCH
    cache.update(session, request.topics, request.forgotten_topics_data, by_id, name_of)
    session.advance(now_ms)
    return FetchPlan(request.topics, session, incremental=True)
