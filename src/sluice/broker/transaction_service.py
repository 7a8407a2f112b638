"""The transaction service: connects the pure transaction coordinator (sluice.coordinator.transactions) to
the broker. Its records go to `__transaction_state` (a `LocalStateTopic`, records in Kafka's layout: see
sluice.coordinator.transaction_log), its markers into the partitions, the offsets of committed
transactions to the group service. The Kafka APIs reach it through sluice.broker.handlers.transactions.

Order when a transaction ends (one node, so both of Kafka's phases run in one call): the prepare record
is appended and, with fsync_before_ack, fsynced before any marker is written; then markers and offsets;
then the complete record. The EndTxn answer waits for the group commit that covers all of them, so a
client hears "committed" only once its markers are durable. At start the log is read back and any
transaction caught between prepare and complete is finished.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from sluice.broker.broker import TRANSACTION_STATE_TOPIC, Broker, PartitionState
from sluice.coordinator.messages import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
from sluice.coordinator.transaction_log import decode_value
from sluice.coordinator.transactions import (
    PREPARING,
    TP,
    Markers,
    TransactionCoordinator,
    TxnConfig,
    TxnOutcome,
    TxnState,
    state_key,
)
from sluice.errors import ErrorCode, KafkaError
from sluice.state_topic.local import StateTopicService
from sluice.storage.log import DiskFull

log = logging.getLogger("sluice.transactions")

MARKER_RETRY_MS = 1000
# One coordinator forever: its epoch in every marker is 0.
_COORDINATOR_EPOCH = 0


class TransactionService(StateTopicService[TransactionCoordinator]):
    def __init__(self, broker: Broker) -> None:
        # Compacted by the log cleaner like __consumer_offsets: one record per transactional id survives.
        super().__init__(
            broker,
            TRANSACTION_STATE_TOPIC,
            broker.config.transaction_state_segment_bytes,
            lambda: TransactionCoordinator(_txn_config(broker)),
        )
        self.broker = broker
        broker.on_partition_loaded = self._partition_loaded
        # The latest time the service was told (no clock in the broker): the timestamp of markers that
        # abort hanging transactions found in partitions loaded between calls.
        self._last_now_ms = 0
        # While an outcome is applied (or recovery runs) the coordinator's view of a transaction may be
        # ahead of the partitions its markers are going to: partitions loading then are checked after.
        self._held_checks: list[PartitionState] | None = None
        # Transactions whose markers some partition refused (I/O error, full disk): tried again on the timer.
        self.pending_markers: dict[str, _PendingMarkers] = {}
        self._marker_retry_at: int | None = None

    # ----- applying outcomes -----

    def apply(self, outcome: TxnOutcome, now_ms: int, *, ending: bool = False) -> bool:
        """Persist and write what `outcome` asks; True when something must become durable first. When
        `__transaction_state` refuses the write, the coordinator unloads (its state is ahead of the log) and
        KafkaError(NOT_COORDINATOR) is raised; it loads again from the log once the log can be written."""
        try:
            with self._holding_checks():
                return self._apply(outcome, now_ms, ending=ending)
        except (KafkaError, DiskFull, OSError) as exc:
            self.unload(str(exc))
            raise KafkaError(
                ErrorCode.NOT_COORDINATOR, f"{self.topic.name} cannot be written: {exc}"
            ) from None

    def _apply(self, outcome: TxnOutcome, now_ms: int, *, ending: bool = False) -> bool:
        """Persist and write what `outcome` asks; True when something must become durable first.

        `ending` (EndTxn): when every transaction it ends has one partition and no offsets, its marker is
        the whole decision, so only the marker must be durable before the answer; the Prepare/Complete
        records ride along with the next group commit. If a crash takes them first, the transaction is
        found Ongoing at start and later aborted, which writes an ABORT marker after the durable COMMIT
        one: that marker ends no open transaction, so the committed data stays committed."""
        state_key_ = (TRANSACTION_STATE_TOPIC, 0)
        # Only this call's own records may be deferred: an earlier append there has an answer waiting on it.
        deferrable = (
            ending and state_key_ not in self.broker.unflushed and state_key_ not in self.broker.deferred
        )
        if outcome.prepare:
            self.persist(outcome.prepare, now_ms)
            if self.broker.config.fsync_before_ack and _spans_several(outcome):
                # No marker may be on disk without its prepare record, or a crash could leave a transaction
                # committed in one partition and aborted in another. With one partition and no offsets the
                # marker is the whole decision, so this fsync is not needed.
                self.topic.flush()
        unfinished: dict[str, _PendingMarkers] = {}
        for markers in outcome.markers:
            remaining = self._write_markers(markers, markers.partitions, now_ms)
            if remaining:
                unfinished[markers.transactional_id] = _PendingMarkers(markers, remaining)
            else:
                self._write_offsets(markers, now_ms)
        records = outcome.records
        if unfinished:
            records = self._hold(unfinished, outcome, now_ms)
        if records:
            self.persist(records, now_ms)
        if deferrable and outcome.markers and not unfinished and not _spans_several(outcome):
            self.broker.defer_flush(*state_key_)
        return bool(outcome.prepare or outcome.records or outcome.markers)

    def _write_markers(
        self, markers: Markers, partitions: list[TP], now_ms: int, *, retry: bool = False
    ) -> list[TP]:
        """Write `markers` into `partitions`; the partitions whose log refused the write (offline after an
        I/O error, disk full) are returned, to be tried again."""
        failed: list[TP] = []
        for topic, index in partitions:
            state = self.broker.partitions.get((topic, index))
            if state is None:
                continue  # the topic was deleted meanwhile
            try:
                self.broker.write_marker(
                    state,
                    markers.producer_id,
                    markers.epoch,
                    commit=markers.commit,
                    coordinator_epoch=_COORDINATOR_EPOCH,
                    now_ms=now_ms,
                )
            except (KafkaError, OSError) as exc:
                # Said once; the retries every second would only repeat it.
                (log.debug if retry else log.error)(
                    "transaction %r: cannot write its %s marker into %s-%d yet: %s",
                    markers.transactional_id,
                    "COMMIT" if markers.commit else "ABORT",
                    topic,
                    index,
                    exc,
                )
                failed.append((topic, index))
        return failed

    def _write_offsets(self, markers: Markers, now_ms: int) -> None:
        if not (markers.commit and markers.offsets and self.broker.groups is not None):
            return
        for group_id, offsets in markers.offsets.items():
            by_topic: dict[str, list[OffsetCommitPartition]] = {}
            for (topic, index), pending in sorted(offsets.items()):
                meta = self.broker.storage.topic(topic)
                if meta is None or index >= meta.partitions:
                    continue  # deleted while the transaction was open: its offsets went with it (Kafka too)
                by_topic.setdefault(topic, []).append(
                    OffsetCommitPartition(index, pending.offset, pending.leader_epoch, pending.metadata)
                )
            if not by_topic:
                continue
            request = OffsetCommit(group_id, [OffsetCommitTopic(t, p) for t, p in by_topic.items()])
            records = self.broker.groups.coordinator.write_txn_offsets(request, now_ms)
            self.broker.groups.persist([(r.key, r.value) for r in records], now_ms)

    def _hold(
        self, unfinished: dict[str, _PendingMarkers], outcome: TxnOutcome, now_ms: int
    ) -> list[tuple[bytes, bytes | None]]:
        """Some markers could not be written: those transactions stay PrepareCommit/PrepareAbort, on disk
        (their later records are withheld, so a restart finishes them) and in memory (their producers hear
        CONCURRENT_TRANSACTIONS meanwhile), until the timer has written every marker."""
        held = {state_key(t): t for t in unfinished}
        kept: list[tuple[bytes, bytes | None]] = []
        for key, value in outcome.records:
            if key in held:
                unfinished[held[key]].final = value  # the last one is the state to restore
            else:
                kept.append((key, value))
        for transactional_id, pending in unfinished.items():
            # In memory: the state it will have (producer id and epoch as the client was told), still ending.
            assert pending.final is not None
            meta, _ = decode_value(transactional_id, pending.final)
            meta.state = TxnState.PREPARE_COMMIT if pending.markers.commit else TxnState.PREPARE_ABORT
            meta.partitions = set(pending.markers.partitions)
            meta.offsets = {g: dict(o) for g, o in pending.markers.offsets.items()}
            self.coordinator.put(meta)
            self.pending_markers[transactional_id] = pending
        self._marker_retry_at = now_ms + MARKER_RETRY_MS
        return kept

    def _retry_markers(self, now_ms: int) -> None:
        for transactional_id, pending in list(self.pending_markers.items()):
            pending.remaining = self._write_markers(pending.markers, pending.remaining, now_ms, retry=True)
            if pending.remaining:
                continue
            self._write_offsets(pending.markers, now_ms)
            del self.pending_markers[transactional_id]
            assert pending.final is not None
            self.coordinator.put(decode_value(transactional_id, pending.final)[0])
            self.persist([(state_key(transactional_id), pending.final)], now_ms)
            log.info("transaction %r: every marker written at last", transactional_id)
        self._marker_retry_at = now_ms + MARKER_RETRY_MS if self.pending_markers else None

    def on_unloaded(self) -> None:
        """The transactions whose markers wait are Prepare* in the log and finish on load."""
        self.pending_markers.clear()
        self._marker_retry_at = None

    def on_loaded(self, now_ms: int) -> None:
        """Finish what a crash (or an unload) left half ended, before any client is served."""
        with self._holding_checks():
            self._recover(now_ms)

    def _recover(self, now_ms: int) -> None:
        self._last_now_ms = max(self._last_now_ms, now_ms)
        coordinator = self.coordinator
        broker = self.broker
        # The bounded start-up scan may have missed the first batch of a long open transaction.
        for meta in coordinator.open_transactions():
            for topic, index in meta.partitions:
                broker.find_open_transaction(topic, index, meta.producer_id)
        recovered = coordinator.recover(now_ms)
        if recovered.markers:
            log.info("finishing %d transaction(s) a crash left half ended", len(recovered.markers))
        self.apply(recovered, now_ms)
        abort_hanging_transactions(broker, coordinator, now_ms)
        # Make what recovery wrote durable and visible now.
        flushing = broker.begin_flush()
        for state, _ in flushing:
            state.log.flush()
        broker.end_flush(flushing)
        log.info("loaded %d transactional ids from %s", len(coordinator.txns), self.topic.name)

    def new_producer_id(self, now_ms: int) -> int:
        return self.broker.new_producer_id(now_ms)

    def _partition_loaded(self, state: PartitionState) -> None:
        """A partition loaded after the coordinator recovered: abort what hangs there now (before it serves
        anything); while unloaded, `on_loaded` checks it with the others when the coordinator loads again."""
        if self._held_checks is not None:
            self._held_checks.append(state)
            return
        recovered = self.loaded and self._last_now_ms > 0
        if not (recovered and state.producers.ongoing):
            return
        if not abort_hanging_in(self.broker, self.coordinator, state, self._last_now_ms):
            return
        # Only after a crash: made durable and visible at once, as `on_loaded` does at start.
        try:
            state.log.flush()
        except KafkaError as exc:  # the log is offline now and says why to every request
            log.error("%s-%d: the abort marker could not be flushed: %s", state.topic, state.index, exc)
            return
        self.broker.advance_high_watermark(state, state.log.log_end_offset)

    @contextlib.contextmanager
    def _holding_checks(self) -> Iterator[None]:
        """Check the partitions that load meanwhile once the block is done (its markers written)."""
        if self._held_checks is not None:
            yield  # an outer block checks them
            return
        self._held_checks = []
        try:
            yield
        finally:
            held, self._held_checks = self._held_checks, None
            for state in held:
                self._partition_loaded(state)

    # ----- produce-side verification -----

    def verify(self, producer_id: int, epoch: int, topic: str, partition: int) -> None:
        if not self.loaded:
            # Retriable for the producer (Kafka answers a verification its coordinator cannot make this way).
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "the transaction coordinator is not loaded")
        error = self.coordinator.verify(producer_id, epoch, topic, partition)
        if error is ErrorCode.NONE:
            return
        # Kafka's ReplicaManager words INVALID_TXN_STATE itself; other errors carry the error's own text.
        messages = {
            ErrorCode.INVALID_TXN_STATE: "Partition was not added to the transaction",
            ErrorCode.PRODUCER_FENCED: "There is a newer producer with the same transactionalId which fences the "
            "current one.",
            ErrorCode.INVALID_PRODUCER_ID_MAPPING: "The producer attempted to use a producer id which is not "
            "currently assigned to its transactional id.",
            ErrorCode.INVALID_PRODUCER_EPOCH: "Producer attempted to produce with an old epoch.",
        }
        raise KafkaError(error, messages.get(error, ""))

    # ----- timers -----

    def next_deadline(self) -> int | None:
        deadline = self.coordinator.next_deadline()
        if self._marker_retry_at is not None:
            deadline = min(deadline, self._marker_retry_at) if deadline is not None else self._marker_retry_at
        return deadline

    def tick(self, now_ms: int) -> None:
        self._last_now_ms = max(self._last_now_ms, now_ms)
        if not self.ensure_loaded(now_ms):
            return
        if self.pending_markers:
            self._retry_markers(now_ms)
        outcome = self.coordinator.tick(now_ms, self.new_producer_id(now_ms))
        for markers in outcome.markers:
            log.info(
                "aborted transaction %r (producer %d): timed out",
                markers.transactional_id,
                markers.producer_id,
            )
        self.apply(outcome, now_ms)


@dataclass
class _PendingMarkers:
    markers: Markers
    remaining: list[TP]
    final: bytes | None = None  # the transaction's state record once every marker is written


def _spans_several(outcome: TxnOutcome) -> bool:
    return any(len(m.partitions) > 1 or m.offsets for m in outcome.markers)


def abort_hanging_transactions(broker: Broker, coordinator: TransactionCoordinator, now_ms: int) -> int:
    """Abort open transactions found in partitions that the coordinator does not know them to span.

    Such data can only come from a crash: the partition was added to the transaction, its data reached the
    disk but the record adding it did not (the record is fsynced first, so the data was never acknowledged
    and the producer will hear INVALID_TXN_STATE). Left alone it would hold the LSO forever."""
    aborted = 0
    # Partitions not loaded yet get the same check when they load (TransactionService._partition_loaded).
    for _, state in broker.partitions.loaded_items():
        aborted += abort_hanging_in(broker, coordinator, state, now_ms)
    return aborted


def abort_hanging_in(
    broker: Broker, coordinator: TransactionCoordinator, state: PartitionState, now_ms: int
) -> int:
    """`abort_hanging_transactions` for one partition."""
    aborted = 0
    topic, index = state.topic, state.index
    for producer_id in list(state.producers.ongoing):
        meta = coordinator.by_producer.get(producer_id)
        if (
            meta is not None
            and meta.state in (TxnState.ONGOING, *PREPARING)
            and (topic, index) in meta.partitions
        ):
            continue  # open, or being ended: the coordinator writes its marker
        producer = state.producers.producers.get(producer_id)
        epoch = producer.epoch if producer is not None else 0
        try:
            broker.write_marker(
                state,
                producer_id,
                epoch,
                commit=False,
                coordinator_epoch=_COORDINATOR_EPOCH,
                now_ms=now_ms,
            )
        except (KafkaError, OSError) as exc:
            log.error(
                "cannot abort a hanging transaction of producer %d in %s-%d: %s",
                producer_id,
                topic,
                index,
                exc,
            )
            continue
        log.warning("aborted a hanging transaction of producer %d in %s-%d", producer_id, topic, index)
        aborted += 1
    return aborted


def _txn_config(broker: Broker) -> TxnConfig:
    config = broker.config
    return TxnConfig(
        max_timeout_ms=config.transaction_max_timeout_ms,
        id_expiration_ms=config.transactional_id_expiration_ms,
        # Kafka looks for expired ids hourly; a shorter expiration is looked at as often as it runs out.
        expiration_check_interval_ms=min(3_600_000, max(1_000, config.transactional_id_expiration_ms)),
    )


def attach_transaction_coordinator(broker: Broker, now_ms: int) -> TransactionService:
    service = TransactionService(broker)
    broker.transactions = service
    broker.txn_verifier = service.verify
    broker.services.append(service)
    # Replays the log (rewritten first in Kafka's record layout if it holds the old JSON one), then
    # finishes what a crash left half ended.
    service.load(now_ms)
    return service
