"""The transaction coordinator (Kafka's TransactionCoordinator + TransactionStateManager), pure.

Time is passed in; nothing here touches a log. Every call returns a `TxnOutcome`: the error to answer,
the state records to persist in `__transaction_state` (key: transactional id, value: the whole metadata,
last write wins, None deletes) and, when a transaction ends, the markers the broker must write.

Ending a transaction is Kafka's two phases on one node: the PrepareCommit/PrepareAbort record (carrying
the partitions and the offsets committed inside the transaction) must be durable before any marker is
written; then the markers and the offsets; then the CompleteCommit/CompleteAbort record. A crash after the
prepare record is finished at load (`recover`): the markers and offsets are written again, which is
harmless, so a transaction is never half committed.

States, as Kafka names them:
    Empty -> Ongoing (first AddPartitions/AddOffsets) -> PrepareCommit|PrepareAbort -> CompleteCommit|
    CompleteAbort -> Ongoing (next transaction) ...; Dead once the transactional id expires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sluice.coordinator.transaction_log import decode_key, decode_value, encode_value, state_key
from sluice.coordinator.txn_metadata import (
    ENDED,
    MAX_EPOCH,
    PREPARING,
    TP,
    PendingOffset,
    TxnMetadata,
    TxnState,
)
from sluice.errors import ErrorCode

__all__ = [
    "ENDED",
    "MAX_EPOCH",
    "PREPARING",
    "TP",
    "Markers",
    "PendingOffset",
    "TransactionCoordinator",
    "TxnConfig",
    "TxnMetadata",
    "TxnOutcome",
    "TxnState",
    "state_key",
]


@dataclass(slots=True)
class Markers:
    """What the broker writes when a transaction ends: a marker per partition, then the offsets."""

    transactional_id: str
    producer_id: int
    epoch: int
    commit: bool
    partitions: list[TP]
    offsets: dict[str, dict[TP, PendingOffset]]


@dataclass
class TxnOutcome:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    producer_id: int = -1
    epoch: int = -1
    # Records to persist before the markers (prepare) and after them (complete / plain updates).
    prepare: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    markers: list[Markers] = field(default_factory=list)
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    # Per-partition errors (AddPartitionsToTxn) and per-partition TxnOffsetCommit errors.
    partition_errors: dict[TP, ErrorCode] = field(default_factory=dict)

    def merge(self, other: TxnOutcome) -> None:
        self.prepare += other.prepare
        self.markers += other.markers
        self.records += other.records


@dataclass(slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # How often idle transactional ids are looked at for expiry.
    expiration_check_interval_ms: int = 3_600_000
    coordinator_epoch: int = 0


def _record(meta: TxnMetadata) -> tuple[bytes, bytes | None]:
    return state_key(meta.transactional_id), encode_value(meta)


class TransactionCoordinator:
    def __init__(self, config: TxnConfig) -> None:
        self.config = config
        self.txns: dict[str, TxnMetadata] = {}
        self.by_producer: dict[int, TxnMetadata] = {}
        self._next_expiry_check_ms: int | None = None
        # While `__transaction_state` is replayed (`apply`): keys in the earlier layout -> their
        # transactional id, and the ids whose last record is in it (rewritten by `loaded`).
        self._replayed_legacy_keys: dict[bytes, str] = {}
        self._replayed_from_legacy: set[str] = set()

    # ----- helpers -----

    def _index(self, meta: TxnMetadata) -> None:
        self.by_producer[meta.producer_id] = meta

    def _fence_error(self, version_has_fenced: bool) -> ErrorCode:
        return ErrorCode.PRODUCER_FENCED if version_has_fenced else ErrorCode.INVALID_PRODUCER_EPOCH

    def _check_producer(
        self, transactional_id: str, producer_id: int, epoch: int, fenced_code: bool = True
    ) -> tuple[TxnMetadata | None, TxnOutcome | None]:
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            return None, TxnOutcome(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"transactional id {transactional_id!r} is not known; call InitProducerId",
            )
        if meta.producer_id != producer_id:
            return None, TxnOutcome(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer id {producer_id} does not belong to {transactional_id!r}",
            )
        if epoch != meta.epoch:
            return None, TxnOutcome(
                self._fence_error(fenced_code),
                f"producer epoch {epoch} is not the current epoch {meta.epoch}",
            )
        if meta.state in PREPARING or meta.state is TxnState.PREPARE_EPOCH_FENCE:
            return None, TxnOutcome(
                ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is still ending"
            )
        return meta, None

    def _end(self, meta: TxnMetadata, commit: bool, now_ms: int, out: TxnOutcome) -> None:
        """Prepare record, markers, complete record: one transaction ended, as `out` says."""
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.last_update_ms = now_ms
        out.prepare.append(_record(meta))
        out.markers.append(self._markers(meta, commit))
        self._complete(meta, commit, now_ms, out)

    def _markers(self, meta: TxnMetadata, commit: bool) -> Markers:
        return Markers(
            meta.transactional_id,
            meta.producer_id,
            meta.epoch,
            commit,
            sorted(meta.partitions),
            {g: dict(o) for g, o in meta.offsets.items()} if commit else {},
        )

    def _complete(self, meta: TxnMetadata, commit: bool, now_ms: int, out: TxnOutcome) -> None:
        meta.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        meta.partitions = set()
        meta.offsets = {}
        meta.groups = set()
        meta.start_ms = -1
        meta.last_update_ms = now_ms
        out.records.append(_record(meta))

    def _bump_epoch(self, meta: TxnMetadata, new_producer_id: int) -> None:
        meta.last_producer_id, meta.last_epoch = meta.producer_id, meta.epoch
        if meta.epoch >= MAX_EPOCH:
            # Epochs are exhausted: a fresh producer id, as Kafka does.
            self.by_producer.pop(meta.producer_id, None)
            meta.producer_id, meta.epoch = new_producer_id, 0
            self._index(meta)
        else:
            meta.epoch += 1

    # ----- InitProducerId -----

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        epoch: int,
        now_ms: int,
        new_producer_id: int,
    ) -> TxnOutcome:
        """`new_producer_id` is used only if this call needs a fresh id."""
        if not transactional_id:
            return TxnOutcome(ErrorCode.INVALID_REQUEST, "transactional id must not be empty")
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return TxnOutcome(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction timeout {timeout_ms} ms is outside 1..{self.config.max_timeout_ms}",
            )
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is TxnState.DEAD:
            if producer_id >= 0:
                return TxnOutcome(
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                    f"producer id {producer_id} does not belong to {transactional_id!r}",
                )
            meta = TxnMetadata(transactional_id, new_producer_id, 0, timeout_ms, last_update_ms=now_ms)
            self.txns[transactional_id] = meta
            self._index(meta)
            out = TxnOutcome(producer_id=meta.producer_id, epoch=meta.epoch)
            out.records.append(_record(meta))
            return out
        if meta.state in PREPARING or meta.state is TxnState.PREPARE_EPOCH_FENCE:
            return TxnOutcome(ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is still ending")
        if producer_id >= 0:
            # KIP-360: a producer that knows its id and epoch asks to carry on with a bumped epoch. It may be
            # one bump behind if its last transaction was aborted for it (timeout, operator).
            current = producer_id == meta.producer_id and epoch == meta.epoch
            behind = (producer_id, epoch) == (meta.last_producer_id, meta.last_epoch) or (
                producer_id == meta.producer_id and epoch == meta.last_epoch and meta.state in ENDED
            )
            if not (current or behind):
                if producer_id not in (meta.producer_id, meta.last_producer_id):
                    return TxnOutcome(
                        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                        f"producer id {producer_id} does not belong to {transactional_id!r}",
                    )
                return TxnOutcome(
                    ErrorCode.PRODUCER_FENCED, f"epoch {epoch} of producer {producer_id} has been fenced"
                )
            if behind and not current:
                meta.timeout_ms = timeout_ms
                meta.last_update_ms = now_ms
                out = TxnOutcome(producer_id=meta.producer_id, epoch=meta.epoch)
                out.records.append(_record(meta))
                return out
        out = TxnOutcome()
        if meta.state is TxnState.ONGOING:
            # A new incarnation fences the old one: abort what it left open under a bumped epoch.
            self._bump_epoch(meta, new_producer_id)
            self._end(meta, False, now_ms, out)
        self._bump_epoch(meta, new_producer_id)
        meta.timeout_ms = timeout_ms
        meta.state = TxnState.EMPTY
        meta.last_update_ms = now_ms
        out.records.append(_record(meta))
        out.producer_id, out.epoch = meta.producer_id, meta.epoch
        return out

    # ----- adding partitions and offsets -----

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TP],
        now_ms: int,
        *,
        fenced_code: bool = True,
        verify_only: bool = False,
    ) -> TxnOutcome:
        wanted = list(partitions)
        meta, refused = self._check_producer(transactional_id, producer_id, epoch, fenced_code)
        if refused is not None:
            refused.partition_errors = {tp: refused.error for tp in wanted}
            return refused
        assert meta is not None
        out = TxnOutcome(producer_id=meta.producer_id, epoch=meta.epoch)
        if verify_only:
            out.partition_errors = {
                tp: ErrorCode.NONE
                if tp in meta.partitions and meta.state is TxnState.ONGOING
                else ErrorCode.INVALID_TXN_STATE
                for tp in wanted
            }
            return out
        new = [tp for tp in wanted if tp not in meta.partitions]
        out.partition_errors = {tp: ErrorCode.NONE for tp in wanted}
        if new or meta.state is not TxnState.ONGOING:
            self._begin(meta, now_ms)
            meta.partitions.update(new)
            out.records.append(_record(meta))
        return out

    def _begin(self, meta: TxnMetadata, now_ms: int) -> None:
        if meta.state is not TxnState.ONGOING:
            meta.state = TxnState.ONGOING
            meta.start_ms = now_ms
        meta.last_update_ms = now_ms

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        now_ms: int,
        *,
        fenced_code: bool = True,
    ) -> TxnOutcome:
        meta, refused = self._check_producer(transactional_id, producer_id, epoch, fenced_code)
        if refused is not None:
            return refused
        assert meta is not None
        out = TxnOutcome(producer_id=meta.producer_id, epoch=meta.epoch)
        if group_id not in meta.groups or meta.state is not TxnState.ONGOING:
            self._begin(meta, now_ms)
            meta.groups.add(group_id)
            out.records.append(_record(meta))
        return out

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: dict[TP, PendingOffset],
        now_ms: int,
    ) -> TxnOutcome:
        """Offsets committed inside the transaction stay pending (invisible) until it commits. They need
        no record now: if the broker dies before EndTxn the transaction is aborted anyway."""
        meta, refused = self._check_producer(transactional_id, producer_id, epoch)
        if refused is not None:
            return refused
        assert meta is not None
        if meta.state is not TxnState.ONGOING or group_id not in meta.groups:
            return TxnOutcome(
                ErrorCode.INVALID_TXN_STATE,
                f"group {group_id!r} was not added to the transaction (AddOffsetsToTxn first)",
            )
        meta.offsets.setdefault(group_id, {}).update(offsets)
        meta.last_update_ms = now_ms
        return TxnOutcome(producer_id=meta.producer_id, epoch=meta.epoch)

    def pending_offsets(self, group_id: str) -> set[TP]:
        """Partitions of `group_id` with a transactional commit not yet ended (OffsetFetch require_stable)."""
        found: set[TP] = set()
        for meta in self.txns.values():
            if meta.state is TxnState.ONGOING and group_id in meta.offsets:
                found.update(meta.offsets[group_id])
        return found

    # ----- EndTxn -----

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        now_ms: int,
        *,
        fenced_code: bool = True,
    ) -> TxnOutcome:
        meta = self.txns.get(transactional_id)
        same = meta is not None and meta.producer_id == producer_id and epoch == meta.epoch
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if same and meta is not None and meta.state is done:
            # A retried EndTxn whose first attempt completed answers as it did.
            return TxnOutcome(producer_id=meta.producer_id, epoch=meta.epoch)
        if (
            meta is not None
            and meta.producer_id == producer_id
            and epoch == meta.last_epoch
            and meta.state in ENDED
        ):
            # The coordinator aborted this transaction (timeout, operator) and bumped the epoch.
            return TxnOutcome(
                self._fence_error(fenced_code) if commit else ErrorCode.NONE,
                "the transaction was aborted by the coordinator (timeout)",
            )
        meta, refused = self._check_producer(transactional_id, producer_id, epoch, fenced_code)
        if refused is not None:
            return refused
        assert meta is not None
        if meta.state is not TxnState.ONGOING:
            return TxnOutcome(
                ErrorCode.INVALID_TXN_STATE,
                f"no transaction is open for {transactional_id!r} (state {meta.state.value})",
            )
        out = TxnOutcome(producer_id=meta.producer_id, epoch=meta.epoch)
        self._end(meta, commit, now_ms, out)
        return out

    def abort_by_operator(self, transactional_id: str, now_ms: int, new_producer_id: int) -> TxnOutcome:
        """Abort an open transaction for an operator (kafka-transactions.sh abort), fencing its producer."""
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state is not TxnState.ONGOING:
            return TxnOutcome(ErrorCode.INVALID_TXN_STATE, f"no open transaction for {transactional_id!r}")
        out = TxnOutcome()
        self._bump_epoch(meta, new_producer_id)
        self._end(meta, False, now_ms, out)
        out.producer_id, out.epoch = meta.producer_id, meta.epoch
        return out

    # ----- producer-side verification (Produce) -----

    def verify(self, producer_id: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        meta = self.by_producer.get(producer_id)
        if meta is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != meta.epoch:
            # As Kafka since 2.7 (KIP-588): a produce with an old epoch hears INVALID_PRODUCER_EPOCH, which
            # clients treat as "abort this transaction"; the fatal PRODUCER_FENCED comes from EndTxn.
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.state is not TxnState.ONGOING or (topic, partition) not in meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # ----- timers -----

    def next_deadline(self) -> int | None:
        deadlines = [m.start_ms + m.timeout_ms for m in self.txns.values() if m.state is TxnState.ONGOING]
        if self._next_expiry_check_ms is not None and self.txns:
            deadlines.append(self._next_expiry_check_ms)
        return min(deadlines, default=None)

    def tick(self, now_ms: int, new_producer_id: int) -> TxnOutcome:
        """Abort transactions past their timeout (fencing their producer) and expire idle ids."""
        out = TxnOutcome()
        for meta in list(self.txns.values()):
            if meta.state is TxnState.ONGOING and meta.start_ms + meta.timeout_ms <= now_ms:
                self._bump_epoch(meta, new_producer_id)
                self._end(meta, False, now_ms, out)
        if self._next_expiry_check_ms is None:
            self._next_expiry_check_ms = now_ms + self.config.expiration_check_interval_ms
        elif self._next_expiry_check_ms <= now_ms:
            self._next_expiry_check_ms = now_ms + self.config.expiration_check_interval_ms
            for meta in list(self.txns.values()):
                if meta.state in ENDED and meta.last_update_ms + self.config.id_expiration_ms <= now_ms:
                    del self.txns[meta.transactional_id]
                    if self.by_producer.get(meta.producer_id) is meta:
                        del self.by_producer[meta.producer_id]
                    out.records.append((state_key(meta.transactional_id), None))
        return out

    # ----- restart -----

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Replay one `__transaction_state` record (oldest first; last write wins, None deletes)."""
        decoded = None if key is None else decode_key(key)
        if decoded is None:
            return
        assert key is not None
        transactional_id, legacy = decoded
        if legacy:
            self._replayed_legacy_keys[key] = transactional_id
        if value is None:
            self.txns.pop(transactional_id, None)
            self._replayed_from_legacy.discard(transactional_id)
            return
        meta, legacy_value = decode_value(transactional_id, value)
        self.txns[transactional_id] = meta
        if legacy or legacy_value:
            self._replayed_from_legacy.add(transactional_id)
        else:
            self._replayed_from_legacy.discard(transactional_id)

    def loaded(self, now_ms: int) -> list[tuple[bytes, bytes | None]]:
        """The whole log is replayed; returns the records to append once (the migration of values an
        earlier sluice wrote as JSON: see transaction_log), empty when the log is all in Kafka's layout."""
        self.by_producer = {}
        for meta in self.txns.values():
            self._index(meta)
        self._next_expiry_check_ms = now_ms + self.config.expiration_check_interval_ms
        legacy_keys, from_legacy = self._replayed_legacy_keys, self._replayed_from_legacy
        self._replayed_legacy_keys, self._replayed_from_legacy = {}, set()
        if not from_legacy:
            return []
        # One-time migration: tombstones for the old keys (they differ from the new ones byte for byte,
        # so compaction would keep them forever), then every id's state in Kafka's layout.
        migrated: list[tuple[bytes, bytes | None]] = [(key, None) for key in legacy_keys]
        migrated += [_record(meta) for meta in self.txns.values()]
        return migrated

    def recover(self, now_ms: int) -> TxnOutcome:
        """Finish every transaction a crash left between its prepare record and its complete record."""
        out = TxnOutcome()
        for meta in self.txns.values():
            if meta.state in PREPARING:
                commit = meta.state is TxnState.PREPARE_COMMIT
                out.markers.append(self._markers(meta, commit))
                self._complete(meta, commit, now_ms, out)
        return out

    def put(self, meta: TxnMetadata) -> None:
        """Replace a transactional id's state wholesale (the broker holds a transaction in PrepareCommit/
        PrepareAbort while a partition refuses its marker, then restores the state that follows)."""
        old = self.txns.get(meta.transactional_id)
        if old is not None and self.by_producer.get(old.producer_id) is old:
            del self.by_producer[old.producer_id]
        self.txns[meta.transactional_id] = meta
        self._index(meta)

    def open_transactions(self) -> list[TxnMetadata]:
        return [m for m in self.txns.values() if m.state is TxnState.ONGOING]
