"""Fetch (with long polling), ListOffsets and OffsetForLeaderEpoch."""

from __future__ import annotations

import weakref
from typing import Any

from sluice.broker.api import Outcome, RequestContext, Respond, RespondWhenData, handles, response_class
from sluice.broker.broker import Broker, PartitionState
from sluice.broker.fetch_repeat import IdleAnswer, Mark, RepeatedFetches
from sluice.broker.fetch_sessions import FetchPlan, FetchSessionCache, NameOf, plan_fetch, wake_key
from sluice.broker.quotas import CONSUMER_BYTE_RATE, throttled
from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.codec import Preencoded
from sluice.protocol.messages import response_codec

FetchResponse = response_class("Fetch")
ListOffsetsResponse = response_class("ListOffsets")
OffsetForLeaderEpochResponse = response_class("OffsetForLeaderEpoch")

READ_COMMITTED = 1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023, ListOffsets v11
# The first ListOffsets version that may ask for each special timestamp (Kafka's ReplicaManager).
SPECIAL_TIMESTAMP_VERSIONS = {-1: 0, -2: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8,
                              LATEST_TIERED_TIMESTAMP: 9, EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}


class _FetchState:
    """What fetches keep of a broker, beside it rather than in it: its fetch sessions (KIP-227) and its kept
    answers to sessionless fetches (sluice.broker.fetch_repeat)."""

    __slots__ = ("repeats", "sessions")

    def __init__(self, sessions: FetchSessionCache) -> None:
        self.sessions = sessions
        self.repeats: RepeatedFetches | None = None


_STATE: weakref.WeakKeyDictionary[Broker, _FetchState] = weakref.WeakKeyDictionary()


def fetch_sessions(broker: Broker) -> FetchSessionCache:
    """The broker's session cache. Made at the first fetch, when it starts hearing of new data: it wraps
    the `on_data` the server shell installed (still called, for the sessions' wake keys too)."""
    state = _STATE.get(broker)
    if state is None:
        cache = FetchSessionCache()
        state = _STATE[broker] = _FetchState(cache)
        shell_on_data = broker.on_data

        def on_data(key: tuple[str, int]) -> None:
            for wake in cache.touch(key):
                shell_on_data(wake)
            shell_on_data(key)

        broker.on_data = on_data
    return state.sessions


def repeated_fetches(broker: Broker) -> RepeatedFetches:
    """The broker's kept answers to sessionless fetches, beside its session cache."""
    sessions = fetch_sessions(broker)
    state = _STATE[broker]
    if state.repeats is None:
        state.repeats = RepeatedFetches(sessions)
    return state.repeats


def _fetch_once(broker: Broker, ctx: RequestContext, request: Any, plan: FetchPlan) -> tuple[Any, int]:
    """Build a fetch response from what is durable now; returns it and how many record bytes it holds."""
    budget = min(request.max_bytes if ctx.api_version >= 3 else 0x7FFFFFFF, broker.config.fetch_max_bytes)
    total = 0
    by_id = ctx.api_version >= 13
    committed = request.isolation_level == READ_COMMITTED
    incremental = plan.incremental_session  # only then may partitions be left out
    topics = []
    for topic in plan.topics(ctx.now_ms):
        if by_id:
            meta = broker.storage.topic_by_id(topic.topic_id)
            name = meta.name if meta else None
            unknown = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            name, unknown = topic.topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partitions = []
        for part in topic.partitions:
            state = broker.partitions.get((name, part.partition)) if name is not None else None
            if state is None:
                partitions.append(
                    FetchResponse.PartitionData(
                        partition_index=part.partition, records=b"", error_code=unknown, high_watermark=-1
                    )
                )
                continue
            high_watermark, stable = state.high_watermark, state.last_stable_offset
            log_start = state.log.log_start_offset
            if incremental and plan.idle(part, high_watermark, stable, log_start):
                continue  # an incremental fetch leaves it out without reading it
            out = FetchResponse.PartitionData(
                partition_index=part.partition,
                records=b"",
                high_watermark=high_watermark,
                last_stable_offset=stable,
                log_start_offset=log_start,
            )
            partitions.append(out)
            limit = min(part.partition_max_bytes, budget - total)
            if limit <= 0 and total > 0:
                continue
            try:
                data = broker.read(state, part.fetch_offset, max(limit, 1), committed=committed)
            except KafkaError as exc:
                out.error_code = exc.code
                continue
            if total > 0 and len(data) > limit:
                # Only the first partition with data may exceed the limits (so a huge batch still moves).
                continue
            out.records = data
            if committed:
                # Null when there is nothing to filter, as Kafka answers: clients then skip the bookkeeping.
                out.aborted_transactions = _aborted(broker, state, part.fetch_offset, data) if data else None
            total += len(data)
        topics.append(
            FetchResponse.FetchableTopicResponse(
                topic=topic.topic, topic_id=topic.topic_id, partitions=partitions
            )
        )
    responses = plan.trim(topics, by_id)
    return FetchResponse(responses=responses, session_id=plan.session_id), total


@handles("Fetch", "4-18")
def fetch(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    plan = plan_fetch(fetch_sessions(broker), request, ctx.api_version >= 13, ctx.now_ms, _names(broker))
    if not isinstance(plan, FetchPlan):
        return Respond(FetchResponse(error_code=plan, session_id=0, responses=[]))
    wait_ms = min(request.max_wait_ms, broker.config.max_fetch_wait_ms)
    by_id = ctx.api_version >= 13
    watch = None
    keeps = plan.session is None and wait_ms > 0 and _may_keep(ctx)
    if keeps:
        kept = repeated_fetches(broker).get(_owner(ctx, request), request, ctx.now_ms)
        if kept is not None:
            if not kept.heard_of_data:
                return _wait_with_kept(broker, ctx, request, plan, kept, wait_ms)
            repeated_fetches(broker).drop(kept)
    if plan.session is None and wait_ms > 0:
        # A sessionless fetch (librdkafka's, always) of partitions with nothing to say parks at once: its
        # answer is built once, when data comes or the wait ends, not also now.
        watch = _idle_watch(broker, request, by_id)
    if watch is None:
        response, total = _fetch_once(broker, ctx, request, plan)
        if total >= max(request.min_bytes, 1) or wait_ms <= 0 or _has_error(response):
            return Respond(throttled(ctx, response, CONSUMER_BYTE_RATE, total, ctx.now_ms))

    def retry(now_ms: int, final: bool) -> Any:
        return _fetch_again(broker, ctx, request, plan, now_ms, final, keeps)

    if plan.session is not None:
        watch = [wake_key(plan.session.id)]  # woken by new data in any of its partitions
    elif watch is None:
        watch = [
            (_name_of(broker, t.topic_id) if by_id else t.topic, p.partition)
            for t in request.topics
            for p in t.partitions
        ]
    return RespondWhenData(ctx.now_ms + wait_ms, watch, retry)


def _fetch_again(
    broker: Broker, ctx: RequestContext, request: Any, plan: FetchPlan, now_ms: int, final: bool, keeps: bool
) -> Any:
    """A long poll's retry: the answer, or None to wait on. A sessionless fetch that found nothing when its
    wait ended keeps its answer for the next time it is asked (sluice.broker.fetch_repeat)."""
    again, got = _fetch_once(broker, ctx, request, plan)
    if not (final or got >= max(request.min_bytes, 1) or _has_error(again)):
        return None
    if final and keeps and got == 0 and not _has_error(again) and _may_keep(ctx):
        return _keep(broker, ctx, request, again, now_ms)
    return throttled(ctx, again, CONSUMER_BYTE_RATE, got, now_ms)


def _wait_with_kept(
    broker: Broker, ctx: RequestContext, request: Any, plan: FetchPlan, kept: IdleAnswer, wait_ms: int
) -> RespondWhenData:
    """The same sessionless fetch again, with no new data in any of its partitions since: wait on its
    hidden session, and answer with the kept answer if it is still true when the wait ends."""
    state_of = broker.partitions.peeker()  # every partition of a kept answer was loaded to read it

    def retry(now_ms: int, final: bool) -> Any:
        if final and not kept.heard_of_data and _may_keep(ctx) and kept.still_true(state_of):
            return kept.answer
        response = _fetch_again(broker, ctx, request, plan, now_ms, final, keeps=True)
        if response is not None:
            repeated_fetches(broker).drop(kept)  # nothing when a new answer took its place
        return response

    return RespondWhenData(ctx.now_ms + wait_ms, [wake_key(kept.session.id)], retry)


def _keep(broker: Broker, ctx: RequestContext, request: Any, response: Any, now_ms: int) -> Preencoded:
    """Keep `response`, a sessionless fetch's answer with no records and no error, for `request`."""
    by_id = ctx.api_version >= 13
    state_of = broker.partitions.get
    marks: list[Mark] = []
    for topic, answered in zip(request.topics, response.responses, strict=True):
        name = _name_of(broker, topic.topic_id) if by_id else topic.topic
        for part, out in zip(topic.partitions, answered.partitions, strict=True):
            key = (name, part.partition)
            marks.append(
                (key, state_of(key), out.high_watermark, out.last_stable_offset, out.log_start_offset)
            )
    parts: list[bytes] = []
    response_codec(ctx.api_key, ctx.api_version).encode_root(response, parts)
    answer = Preencoded(response, ctx.api_version, [b"".join(parts)])
    repeated_fetches(broker).keep(_owner(ctx, request), request, marks, answer, now_ms, by_id, _names(broker))
    return answer


def _owner(ctx: RequestContext, request: Any) -> Any:
    """Whose kept answer: the connection's (its security session), else the request's own."""
    return ctx.session if ctx.session is not None else request


def _may_keep(ctx: RequestContext) -> bool:
    """Kept answers are for brokers without an authorizer (it changes requests) or client quotas (they put
    throttle times in answers)."""
    return ctx.acl is None and (ctx.quotas is None or not ctx.quotas.configs)


def _idle_watch(broker: Broker, request: Any, by_id: bool) -> list[tuple[str, int]] | None:
    """The partitions to watch when none of them has anything to answer now (no record a consumer may
    read, no error); None as soon as one has."""
    committed = request.isolation_level == READ_COMMITTED
    partitions = broker.partitions
    watch = []
    for topic in request.topics:
        name = _name_of(broker, topic.topic_id) if by_id else topic.topic
        for part in topic.partitions:
            state = partitions.get((name, part.partition))
            if state is None or broker.answers_now(state, part.fetch_offset, committed=committed):
                return None
            watch.append((name, part.partition))
    return watch


def _aborted(broker: Broker, state: PartitionState, fetch_offset: int, data: bytes) -> list[Any] | None:
    aborted = broker.aborted_transactions(state, fetch_offset, data)
    return [
        FetchResponse.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
        for a in aborted
    ] or None


def _name_of(broker: Broker, topic_id: Any) -> str:
    meta = broker.storage.topic_by_id(topic_id)
    return meta.name if meta else ""


def _names(broker: Broker) -> NameOf:
    """Topic id -> name, None when no topic has the id."""
    return lambda topic_id: _name_of(broker, topic_id) or None


def _has_error(response: Any) -> bool:
    return any(p.error_code for t in response.responses for p in t.partitions)


def _list_offset(broker: Broker, state: PartitionState, timestamp: int, committed: bool) -> tuple[int, int]:
    """(offset, timestamp) for one ListOffsets query, within what consumers may read."""
    log = state.log
    if timestamp == LATEST_TIMESTAMP:
        return (state.last_stable_offset if committed else state.high_watermark), -1
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return log.log_start_offset, -1
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        # Nothing is tiered here: Kafka answers a broker without remote storage with no offset.
        return -1, -1
    if timestamp == MAX_TIMESTAMP:
        offset, ts = log.max_timestamp()
        return (offset, ts) if 0 <= offset < state.high_watermark else (-1, -1)
    if timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {timestamp}")
    found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= state.high_watermark:
        return -1, -1
    return found


@handles("ListOffsets", "1-11")
def list_offsets(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            out = ListOffsetsResponse.ListOffsetsPartitionResponse(
                partition_index=part.partition_index, leader_epoch=0
            )
            state = broker.partitions.get((topic.name, part.partition_index))
            if state is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif part.timestamp < 0 and ctx.api_version < SPECIAL_TIMESTAMP_VERSIONS.get(part.timestamp, 99):
                out.error_code = ErrorCode.UNSUPPORTED_VERSION
            else:
                try:
                    out.offset, out.timestamp = _list_offset(
                        broker, state, part.timestamp, request.isolation_level == READ_COMMITTED
                    )
                except KafkaError as exc:
                    out.error_code = exc.code
            partitions.append(out)
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return Respond(ListOffsetsResponse(topics=topics))


@handles("OffsetForLeaderEpoch", "2-4")
def offset_for_leader_epoch(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    # One leader forever: epoch 0 covers the whole log, so its end offset is the high watermark.
    R = OffsetForLeaderEpochResponse
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            state = broker.partitions.get((topic.topic, part.partition))
            out = R.OffsetForLeaderPartitionResult(partition=part.partition, leader_epoch=0)
            if state is None:
                out.error_code, out.end_offset = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
            elif part.leader_epoch > 0:
                out.error_code, out.end_offset, out.leader_epoch = ErrorCode.NONE, -1, -1
            else:
                out.end_offset = state.high_watermark
            partitions.append(out)
        topics.append(R.OffsetForLeaderTopicResult(topic=topic.topic, partitions=partitions))
    return Respond(R(topics=topics))
