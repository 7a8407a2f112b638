"""What the transaction coordinator knows of one transactional id (Kafka's TransactionMetadata), as data.
How it is stored in `__transaction_state` is sluice.coordinator.transaction_log."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

MAX_EPOCH = 0x7FFF - 1  # Kafka keeps Short.MaxValue free so a bump past the last epoch is detectable
TP = tuple[str, int]


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(slots=True)
class PendingOffset:
    offset: int
    leader_epoch: int
    metadata: str


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    last_producer_id: int = -1
    last_epoch: int = -1
    partitions: set[TP] = field(default_factory=set)
    # Offsets committed inside the transaction (TxnOffsetCommit): group -> partition -> offset.
    offsets: dict[str, dict[TP, PendingOffset]] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = 0
