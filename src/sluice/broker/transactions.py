"""Connects the pure transaction coordinator to the broker: its records go to `__transaction_state`, its
markers into the partitions, the offsets of committed transactions to the group coordinator.

Order when a transaction ends (one node, so both of Kafka's phases run in one call): the prepare record
is appended and, with fsync_before_ack, fsynced before any marker is written; then markers and offsets;
then the complete record. The EndTxn answer waits for the group commit that covers all of them, so a
client hears "committed" only once its markers are durable. At start the log is read back and any
transaction caught between prepare and complete is finished.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from sluice.broker.broker import TRANSACTION_STATE_TOPIC, Broker
from sluice.coordinator.messages import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
from sluice.coordinator.transactions import TransactionCoordinator, TxnConfig, TxnOutcome, TxnState, state_key
from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches, parse_batch_header

log = logging.getLogger("sluice.transactions")

READ_CHUNK_BYTES = 1 << 20
COMPACTION_BATCH_RECORDS = 1000
# One coordinator forever: its epoch in every marker is 0.
_COORDINATOR_EPOCH = 0


class TransactionService:
    def __init__(self, broker: Broker, coordinator: TransactionCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        self.state_records = 0  # records in __transaction_state since it was last compacted

    # ----- applying outcomes -----

    def apply(self, outcome: TxnOutcome, now_ms: int) -> bool:
        """Persist and write what `outcome` asks; True when something must become durable first."""
        if outcome.prepare:
            self._persist(outcome.prepare, now_ms)
            if self.broker.config.fsync_before_ack and _spans_several(outcome):
                # No marker may be on disk without its prepare record, or a crash could leave a transaction
                # committed in one partition and aborted in another. With one partition and no offsets the
                # marker is the whole decision, so this fsync is not needed.
                self.broker.partition(TRANSACTION_STATE_TOPIC, 0).log.flush()
        for markers in outcome.markers:
            for topic, index in markers.partitions:
                state = self.broker.partitions.get((topic, index))
                if state is None:
                    continue  # the topic was deleted meanwhile
                self.broker.write_marker(
                    state,
                    markers.producer_id,
                    markers.epoch,
                    commit=markers.commit,
                    coordinator_epoch=_COORDINATOR_EPOCH,
                    now_ms=now_ms,
                )
            if markers.commit and markers.offsets and self.broker.groups is not None:
                for group_id, offsets in markers.offsets.items():
                    by_topic: dict[str, list[OffsetCommitPartition]] = {}
                    for (topic, index), pending in sorted(offsets.items()):
                        by_topic.setdefault(topic, []).append(
                            OffsetCommitPartition(
                                index, pending.offset, pending.leader_epoch, pending.metadata
                            )
                        )
                    request = OffsetCommit(group_id, [OffsetCommitTopic(t, p) for t, p in by_topic.items()])
                    records = self.broker.groups.coordinator.write_txn_offsets(request, now_ms)
                    self.broker.groups.persist([(r.key, r.value) for r in records], now_ms)
        if outcome.records:
            self._persist(outcome.records, now_ms)
        self.maybe_compact(now_ms)
        return bool(outcome.prepare or outcome.records or outcome.markers)

    def maybe_compact(self, now_ms: int) -> bool:
        """Rewrite the live state (one record per transactional id) at the log end and drop what precedes
        it, once the log holds many records and at least twice as many as are live. Every transaction is
        in a stable state between calls, so the live state is exactly what the coordinator holds.

        Crash-safe without a marker: until the old records are dropped, replaying old + rewritten records
        gives the same last-write-wins state as the old alone."""
        live = len(self.coordinator.txns)
        if (
            self.state_records < self.broker.config.offsets_compaction_min_records
            or self.state_records < 2 * live
        ):
            return False
        state = self.broker.partition(TRANSACTION_STATE_TOPIC, 0)
        rewrite_start = state.log.log_end_offset
        records = [(state_key(m.transactional_id), m.encode()) for m in self.coordinator.txns.values()]
        for first in range(0, len(records), COMPACTION_BATCH_RECORDS):
            self._persist(records[first : first + COMPACTION_BATCH_RECORDS], now_ms)
        state.log.flush()  # the rewrite must be durable before the originals go
        self.broker.advance_high_watermark(state, state.log.log_end_offset)
        state.log.delete_records_before(rewrite_start)
        log.info("compacted %s: %d records down to %d", TRANSACTION_STATE_TOPIC, self.state_records, live)
        self.state_records = live
        return True

    def _persist(self, records: list[tuple[bytes, bytes | None]], now_ms: int) -> None:
        batch = encode_batch(
            [Record(i, 0, key, value, []) for i, (key, value) in enumerate(records)], base_timestamp=now_ms
        )
        state = self.broker.partition(TRANSACTION_STATE_TOPIC, 0)
        self.broker._append_validated(state, batch, [parse_batch_header(batch)], now_ms)
        self.state_records += len(records)

    def new_producer_id(self, now_ms: int) -> int:
        return self.broker.new_producer_id(now_ms)

    # ----- produce-side verification -----

    def verify(self, producer_id: int, epoch: int, topic: str, partition: int) -> None:
        error = self.coordinator.verify(producer_id, epoch, topic, partition)
        if error is ErrorCode.NONE:
            return
        messages = {
            ErrorCode.PRODUCER_FENCED: f"producer {producer_id} epoch {epoch} has been fenced by a newer epoch",
            ErrorCode.INVALID_TXN_STATE: f"{topic}-{partition} is not part of producer {producer_id}'s open transaction",
            ErrorCode.INVALID_PRODUCER_ID_MAPPING: f"producer id {producer_id} has no transactional id",
        }
        raise KafkaError(error, messages.get(error, f"epoch {epoch} is not the producer's current epoch"))

    # ----- timers -----

    def next_deadline(self) -> int | None:
        return self.coordinator.next_deadline()

    def tick(self, now_ms: int) -> None:
        outcome = self.coordinator.tick(now_ms, self.new_producer_id(now_ms))
        for markers in outcome.markers:
            log.info(
                "aborted transaction %r (producer %d): timed out",
                markers.transactional_id,
                markers.producer_id,
            )
        self.apply(outcome, now_ms)


def _spans_several(outcome: TxnOutcome) -> bool:
    return any(len(m.partitions) > 1 or m.offsets for m in outcome.markers)


def abort_hanging_transactions(broker: Broker, coordinator: TransactionCoordinator, now_ms: int) -> int:
    """Abort open transactions found in partitions that the coordinator does not know them to span.

    Such data can only come from a crash: the partition was added to the transaction, its data reached the
    disk but the record adding it did not (the record is fsynced first, so the data was never acknowledged
    and the producer will hear INVALID_TXN_STATE). Left alone it would hold the LSO forever."""
    aborted = 0
    for (topic, index), state in list(broker.partitions.items()):
        for producer_id in list(state.producers.ongoing):
            meta = coordinator.by_producer.get(producer_id)
            if meta is not None and meta.state is TxnState.ONGOING and (topic, index) in meta.partitions:
                continue
            producer = state.producers.producers.get(producer_id)
            epoch = producer.epoch if producer is not None else 0
            broker.write_marker(
                state, producer_id, epoch, commit=False, coordinator_epoch=_COORDINATOR_EPOCH, now_ms=now_ms
            )
            log.warning("aborted a hanging transaction of producer %d in %s-%d", producer_id, topic, index)
            aborted += 1
    return aborted


def _read_state_topic(broker: Broker) -> Iterator[tuple[bytes, bytes | None]]:
    log_ = broker.partition(TRANSACTION_STATE_TOPIC, 0).log
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        data = log_.read(offset, READ_CHUNK_BYTES)
        if not data:
            break
        for pos, header in iter_batches(data):
            _, records = decode_batch(data, pos)
            for record in records:
                if record.key is not None:
                    yield record.key, record.value
            offset = header.last_offset + 1


def attach_transaction_coordinator(broker: Broker, now_ms: int) -> TransactionService:
    config = broker.config
    if broker.storage.topic(TRANSACTION_STATE_TOPIC) is None:
        broker.create_topic(TRANSACTION_STATE_TOPIC, 1, {"cleanup.policy": "compact"}, internal=True)
    coordinator = TransactionCoordinator(
        TxnConfig(
            max_timeout_ms=config.transaction_max_timeout_ms,
            id_expiration_ms=config.transactional_id_expiration_ms,
        )
    )
    records = list(_read_state_topic(broker))
    coordinator.load(records, now_ms)
    service = TransactionService(broker, coordinator)
    service.state_records = len(records)
    broker.transactions = service
    broker.txn_verifier = service.verify
    # The bounded start-up scan may have missed the first batch of a long open transaction.
    for meta in coordinator.open_transactions():
        for topic, index in meta.partitions:
            broker.find_open_transaction(topic, index, meta.producer_id)
    recovered = coordinator.recover(now_ms)
    if recovered.markers:
        log.info("finishing %d transaction(s) a crash left half ended", len(recovered.markers))
    service.apply(recovered, now_ms)
    abort_hanging_transactions(broker, coordinator, now_ms)
    # Make what recovery wrote durable and visible now, before any client is served.
    flushing = broker.begin_flush()
    for state, _ in flushing:
        state.log.flush()
    broker.end_flush(flushing)
    log.info("loaded %d transactional ids from %s", len(coordinator.txns), TRANSACTION_STATE_TOPIC)
    return service
