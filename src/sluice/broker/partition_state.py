"""One partition as the broker holds it (`PartitionState`: its log, high watermark, producers and aborted-
transaction index), and how that state is rebuilt from the log when the partition is loaded: producers and
their open transactions from the last batch headers, aborted transactions from the markers."""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.errors import CorruptRecordError
from sluice.protocol.control_batches import ControlRecordType, decode_control_key
from sluice.protocol.records import decode_batch, iter_batches
from sluice.storage.api import PartitionLog
from sluice.storage.producer_state import ProducerStateManager
from sluice.storage.txn_index import AbortedTxn, TxnIndex

# How far back the producer state is rebuilt from batch headers at startup.
PRODUCER_STATE_SCAN_OFFSETS = 200_000


@dataclass(slots=True)
class PartitionState:
    topic: str
    index: int
    log: PartitionLog
    high_watermark: int
    producers: ProducerStateManager = field(default_factory=ProducerStateManager)
    txn_index: TxnIndex = field(default_factory=lambda: TxnIndex(None))

    @property
    def last_stable_offset(self) -> int:
        return self.producers.last_stable_offset(self.high_watermark)


def load_partition_state(topic: str, index: int, log: PartitionLog) -> PartitionState:
    """A partition's state from its log: the high watermark at the log end (everything there survived the
    crash or the clean stop), the aborted-transaction index, and the producers of the last batches."""
    state = PartitionState(topic, index, log, log.log_end_offset)
    state.txn_index = TxnIndex(getattr(log, "directory", None))
    state.txn_index.load(_first_segment_base(log))
    rebuild_producer_state(state)
    return state


def rebuild_producer_state(state: PartitionState, start: int | None = None) -> None:
    """Replay batch headers from `start` (default: a bounded window before the log end)."""
    log = state.log
    if start is None:
        start = max(log.log_start_offset, log.log_end_offset - PRODUCER_STATE_SCAN_OFFSETS)
    if start >= log.log_end_offset:
        return
    for header in list(log.iter_batch_headers(start)):
        if header.producer_id < 0:
            continue
        if header.is_control:
            kind = _control_kind(log, header.base_offset)
            if kind is ControlRecordType.UNKNOWN:
                continue
            aborted = kind is ControlRecordType.ABORT
            done = state.producers.complete(
                header.producer_id, header.producer_epoch, header.base_offset, aborted=aborted
            )
            if done is not None and aborted:
                state.txn_index.add_if_missing(
                    AbortedTxn(done.producer_id, done.first_offset, done.last_offset, done.first_offset),
                    segment_base_of(log, header.base_offset),
                )
        else:
            state.producers.remember(header, header.base_offset)
    # Everything replayed is below the high watermark (it is the log end at start).
    state.producers.on_high_watermark(state.high_watermark)


def _first_segment_base(log: PartitionLog) -> int:
    segments = getattr(log, "segments", None)
    return segments[0].base_offset if segments else log.log_start_offset


def segment_base_of(log: PartitionLog, offset: int) -> int:
    base = 0
    for segment in getattr(log, "segments", None) or ():
        if segment.base_offset > offset:
            break
        base = segment.base_offset
    return base


def _control_kind(log: PartitionLog, offset: int) -> ControlRecordType:
    data = log.read(offset, 1)
    for pos, header in iter_batches(data):
        if header.base_offset == offset:
            try:
                _, records = decode_batch(data, pos)
            except CorruptRecordError:
                return ControlRecordType.UNKNOWN  # a damaged marker must not keep the broker from starting
            return decode_control_key(records[0].key) if records else ControlRecordType.UNKNOWN
    return ControlRecordType.UNKNOWN
