"""Writing keyed batches into a disk log and reading every record back, for the cleaner's tests."""

from __future__ import annotations

from collections.abc import Iterator

from sluice.protocol.compression import Codec
from sluice.protocol.records import (
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    iter_batches,
    parse_batch_header,
)
from sluice.storage.damage import DamagedOffsets
from sluice.storage.disk import DiskPartitionLog, DiskStorage

BASE_TS = 1_700_000_000_000


def append_keyed(
    log: DiskPartitionLog,
    items: list[tuple[bytes | None, bytes | None]],
    *,
    timestamp: int = BASE_TS,
    compression: int = Codec.NONE,
    headers: list[tuple[str, bytes | None]] | None = None,
    now_ms: int = BASE_TS,
) -> int:
    records = [Record(n, n, key, value, list(headers or [])) for n, (key, value) in enumerate(items)]
    batch = encode_batch(records, base_timestamp=timestamp, compression=compression)
    return log.append(batch, parse_batch_header(batch), append_time_ms=now_ms)


def consumer_batches(log: DiskPartitionLog) -> Iterator[tuple[int, bytes, int, BatchHeader]]:
    """(first offset wanted, the read's bytes, the batch's position in them, its header) of every batch a
    consumer reads from the log start to its end, stepping over damaged ranges as one with
    skip_damaged_offsets does (nothing acknowledged is in them: a power loss tears only an unsynced tail)."""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        try:
            data = log.read(offset, 1 << 20)
        except DamagedOffsets as damaged:
            offset = damaged.resume_offset
            continue
        if not data:
            # Only a gap at the tail reads empty (a power loss took the batches of a segment that was not
            # durable yet, and the segment after it is empty): no batch at or after `offset` anywhere.
            assert not any(s.size_bytes and s.next_offset > offset for s in log.segments), (
                f"empty read at {offset} below the log end {log.log_end_offset}"
            )
            return
        asked = offset
        for position, header in iter_batches(data):
            yield offset, data, position, header
            offset = header.last_offset + 1
        assert offset > asked, f"a read at {asked} returned nothing past it (log end {log.log_end_offset})"


def all_records(log: DiskPartitionLog) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """(offset, timestamp, key, value, headers) of every record from the log start, as a consumer sees it."""
    out = []
    for wanted, data, position, header in consumer_batches(log):
        for record in decode_batch(data, position)[1]:
            record_offset = header.base_offset + record.offset_delta
            if record_offset >= wanted:
                out.append(
                    (
                        record_offset,
                        header.base_timestamp + record.timestamp_delta,
                        record.key,
                        record.value,
                        record.headers,
                    )
                )
    return out


def compacted_log(storage: DiskStorage, name: str = "table", **configs: str) -> DiskPartitionLog:
    settings = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"}
    settings.update({key.replace("_", "."): value for key, value in configs.items()})
    storage.create_topic(name, 1, settings)
    return storage.log(name, 0)


def last_per_key(
    history: list[tuple[int, bytes | None, bytes | None]],
) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in history:
        if key is not None:
            latest[key] = (offset, value)
    return latest
