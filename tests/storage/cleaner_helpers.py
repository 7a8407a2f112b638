"""Writing keyed batches into a disk log and reading every record back, for the cleaner's tests."""

from __future__ import annotations

from sluice.protocol.compression import Codec
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches, parse_batch_header
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


def all_records(log: DiskPartitionLog) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """(offset, timestamp, key, value, headers) of every record from the log start, as a consumer sees it."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"empty read at {offset} below the log end {log.log_end_offset}"
        for pos, header in iter_batches(data):
            _, records = decode_batch(data, pos)
            for record in records:
                record_offset = header.base_offset + record.offset_delta
                if record_offset >= offset:
                    out.append(
                        (
                            record_offset,
                            header.base_timestamp + record.timestamp_delta,
                            record.key,
                            record.value,
                            record.headers,
                        )
                    )
            offset = header.last_offset + 1
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
