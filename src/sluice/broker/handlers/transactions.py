"""Transaction APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
DescribeTransactions and ListTransactions. Each translates the request into one coordinator call; answers
that follow a state change wait until it is durable.

Two-phase commit (KIP-939, InitProducerId v6) is not offered: a request asking for it (Enable2Pc) is
refused as Kafka refuses it while transaction.two.phase.commit.enable is off, and one asking to keep a
prepared transaction (KeepPreparedTxn) hears UNSUPPORTED_VERSION, as from Kafka 4.3. WriteTxnMarkers is
broker-to-broker in Kafka; here it only serves operators' aborts (`sluice transactions abort`,
kafka-transactions.sh abort).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from sluice.broker.api import Outcome, RequestContext, Respond, RespondWhenDurable, handles, response_class
from sluice.broker.broker import Broker
from sluice.coordinator.messages import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
from sluice.coordinator.transactions import PendingOffset, TxnOutcome, TxnState
from sluice.errors import ErrorCode

InitProducerIdResponse = response_class("InitProducerId")
AddPartitionsToTxnResponse = response_class("AddPartitionsToTxn")
AddOffsetsToTxnResponse = response_class("AddOffsetsToTxn")
TxnOffsetCommitResponse = response_class("TxnOffsetCommit")
EndTxnResponse = response_class("EndTxn")
DescribeTransactionsResponse = response_class("DescribeTransactions")
ListTransactionsResponse = response_class("ListTransactions")
WriteTxnMarkersResponse = response_class("WriteTxnMarkers")

MAX_TRANSACTIONAL_ID_CHARS = 32_767
MAX_PARTITIONS_PER_REQUEST = 100_000
# ListTransactions v2 takes a regular expression from the client: keep it short.
MAX_PATTERN_CHARS = 1_000


def _answer(
    broker: Broker,
    outcome: TxnOutcome,
    response: Any,
    now_ms: int,
    *,
    durable: bool = True,
    ending: bool = False,
) -> Outcome:
    """Apply the outcome; answer once it is durable unless `durable` is False.

    Adding partitions or a group to a transaction is answered at once: its record is appended before any
    write it allows, and every group commit fsyncs transaction state first, so no acknowledged write
    can outlive it in a crash (and an unacknowledged one is aborted at start, as a hanging transaction)."""
    changed = broker.transactions.apply(outcome, now_ms, ending=ending)
    if changed and durable and broker.config.fsync_before_ack:
        return RespondWhenDurable(response)
    return Respond(response)


def _no_coordinator(broker: Broker, ctx: RequestContext) -> bool:
    """This broker runs no transaction coordinator (clients retry COORDINATOR_NOT_AVAILABLE)."""
    return broker.transactions is None


def _cannot_write(broker: Broker, ctx: RequestContext) -> bool:
    """True while the coordinator is unloaded and cannot load yet, or the data dir refuses writes (full disk,
    below min_free_bytes): a call that would change transaction state is refused before the coordinator
    changes anything, so its state never runs ahead of `__transaction_state` and no transaction is left
    half ended. Kafka answers a coordinator whose log
    cannot be written with NOT_COORDINATOR, which every client retries (the reason is logged by the
    free-space guard); the coordinator unloads meanwhile and loads again once space is back."""
    service = broker.transactions
    if service is None:
        return broker.write_refusal(ctx.now_ms) is not None
    if not service.ensure_loaded(ctx.now_ms):
        return True
    refusal = service.refusal(ctx.now_ms)
    if refusal is not None:
        service.unload(refusal)
    return refusal is not None


@handles("InitProducerId")
def init_producer_id(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = InitProducerIdResponse
    if request.transactional_id is None:
        if request.producer_id >= 0:
            # KIP-360: an idempotent producer bumps its epoch after an unknown-sequence error and keeps its id.
            epoch = (request.producer_epoch + 1) & 0x7FFF
            return Respond(R(error_code=0, producer_id=request.producer_id, producer_epoch=epoch))
        return Respond(R(error_code=0, producer_id=broker.new_producer_id(ctx.now_ms), producer_epoch=0))
    if _no_coordinator(broker, ctx):
        return Respond(R(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1))
    if request.keep_prepared_txn:
        # Nothing is ever left prepared here, so there is nothing to keep: the flag is refused, and the open
        # transaction is left as it is (not aborted) for the client to retry without it.
        return Respond(R(error_code=ErrorCode.UNSUPPORTED_VERSION, producer_id=-1, producer_epoch=-1))
    if request.enable2_pc:
        return Respond(
            R(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
        )
    if len(request.transactional_id) > MAX_TRANSACTIONAL_ID_CHARS:
        return Respond(R(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1))
    if _cannot_write(broker, ctx):
        return Respond(R(error_code=ErrorCode.NOT_COORDINATOR, producer_id=-1, producer_epoch=-1))
    outcome = broker.transactions.coordinator.init_producer_id(
        request.transactional_id,
        request.transaction_timeout_ms,
        request.producer_id,
        request.producer_epoch,
        ctx.now_ms,
        broker.new_producer_id(ctx.now_ms),
    )
    response = R(
        error_code=outcome.error,
        producer_id=outcome.producer_id if not outcome.error else -1,
        producer_epoch=outcome.epoch if not outcome.error else -1,
    )
    return _answer(broker, outcome, response, ctx.now_ms)


def _add_partitions(
    broker: Broker,
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    topics: Any,
    verify_only: bool,
    outcome_sink: TxnOutcome,
) -> list[Any]:
    R = AddPartitionsToTxnResponse
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    unknown = {tp for tp in wanted if tp not in broker.partitions}
    if len(wanted) > MAX_PARTITIONS_PER_REQUEST:
        errors = {tp: ErrorCode.INVALID_REQUEST for tp in wanted}
    elif not broker.transactions.ensure_loaded(ctx.now_ms) or (
        not verify_only and _cannot_write(broker, ctx)
    ):
        errors = {tp: ErrorCode.NOT_COORDINATOR for tp in wanted}
    elif unknown:
        # As Kafka: nothing is added when one partition is unknown; the others were "not attempted".
        errors = {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    else:
        outcome = broker.transactions.coordinator.add_partitions(
            transactional_id,
            producer_id,
            epoch,
            wanted,
            ctx.now_ms,
            fenced_code=ctx.api_version >= 2,
            verify_only=verify_only,
        )
        outcome_sink.merge(outcome)
        errors = outcome.partition_errors
    by_topic: dict[str, list[Any]] = {}
    for topic, index in wanted:
        by_topic.setdefault(topic, []).append(
            R.AddPartitionsToTxnPartitionResult(
                partition_index=index, partition_error_code=errors[(topic, index)]
            )
        )
    return [R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=p) for t, p in by_topic.items()]


@handles("AddPartitionsToTxn")
def add_partitions_to_txn(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = AddPartitionsToTxnResponse
    sink = TxnOutcome()
    if ctx.api_version <= 3:
        if _no_coordinator(broker, ctx):
            results = [
                R.AddPartitionsToTxnTopicResult(
                    name=t.name,
                    results_by_partition=[
                        R.AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.v3_and_below_topics
            ]
            return Respond(R(results_by_topic_v3_and_below=results))
        results = _add_partitions(
            broker,
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            False,
            sink,
        )
        return _answer(broker, sink, R(results_by_topic_v3_and_below=results), ctx.now_ms, durable=False)
    if _no_coordinator(broker, ctx):
        return Respond(R(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
    by_txn = []
    for txn in request.transactions:
        results = _add_partitions(
            broker,
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
            sink,
        )
        by_txn.append(
            R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=results)
        )
    return _answer(broker, sink, R(error_code=0, results_by_transaction=by_txn), ctx.now_ms, durable=False)


@handles("AddOffsetsToTxn")
def add_offsets_to_txn(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    if _no_coordinator(broker, ctx):
        return Respond(AddOffsetsToTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
    if _cannot_write(broker, ctx):
        return Respond(AddOffsetsToTxnResponse(error_code=ErrorCode.NOT_COORDINATOR))
    outcome = broker.transactions.coordinator.add_offsets(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.group_id,
        ctx.now_ms,
        fenced_code=ctx.api_version >= 2,
    )
    return _answer(
        broker, outcome, AddOffsetsToTxnResponse(error_code=outcome.error), ctx.now_ms, durable=False
    )


@handles("TxnOffsetCommit")
def txn_offset_commit(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    R = TxnOffsetCommitResponse
    error = ErrorCode.NONE
    if _no_coordinator(broker, ctx) or broker.groups is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    elif not (broker.transactions.ensure_loaded(ctx.now_ms) and broker.groups.ensure_loaded(ctx.now_ms)):
        error = ErrorCode.NOT_COORDINATOR
    elif ctx.api_version >= 3 and (request.generation_id >= 0 or request.member_id):
        # KIP-447: the group's coordinator fences a zombie by its member id and generation.
        check = OffsetCommit(
            request.group_id,
            [
                OffsetCommitTopic(
                    t.name,
                    [OffsetCommitPartition(p.partition_index, p.committed_offset) for p in t.partitions],
                )
                for t in request.topics
            ],
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
        )
        error = broker.groups.coordinator.txn_commit_error(check)
    limit = broker.config.offset_metadata_max_bytes
    too_large = {
        (t.name, p.partition_index)
        for t in request.topics
        for p in t.partitions
        if p.committed_metadata is not None and len(p.committed_metadata) > limit
    }
    if error is ErrorCode.NONE:
        offsets = {
            (t.name, p.partition_index): PendingOffset(
                p.committed_offset, p.committed_leader_epoch, p.committed_metadata or ""
            )
            for t in request.topics
            for p in t.partitions
            if (t.name, p.partition_index) not in too_large
        }
        outcome = broker.transactions.coordinator.txn_offset_commit(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.group_id,
            offsets,
            ctx.now_ms,
        )
        error = outcome.error
    topics = [
        R.TxnOffsetCommitResponseTopic(
            name=t.name,
            partitions=[
                R.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.OFFSET_METADATA_TOO_LARGE
                    if error is ErrorCode.NONE and (t.name, p.partition_index) in too_large
                    else error,
                )
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return Respond(R(topics=topics))


@handles("EndTxn")
def end_txn(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    if _no_coordinator(broker, ctx):
        return Respond(EndTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
    if _cannot_write(broker, ctx):
        return Respond(EndTxnResponse(error_code=ErrorCode.NOT_COORDINATOR))
    outcome = broker.transactions.coordinator.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        ctx.now_ms,
        fenced_code=ctx.api_version >= 2,
    )
    response = EndTxnResponse(
        error_code=outcome.error, producer_id=outcome.producer_id, producer_epoch=outcome.epoch
    )
    return _answer(broker, outcome, response, ctx.now_ms, ending=True)


@handles("DescribeTransactions")
def describe_transactions(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeTransactionsResponse
    states = []
    service = broker.transactions
    # Unloaded (its topic cannot be written): Kafka's answer for a coordinator that lost its partition.
    unloaded = service is not None and not service.ensure_loaded(ctx.now_ms)
    for transactional_id in request.transactional_ids:
        meta = service.coordinator.txns.get(transactional_id) if service and not unloaded else None
        if unloaded or meta is None or meta.state is TxnState.DEAD:
            states.append(
                R.TransactionState(
                    error_code=ErrorCode.NOT_COORDINATOR if unloaded else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                    transactional_id=transactional_id,
                    transaction_state="",
                    producer_id=-1,
                    producer_epoch=-1,
                    transaction_start_time_ms=-1,
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(index)
        states.append(
            R.TransactionState(
                error_code=0,
                transactional_id=transactional_id,
                transaction_state=meta.state.value,
                transaction_timeout_ms=meta.timeout_ms,
                transaction_start_time_ms=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.epoch,
                topics=[R.TopicData(topic=t, partitions=p) for t, p in by_topic.items()],
            )
        )
    return Respond(R(transaction_states=states))


@handles("ListTransactions")
def list_transactions(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = ListTransactionsResponse
    known = {s.value for s in TxnState}
    unknown = [s for s in request.state_filters if s not in known]
    wanted_states = set(request.state_filters) - set(unknown)
    pattern = None
    if request.transactional_id_pattern and len(request.transactional_id_pattern) > MAX_PATTERN_CHARS:
        return Respond(R(error_code=ErrorCode.INVALID_REQUEST))
    if request.transactional_id_pattern:
        try:
            pattern = re.compile(request.transactional_id_pattern)
        except re.error:
            pattern = re.compile(fnmatch.translate(request.transactional_id_pattern))
    found = []
    txns = broker.transactions.coordinator.txns.values() if broker.transactions else []
    for meta in sorted(txns, key=lambda m: m.transactional_id):
        if request.state_filters and meta.state.value not in wanted_states:
            continue
        if request.producer_id_filters and meta.producer_id not in request.producer_id_filters:
            continue
        if request.duration_filter >= 0 and (
            meta.state is not TxnState.ONGOING or ctx.now_ms - meta.start_ms < request.duration_filter
        ):
            continue
        if pattern is not None and not pattern.fullmatch(meta.transactional_id):
            continue
        found.append(
            R.TransactionState(
                transactional_id=meta.transactional_id,
                producer_id=meta.producer_id,
                transaction_state=meta.state.value,
            )
        )
    return Respond(R(error_code=0, unknown_state_filters=unknown, transaction_states=found))


@handles("WriteTxnMarkers")
def write_txn_markers(broker: Broker, ctx: RequestContext, request: Any) -> Outcome:
    """Kafka sends this between brokers; sluice answers it for operators (kafka-transactions.sh abort).

    Only aborts are accepted. A producer whose transaction the coordinator knows is aborted through the
    coordinator (fenced, markers in every partition of the transaction); a hanging transaction the coordinator
    does not know gets an ABORT marker in each named partition where that producer has one open."""
    R = WriteTxnMarkersResponse
    sink = TxnOutcome()
    wrote_directly = False
    refused = _cannot_write(broker, ctx)
    results = []
    for marker in request.markers:
        topics = []
        coordinated = None
        if broker.transactions is not None and not marker.transaction_result and not refused:
            meta = broker.transactions.coordinator.by_producer.get(marker.producer_id)
            if meta is not None and meta.state is TxnState.ONGOING:
                coordinated = meta
        if coordinated is not None:
            sink.merge(
                broker.transactions.coordinator.abort_by_operator(
                    coordinated.transactional_id, ctx.now_ms, broker.new_producer_id(ctx.now_ms)
                )
            )
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                error = ErrorCode.NONE
                state = broker.partitions.get((topic.name, index))
                if marker.transaction_result:
                    error = (
                        ErrorCode.INVALID_REQUEST
                    )  # committing from outside the coordinator would be a lie
                elif state is None:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif refused:
                    error = ErrorCode.KAFKA_STORAGE_ERROR
                elif coordinated is None and marker.producer_id in state.producers.ongoing:
                    producer = state.producers.producers.get(marker.producer_id)
                    if producer is not None and marker.producer_epoch < producer.epoch:
                        error = ErrorCode.INVALID_PRODUCER_EPOCH
                    else:
                        broker.write_marker(
                            state,
                            marker.producer_id,
                            marker.producer_epoch,
                            commit=False,
                            coordinator_epoch=marker.coordinator_epoch,
                            now_ms=ctx.now_ms,
                        )
                        wrote_directly = True
                partitions.append(R.WritableTxnMarkerPartitionResult(partition_index=index, error_code=error))
            topics.append(R.WritableTxnMarkerTopicResult(name=topic.name, partitions=partitions))
        results.append(R.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    response = R(markers=results)
    changed = broker.transactions.apply(sink, ctx.now_ms) if broker.transactions is not None else False
    if (changed or wrote_directly) and broker.config.fsync_before_ack:
        return RespondWhenDurable(response)
    return Respond(response)
