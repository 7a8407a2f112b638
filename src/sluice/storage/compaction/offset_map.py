"""The cleaner's key map (key -> offset of its last record) and each batch's fate under transactions."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sluice.protocol.records import BatchHeader, decode_batch
from sluice.storage.compaction.reader import SegmentRef, Throttler, iter_segment_batches

# Kafka's SkimpyOffsetMap spends 24 bytes a key (MD5 + offset). A Python dict of 128-bit int digests
# to int offsets costs about this much per entry, so the budget bounds real memory, not a wish.
BYTES_PER_MAP_ENTRY = 160


class OffsetMap:
    """Key -> offset of its last record, keyed by a 128-bit BLAKE2b digest (Kafka uses MD5), with a
    memory budget: `put` of a new key returns False once the map is full.
    """

    def __init__(self, memory_bytes: int) -> None:
        self.capacity = max(1, memory_bytes // BYTES_PER_MAP_ENTRY)
        self._offsets: dict[int, int] = {}
        self.last_offset = -1

    @staticmethod
    def _digest(key: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "big")

    def put(self, key: bytes, offset: int) -> bool:
        digest = self._digest(key)
        if digest not in self._offsets and len(self._offsets) >= self.capacity:
            return False
        self._offsets[digest] = offset
        self.last_offset = offset
        return True

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(self._digest(key))

    def __len__(self) -> int:
        return len(self._offsets)


@dataclass(frozen=True, slots=True)
class TxnFacts:
    """What the owner knows about the partition's producers when a pass starts (plain data: it goes to the
    worker process). The default decides nothing: every transactional batch is kept as it is."""

    last_stable_offset: int = -1  # transactional batches ending below it are decided
    aborted: tuple[tuple[int, int, int], ...] = ()  # (producer id, first offset, abort marker offset)
    last_batches: frozenset[int] = frozenset()  # base offset of each producer's newest data batch


NO_FACTS = TxnFacts()
KEEP, DROP, CLEAN = 0, 1, 2


class BatchFates:
    """Per batch: keep as it is (control, or possibly in an open transaction), drop (aborted), or clean
    by key (plain, or a committed transaction)."""

    def __init__(self, facts: TxnFacts) -> None:
        self.facts = facts
        self._aborted: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in facts.aborted:
            self._aborted.setdefault(producer_id, []).append((first, last))
        # Producers whose current transaction (since their last marker) still has a batch in the output.
        self.txn_kept: set[int] = set()

    def of(self, header: BatchHeader) -> int:
        if header.is_control:
            return KEEP
        if not header.is_transactional:
            return CLEAN
        if header.last_offset >= self.facts.last_stable_offset:
            return KEEP
        for first, last in self._aborted.get(header.producer_id, ()):
            if first <= header.base_offset <= last:
                return DROP
        return CLEAN


def build_offset_map(
    dirty: list[SegmentRef], offset_map: OffsetMap, throttler: Throttler, fates: BatchFates | None = None
) -> int:
    """Fill `offset_map` from the dirty segments; returns the offset the map covers up to (exclusive):
    the end of the last segment that fit whole, or the last record that fit when not even one did.
    """
    fates = fates or BatchFates(NO_FACTS)
    covered_end = dirty[0].base_offset
    for n, segment in enumerate(dirty):
        for batch, header in iter_segment_batches(segment, throttler):
            if fates.of(header) != CLEAN:
                continue
            _, records = decode_batch(batch)
            for record in records:
                if record.key is not None and not offset_map.put(
                    record.key, header.base_offset + record.offset_delta
                ):
                    if n == 0:
                        return offset_map.last_offset + 1
                    return covered_end
        covered_end = dirty[n + 1].base_offset if n + 1 < len(dirty) else segment.next_offset
    return covered_end
