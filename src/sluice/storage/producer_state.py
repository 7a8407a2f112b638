"""Per-partition producer state (Kafka's ProducerStateManager): who wrote, at which epoch, the last few
sequences (duplicate detection for idempotent retries) and each producer's open transaction.

It is rebuilt from batch headers at start. The scan is bounded (`scan_offsets` back from the log end);
a transaction the transaction coordinator knows to be open but whose first batch lies before that window
is found by `find_open_transaction`, which rescans from the log start for that one producer.

The last stable offset (LSO) is the first offset of the earliest transaction that is still open, or whose
marker is not yet below the high watermark; consumers reading committed data stop there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import BatchHeader

# Batches per producer remembered for duplicate detection, as Kafka does.
PRODUCER_DEDUP_WINDOW = 5
MAX_SEQUENCE = 0x7FFFFFFF


@dataclass(slots=True)
class ProducerBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int


@dataclass(slots=True)
class ProducerState:
    epoch: int
    recent: deque[ProducerBatch] = field(default_factory=lambda: deque(maxlen=PRODUCER_DEDUP_WINDOW))
    # First offset of this producer's open transaction in the partition, or None.
    txn_first_offset: int | None = None

    @property
    def last_sequence(self) -> int:
        return self.recent[-1].last_sequence if self.recent else -1


@dataclass(slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerState] = {}
        # Open transactions: producer id -> first offset (dicts keep insertion order, so the earliest
        # opened is usually first, but min() is taken to be exact).
        self.ongoing: dict[int, int] = {}
        # Ended transactions whose marker is not yet below the high watermark: still unstable.
        self.unreplicated: deque[CompletedTxn] = deque()

    # ----- produce -----

    def check(self, header: BatchHeader) -> int | None:
        """Validate a producer's batch; returns the offset of an identical batch already stored (a retry),
        or None. Raises INVALID_PRODUCER_EPOCH / OUT_OF_ORDER_SEQUENCE_NUMBER."""
        producer = self.producers.get(header.producer_id)
        if producer is None:
            return None
        if header.producer_epoch < producer.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer epoch {header.producer_epoch} is older than {producer.epoch}",
            )
        if header.producer_epoch > producer.epoch:
            if header.base_sequence != 0:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"a new producer epoch must start at sequence 0, got {header.base_sequence}",
                )
            return None
        for batch in producer.recent:
            if batch.first_sequence == header.base_sequence:
                return batch.base_offset
        expected = (producer.last_sequence + 1) & MAX_SEQUENCE
        if header.base_sequence != expected:
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"expected sequence {expected} from producer {header.producer_id}, got {header.base_sequence}",
            )
        return None

    def remember(self, header: BatchHeader, base_offset: int) -> None:
        """Record an appended data batch (call `complete` for control batches)."""
        producer = self.producers.get(header.producer_id)
        if producer is None or header.producer_epoch != producer.epoch:
            first = producer.txn_first_offset if producer is not None else None
            producer = self.producers[header.producer_id] = ProducerState(header.producer_epoch)
            producer.txn_first_offset = first
        last = (header.base_sequence + header.last_offset_delta) & MAX_SEQUENCE
        producer.recent.append(ProducerBatch(header.base_sequence, last, base_offset))
        if header.is_transactional and producer.txn_first_offset is None:
            producer.txn_first_offset = base_offset
            self.ongoing[header.producer_id] = base_offset

    def complete(
        self, producer_id: int, epoch: int, marker_offset: int, *, aborted: bool
    ) -> CompletedTxn | None:
        """A COMMIT/ABORT marker was appended at `marker_offset`: end the producer's open transaction.

        Sequences restart with the epoch a marker carries (the coordinator bumps epochs on abort)."""
        producer = self.producers.get(producer_id)
        if producer is None or epoch > producer.epoch:
            first = producer.txn_first_offset if producer is not None else None
            producer = self.producers[producer_id] = ProducerState(epoch)
            producer.txn_first_offset = first
        first = self.ongoing.pop(producer_id, None)
        producer.txn_first_offset = None
        if first is None:
            return None
        done = CompletedTxn(producer_id, first, marker_offset, aborted)
        self.unreplicated.append(done)
        return done

    # ----- stability -----

    def first_unstable_offset(self) -> int | None:
        if not self.ongoing and not self.unreplicated:
            return None  # the common case, asked for every partition of every fetch: no allocation
        firsts = list(self.ongoing.values())
        firsts += (t.first_offset for t in self.unreplicated)
        return min(firsts, default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """Markers below the high watermark are durable: their transactions stop holding the LSO."""
        if self.unreplicated:
            self.unreplicated = deque(t for t in self.unreplicated if t.last_offset >= high_watermark)

    def open_transactions(self) -> Iterable[tuple[int, int]]:
        return self.ongoing.items()
