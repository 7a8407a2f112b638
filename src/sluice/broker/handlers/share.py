"""Share groups' records (KIP-932): ShareFetch (78) and ShareAcknowledge (79), as Kafka 4.3 serves them.

A request runs in the member's share session (sluice.coordinator.share.sessions); its acknowledgements are
applied first, partition by partition, all or none each; then, for a ShareFetch, records are acquired from
the session's partitions in turn, sharing MaxRecords and MaxBytes. A fetch that finds nothing waits (a long
poll) until a partition gets data or records come back. An answer that carries acknowledgements goes out
once their state is durable.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from sluice.broker.api import (
    Outcome,
    RequestContext,
    Respond,
    RespondWhenData,
    RespondWhenDurable,
    handles,
    response_class,
)
from sluice.broker.broker import Broker
from sluice.broker.share_service import ShareService
from sluice.coordinator.share.group import MAX_MEMBER_ID_LENGTH
from sluice.coordinator.share.partition import Acquired, AcquireMode
from sluice.coordinator.share.records import SharePartitionKey
from sluice.coordinator.share.sessions import FINAL_EPOCH, OPEN_EPOCH, SessionRefused, ShareSession
from sluice.errors import ErrorCode, KafkaError
from sluice.security.acl import Operation, ResourceType

ShareFetchResponse = response_class("ShareFetch")
ShareAcknowledgeResponse = response_class("ShareAcknowledge")

TP = tuple[uuid.UUID, int]
Acks = dict[TP, list[tuple[int, int, list[int]]]]
# Requests made without a connection (tests driving the dispatcher) share one session owner.
_NO_CONNECTION = object()


@dataclass
class _Answer:
    """What a request did to each partition: records handed out, an error, an acknowledgement's outcome."""

    fetched: dict[TP, tuple[bytes, Acquired]] = field(default_factory=dict)
    errors: dict[TP, tuple[ErrorCode, str | None]] = field(default_factory=dict)
    acked: dict[TP, tuple[ErrorCode, str | None]] = field(default_factory=dict)
    read: set[TP] = field(default_factory=set)

    def acknowledged_any(self) -> bool:
        return any(code is ErrorCode.NONE for code, _ in self.acked.values())


def _refusal(request: Any) -> tuple[ErrorCode, str] | None:
    if not request.group_id:
        return ErrorCode.INVALID_REQUEST, "Invalid group id in the request."
    if not request.member_id or len(request.member_id) > MAX_MEMBER_ID_LENGTH:
        return ErrorCode.INVALID_REQUEST, "Invalid member id in the request."
    return None


def _acks(request: Any) -> Acks:
    """Each partition's acknowledgement ranges (a client may name a topic, even a partition, twice)."""
    acks: Acks = {}
    for t in request.topics:
        for p in t.partitions:
            if p.acknowledgement_batches:
                acks.setdefault((t.topic_id, p.partition_index), []).extend(
                    (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches
                )
    return acks


def _unwritable(shares: ShareService, now_ms: int) -> tuple[ErrorCode, str] | None:
    """Refused before anything changes when the share state cannot be written (a full disk): a record
    handed out or an acknowledgement taken must be on disk before its answer says so."""
    if not shares.ensure_loaded(now_ms):
        return ErrorCode.KAFKA_STORAGE_ERROR, f"{shares.topic.name} cannot be written now"
    reason = shares.refusal(now_ms)
    return None if reason is None else (ErrorCode.KAFKA_STORAGE_ERROR, f"{shares.topic.name}: {reason}")


def _unwritten(answer: _Answer) -> _Answer:
    """What a request's answer becomes when its state could not be written: the service unloaded, so
    nothing it did holds; every partition it touched says so, and no record goes out."""
    failed = ErrorCode.KAFKA_STORAGE_ERROR, "the share state could not be written"
    touched = set(answer.fetched) | set(answer.errors) | answer.read
    return _Answer(errors=dict.fromkeys(touched, failed), acked=dict.fromkeys(answer.acked, failed))


def _enter(shares: ShareService, ctx: RequestContext, request: Any) -> ShareSession:
    connection: Hashable = ctx.session if ctx.session is not None else _NO_CONNECTION
    return shares.sessions.enter(request.group_id, request.member_id, request.share_session_epoch, connection)


def _may_read(ctx: RequestContext, topic: str) -> bool:
    """Read on the topic (the authorizer checked Read on the group before the handler ran)."""
    return ctx.acl is None or ctx.acl.authorize(ctx.principal, ctx.client_host, Operation.READ, ResourceType.TOPIC, topic)


DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to read the topic"


def _acknowledge(
    broker: Broker, ctx: RequestContext, request: Any, acks: Acks, renew: bool, answer: _Answer
) -> None:
    for (topic_id, index), batches in acks.items():
        meta = broker.storage.topic_by_id(topic_id)
        if meta is None:
            answer.acked[(topic_id, index)] = (ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id")
            continue
        if not _may_read(ctx, meta.name):
            answer.acked[(topic_id, index)] = DENIED
            continue
        key = SharePartitionKey(request.group_id, topic_id, index)
        answer.acked[(topic_id, index)] = broker.shares.acknowledge(
            request.member_id, key, batches, renew_allowed=renew, now_ms=ctx.now_ms
        )


def _end_session(shares: ShareService, session: ShareSession) -> None:
    shares.release_session(session)
    shares.sessions.close(session)


@handles("ShareFetch")
def share_fetch(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = ShareFetchResponse
    shares: ShareService = broker.shares
    refusal = _refusal(request) or _fetch_refusal(ctx, request) or _unwritable(shares, ctx.now_ms)
    if refusal is not None:
        return Respond(R(error_code=refusal[0], error_message=refusal[1]))
    acks = _acks(request)
    renew = ctx.api_version >= 2 and request.is_renew_ack
    epoch = request.share_session_epoch
    wait_ms = max(0, min(request.max_wait_ms, broker.config.max_fetch_wait_ms))
    if epoch == OPEN_EPOCH and acks:
        return Respond(R(error_code=ErrorCode.INVALID_REQUEST,
                         error_message="Acknowledge data is not allowed when opening a share session."))
    try:
        session = _enter(shares, ctx, request)
    except SessionRefused as refused:
        error = R(error_code=refused.code, error_message=refused.message)
        if refused.code is ErrorCode.SHARE_SESSION_LIMIT_REACHED and wait_ms:
            # Kafka holds this answer for the fetch's wait, so a client does not retry in a tight loop.
            return RespondWhenData(ctx.now_ms + wait_ms, [], lambda now_ms, final: error if final else None)
        return Respond(error)
    session.add((t.topic_id, p.partition_index) for t in request.topics for p in t.partitions)
    answer = _Answer()
    _acknowledge(broker, ctx, request, acks, renew, answer)
    if epoch != OPEN_EPOCH:
        # After the acknowledgements, as Kafka: a forgotten partition's records stay where they are.
        session.forget((t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions)
    if epoch == FINAL_EPOCH:
        _end_session(shares, session)
    if epoch == FINAL_EPOCH or renew or request.max_records <= 0 or request.max_bytes <= 0:
        return _reply(broker, ctx, request, answer)
    _fetch(broker, ctx, request, session, ctx.now_ms, answer)
    if answer.fetched or answer.errors or answer.acked or wait_ms == 0:
        return _reply(broker, ctx, request, answer)

    def retry(now_ms: int, final: bool) -> Any:
        if shares.sessions.of_member(request.group_id, request.member_id) is not session:
            return R(acquisition_lock_timeout_ms=_lock_ms(broker, request), responses=[])
        again = _Answer()
        if _unwritable(shares, now_ms) is None:
            _fetch(broker, ctx, request, session, now_ms, again)
        if not (final or again.fetched or again.errors):
            return None
        if not shares.write(now_ms):
            again = _unwritten(again)
        return _response(broker, ctx, request, again)

    shares.write(ctx.now_ms)  # a share-partition read for the first time starts its state here
    watch = []
    for topic_id, index in session.partitions:
        meta = broker.storage.topic_by_id(topic_id)
        if meta is not None:
            watch.append((meta.name, index))
    return RespondWhenData(ctx.now_ms + wait_ms, watch, retry)


def _fetch_refusal(ctx: RequestContext, request: Any) -> tuple[ErrorCode, str] | None:
    if ctx.api_version < 2:
        return None
    if request.share_acquire_mode not in (AcquireMode.BATCH_OPTIMIZED, AcquireMode.RECORD_LIMIT):
        return ErrorCode.INVALID_REQUEST, f"Unknown share acquire mode {request.share_acquire_mode}."
    if request.is_renew_ack and (request.max_bytes or request.min_bytes or request.max_records or request.max_wait_ms):
        return (
            ErrorCode.INVALID_REQUEST,
            "maxBytes, minBytes, maxRecords and maxWaitMs must be set to 0 if isRenewAck is true.",
        )
    return None


def _fetch(
    broker: Broker, ctx: RequestContext, request: Any, session: ShareSession, now_ms: int, answer: _Answer
) -> None:
    """Acquire records from the session's partitions in turn, within MaxRecords and MaxBytes."""
    shares: ShareService = broker.shares
    records_left = request.max_records
    bytes_left = min(request.max_bytes, broker.config.fetch_max_bytes)
    mode = AcquireMode(request.share_acquire_mode) if ctx.api_version >= 2 else AcquireMode.BATCH_OPTIMIZED
    for tp in session.in_turn():
        if records_left <= 0 or bytes_left <= 0:
            break
        topic_id, index = tp
        meta = broker.storage.topic_by_id(topic_id)
        if meta is None:
            answer.errors[tp] = (ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}")
            continue
        if not 0 <= index < meta.partitions:
            answer.errors[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{meta.name} has no partition {index}")
            continue
        if not _may_read(ctx, meta.name):
            answer.errors[tp] = DENIED
            continue
        key = SharePartitionKey(request.group_id, topic_id, index)
        starting = shares.states.get(key) is None
        try:
            data, got = shares.acquire(
                request.member_id, key, broker.partition(meta.name, index), max_records=records_left,
                max_bytes=bytes_left, must_fit=bool(answer.fetched), mode=mode,
                batch_size=max(request.batch_size, 1), now_ms=now_ms,
            )
        except KafkaError as exc:
            answer.errors[tp] = (exc.code, exc.message)
            continue
        answer.read.add(tp)
        if got.count:
            answer.fetched[tp] = (data, got)
            records_left -= got.count
            bytes_left -= len(data)
            if starting:
                # As Kafka's first fetch of a group's partitions: each share-partition starts (loads its
                # state) on its own, and the fetch answers with the first that has records; the others
                # start at the member's next fetch. Clients and their tests see that order.
                break


def _lock_ms(broker: Broker, request: Any) -> int:
    return broker.shares.settings(request.group_id).lock_duration_ms


def _reply(broker: Broker, ctx: RequestContext, request: Any, answer: _Answer) -> Outcome:
    """The answer now, or once the acknowledgements it reports are durable."""
    if not broker.shares.write(ctx.now_ms):
        answer = _unwritten(answer)
    response = _response(broker, ctx, request, answer)
    return RespondWhenDurable(response) if answer.acknowledged_any() else Respond(response)


def _response(broker: Broker, ctx: RequestContext, request: Any, answer: _Answer) -> Any:
    R = ShareFetchResponse
    leader = R.LeaderIdAndEpoch(leader_id=broker.config.node_id, leader_epoch=0)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    shown = set(answer.fetched) | set(answer.errors) | set(answer.acked)
    if request.share_session_epoch == OPEN_EPOCH:
        shown |= answer.read
    for tp in sorted(shown, key=lambda t: (str(t[0]), t[1])):
        data, got = answer.fetched.get(tp, (b"", None))
        error, message = answer.errors.get(tp, (ErrorCode.NONE, None))
        ack_error, ack_message = answer.acked.get(tp, (ErrorCode.NONE, None))
        by_topic.setdefault(tp[0], []).append(R.PartitionData(
            partition_index=tp[1], error_code=error, error_message=message, acknowledge_error_code=ack_error,
            acknowledge_error_message=ack_message, current_leader=leader, records=data,
            acquired_records=[] if got is None else [
                R.AcquiredRecords(first_offset=first, last_offset=last, delivery_count=count)
                for first, last, count in got.ranges
            ],
        ))
    return R(
        acquisition_lock_timeout_ms=_lock_ms(broker, request),
        responses=[R.ShareFetchableTopicResponse(topic_id=t, partitions=parts) for t, parts in by_topic.items()],
    )


@handles("ShareAcknowledge")
def share_acknowledge(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = ShareAcknowledgeResponse
    shares: ShareService = broker.shares
    refusal = _refusal(request)
    if refusal is None and request.share_session_epoch == OPEN_EPOCH:
        refusal = ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session."
    refusal = refusal or _unwritable(shares, ctx.now_ms)
    if refusal is not None:
        return Respond(R(error_code=refusal[0], error_message=refusal[1]))
    try:
        session = _enter(shares, ctx, request)
    except SessionRefused as refused:
        return Respond(R(error_code=refused.code, error_message=refused.message))
    answer = _Answer()
    _acknowledge(broker, ctx, request, _acks(request), ctx.api_version >= 2 and request.is_renew_ack, answer)
    if request.share_session_epoch == FINAL_EPOCH:
        _end_session(shares, session)
    if not shares.write(ctx.now_ms):
        answer = _unwritten(answer)
    leader = R.LeaderIdAndEpoch(leader_id=broker.config.node_id, leader_epoch=0)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, index), (code, message) in sorted(answer.acked.items(), key=lambda i: (str(i[0][0]), i[0][1])):
        by_topic.setdefault(topic_id, []).append(R.PartitionData(
            partition_index=index, error_code=code, error_message=message, current_leader=leader,
        ))
    response = R(
        acquisition_lock_timeout_ms=_lock_ms(broker, request),
        responses=[R.ShareAcknowledgeTopicResponse(topic_id=t, partitions=parts) for t, parts in by_topic.items()],
    )
    return RespondWhenDurable(response) if answer.acknowledged_any() else Respond(response)
