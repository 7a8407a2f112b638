"""The contract every storage engine passes (parametrised over memory and disk by conftest)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from storage_batches import make_batch, values_of

from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import parse_batch_header
from sluice.storage import PartitionLog, Storage
from sluice.storage.api import CompactableLog

NOW = 1_700_000_000_000
MakeLog = Callable[..., PartitionLog]


def append(log: PartitionLog, count: int = 1, *, size: int = 10, timestamps: list[int] | None = None) -> int:
    batch, header = make_batch(values_of(count, size), timestamps)
    return log.append(batch, header, append_time_ms=NOW)


def split_batches(data: bytes) -> list[tuple[int, int]]:
    """(base offset, record count) of each batch in fetched bytes; fails on a partial batch."""
    out = []
    position = 0
    while position < len(data):
        header = parse_batch_header(data, position)
        assert position + header.size <= len(data), "fetch returned a partial batch"
        out.append((header.base_offset, header.record_count))
        position += header.size
    return out


def read_all(log: PartitionLog, start: int, max_bytes: int = 1 << 20) -> list[tuple[int, int]]:
    batches: list[tuple[int, int]] = []
    offset = start
    while offset < log.log_end_offset:
        chunk = split_batches(log.read(offset, max_bytes))
        assert chunk, "read made no progress"
        batches += chunk
        offset = chunk[-1][0] + chunk[-1][1]
    return batches


def expect_out_of_range(log: PartitionLog, offset: int) -> None:
    with pytest.raises(KafkaError) as raised:
        log.read(offset, 1000)
    assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_engines_implement_the_interface(open_engine: Callable[[], Storage]) -> None:
    storage = open_engine()
    assert isinstance(storage, Storage)
    storage.create_topic("t", 1, {})
    assert isinstance(storage.log("t", 0), PartitionLog)


def test_optional_capabilities_are_asked_of_the_engine(open_engine: Callable[[], Storage]) -> None:
    """An engine with a data directory hands out compactable logs in it; one without answers None to both."""
    storage = open_engine()
    storage.create_topic("t", 1, {})
    compactable = storage.compactable_log("t", 0)
    if storage.data_dir is None:
        assert compactable is None
        return
    assert isinstance(compactable, CompactableLog) and compactable is storage.log("t", 0)
    assert compactable.directory.parent == storage.data_dir and compactable.cleanable_segments() == []


def test_empty_log(make_log: MakeLog) -> None:
    log = make_log()
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 1000) == b""
    expect_out_of_range(log, 1)
    expect_out_of_range(log, -1)
    assert log.max_timestamp() == (-1, -1)
    assert log.offset_for_timestamp(0) is None
    assert list(log.iter_batch_headers(0)) == []


def test_append_assigns_contiguous_offsets_and_rewrites_only_the_base_offset(make_log: MakeLog) -> None:
    log = make_log()
    batch, header = make_batch(values_of(3), base_offset=12345)
    original = bytes(batch)
    assert log.append(batch, header, append_time_ms=NOW) == 0
    assert append(log, 2) == 3
    assert append(log, 1) == 5
    assert log.log_end_offset == 6
    assert batch == original
    stored = log.read(0, 1 << 20)
    assert stored[8:][: len(batch) - 8] == original[8:]
    assert stored[:8] == (0).to_bytes(8, "big")
    assert split_batches(stored) == [(0, 3), (3, 2), (5, 1)]
    assert log.size_bytes == len(stored)


def test_append_accepts_memoryview_and_bytearray(make_log: MakeLog) -> None:
    log = make_log()
    batch, header = make_batch(values_of(2))
    log.append(memoryview(batch), header, append_time_ms=NOW)
    log.append(bytearray(batch), header, append_time_ms=NOW)
    assert split_batches(log.read(0, 1 << 20)) == [(0, 2), (2, 2)]


def test_read_starts_at_the_batch_containing_the_offset(make_log: MakeLog) -> None:
    log = make_log()
    for _ in range(5):
        append(log, 4)
    assert split_batches(log.read(9, 1 << 20))[0] == (8, 4)
    assert split_batches(log.read(8, 1 << 20))[0] == (8, 4)
    assert split_batches(log.read(19, 1 << 20)) == [(16, 4)]
    assert log.read(20, 1 << 20) == b""


def test_max_bytes_returns_whole_batches_but_at_least_one(make_log: MakeLog) -> None:
    log = make_log()
    for _ in range(4):
        append(log, 2, size=100)
    one = len(log.read(0, 1))
    assert split_batches(log.read(0, 1)) == [(0, 2)]
    assert split_batches(log.read(0, 0)) == [(0, 2)]
    assert split_batches(log.read(0, 2 * one)) == [(0, 2), (2, 2)]
    assert split_batches(log.read(0, 2 * one - 1)) == [(0, 2)]
    assert split_batches(log.read(2, 3 * one + 5)) == [(2, 2), (4, 2), (6, 2)]


def test_reads_cross_many_rolled_segments(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="2000", index_interval_bytes="300")
    for n in range(60):
        assert append(log, 3, size=40) == 3 * n
    assert log.segment_count > 5  # type: ignore[attr-defined]
    assert read_all(log, 0) == [(3 * n, 3) for n in range(60)]
    assert read_all(log, 0, max_bytes=700) == [(3 * n, 3) for n in range(60)]
    for offset in range(0, 180, 7):
        assert split_batches(log.read(offset, 1))[0] == (offset - offset % 3, 3)


def test_segment_bytes_bounds_each_segment(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="1000")
    batch, header = make_batch(values_of(1, 200))
    for _ in range(10):
        log.append(batch, header, append_time_ms=NOW)
    per_segment = 1000 // len(batch)
    assert log.segment_count == -(-10 // per_segment)  # type: ignore[attr-defined]


def test_segment_ms_rolls_by_batch_timestamps(make_log: MakeLog) -> None:
    log = make_log(segment_ms="1000")
    append(log, 1, timestamps=[NOW])
    append(log, 1, timestamps=[NOW + 1000])
    assert log.segment_count == 1  # type: ignore[attr-defined]
    append(log, 1, timestamps=[NOW + 1001])
    assert log.segment_count == 2  # type: ignore[attr-defined]


def test_batch_larger_than_segment_bytes_gets_its_own_segment(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="100")
    append(log, 1, size=500)
    append(log, 1, size=500)
    assert log.segment_count == 2  # type: ignore[attr-defined]
    assert read_all(log, 0) == [(0, 1), (1, 1)]


def test_delete_records_before(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="600")
    for _ in range(20):
        append(log, 2, size=50)
    segments_before = log.segment_count  # type: ignore[attr-defined]
    size_before = log.size_bytes
    assert log.delete_records_before(15) == 15
    assert log.log_start_offset == 15
    assert log.segment_count < segments_before  # type: ignore[attr-defined]
    assert log.size_bytes < size_before
    expect_out_of_range(log, 14)
    assert split_batches(log.read(15, 1))[0] == (14, 2)
    assert log.delete_records_before(3) == 15
    with pytest.raises(KafkaError) as raised:
        log.delete_records_before(41)
    assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.delete_records_before(-1) == 40
    assert log.read(40, 1000) == b""
    assert log.segment_count == 1  # type: ignore[attr-defined]
    assert log.size_bytes == 0
    assert append(log, 1) == 40
    assert read_all(log, 40) == [(40, 1)]


def test_retention_by_time_deletes_old_segments_but_never_the_active_one(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="500")
    for n in range(12):
        append(log, 1, size=100, timestamps=[NOW + n * 1000])
    segments = log.segment_count  # type: ignore[attr-defined]
    assert segments >= 4
    assert log.apply_retention(NOW + 20_000, 60_000, -1) == 0
    deleted = log.apply_retention(NOW + 11_000 + 5_500, 10_000, -1)
    assert deleted >= 1
    assert log.log_start_offset > 0
    assert all(offset >= log.log_start_offset for offset, _ in read_all(log, log.log_start_offset))
    # Everything expired: only the active segment survives.
    log.apply_retention(NOW + 10**9, 1, -1)
    assert log.segment_count == 1  # type: ignore[attr-defined]
    assert log.log_end_offset == 12
    assert read_all(log, log.log_start_offset)[-1] == (11, 1)


def test_retention_by_size(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="500")
    for _ in range(20):
        append(log, 1, size=100)
    total = log.size_bytes
    assert log.apply_retention(NOW, -1, total) == 0
    deleted = log.apply_retention(NOW, -1, total // 2)
    assert deleted >= 1
    assert log.size_bytes <= total // 2 + 500
    assert log.size_bytes > total // 2 - 500
    assert log.log_start_offset > 0
    log.apply_retention(NOW, -1, 0)
    assert log.segment_count == 1  # type: ignore[attr-defined]


def test_offset_for_timestamp_is_record_exact_in_uncompressed_batches(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="400")
    for n in range(10):
        append(log, 3, timestamps=[NOW + 100 * n, NOW + 100 * n + 50, NOW + 100 * n + 60])
    assert log.offset_for_timestamp(0) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 1) == (1, NOW + 50)
    assert log.offset_for_timestamp(NOW + 455) == (14, NOW + 460)
    assert log.offset_for_timestamp(NOW + 461) == (15, NOW + 500)
    assert log.offset_for_timestamp(NOW + 961) is None
    log.delete_records_before(16)
    assert log.offset_for_timestamp(0) == (16, NOW + 550)


def test_offset_for_timestamp_in_compressed_batches_answers_the_batch_start(make_log: MakeLog) -> None:
    log = make_log()
    gzip = 1
    batch, header = make_batch(values_of(3), [NOW, NOW + 10, NOW + 20], attributes=gzip)
    log.append(batch, header, append_time_ms=NOW)
    batch, header = make_batch(values_of(3), [NOW + 30, NOW + 40, NOW + 50], attributes=gzip)
    log.append(batch, header, append_time_ms=NOW)
    assert log.offset_for_timestamp(NOW + 15) == (0, NOW + 20)
    assert log.offset_for_timestamp(NOW + 21) == (3, NOW + 50)


def test_offset_for_timestamp_with_out_of_order_batches(make_log: MakeLog) -> None:
    log = make_log(index_interval_bytes="50")
    for stamp in [NOW + 500, NOW + 100, NOW + 700, NOW + 200, NOW + 900]:
        append(log, 1, timestamps=[stamp])
    assert log.offset_for_timestamp(NOW + 150) == (0, NOW + 500)
    assert log.offset_for_timestamp(NOW + 600) == (2, NOW + 700)
    assert log.offset_for_timestamp(NOW + 800) == (4, NOW + 900)


def test_max_timestamp_names_the_record(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="300")
    for n in range(8):
        append(log, 3, timestamps=[NOW + n, NOW + 5000 if n == 4 else NOW + n, NOW + n])
    assert log.max_timestamp() == (13, NOW + 5000)
    # Records removed by DeleteRecords no longer count (at batch granularity: 15 starts a batch).
    log.delete_records_before(15)
    assert log.max_timestamp() == (21, NOW + 7)


def test_iter_batch_headers(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="500")
    for n in range(10):
        batch, header = make_batch(values_of(2, 50), producer_id=7, producer_epoch=1, base_sequence=2 * n)
        log.append(batch, header, append_time_ms=NOW)
    headers = list(log.iter_batch_headers(11))
    assert [h.base_offset for h in headers] == [10, 12, 14, 16, 18]
    assert [h.base_sequence for h in headers] == [10, 12, 14, 16, 18]
    assert all(h.producer_id == 7 for h in headers)
    assert len(list(log.iter_batch_headers(0))) == 10


def test_flush_from_a_thread_while_appending(make_log: MakeLog) -> None:
    log = make_log(segment_bytes="3000")
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for n in range(300):
            assert append(log, 2, size=30) == 2 * n
            if n % 60 == 59:
                # Deleting segments must wait for, not break, an fsync in progress.
                assert log.apply_retention(NOW, -1, 3000) > 0
    finally:
        stop.set()
        thread.join()
    log.flush()
    assert not errors
    start = log.log_start_offset
    assert start > 0
    assert read_all(log, start) == [(2 * n, 2) for n in range(start // 2, 300)]


# --- topic metadata --------------------------------------------------------------------------------


def expect_error(code: ErrorCode, action: Callable[[], object]) -> KafkaError:
    with pytest.raises(KafkaError) as raised:
        action()
    assert raised.value.code == code
    return raised.value


def test_topic_lifecycle(open_engine: Callable[[], Storage]) -> None:
    storage = open_engine()
    meta = storage.create_topic("orders", 3, {"retention.ms": "1000"})
    assert (meta.name, meta.partitions, dict(meta.configs), meta.internal) == (
        "orders",
        3,
        {"retention.ms": "1000"},
        False,
    )
    assert isinstance(meta.topic_id, uuid.UUID)
    assert meta.config.retention_ms == 1000
    assert meta.config.segment_bytes == 1073741824
    internal = storage.create_topic("__consumer_offsets", 1, {}, internal=True)
    assert internal.internal
    assert {t.name for t in storage.topics()} == {"orders", "__consumer_offsets"}
    assert storage.topic("orders") == meta
    assert storage.topic_by_id(meta.topic_id) == meta
    assert storage.topic_by_id(uuid.uuid4()) is None
    assert storage.topic("missing") is None
    assert len(storage.cluster_id) == 22

    expect_error(ErrorCode.TOPIC_ALREADY_EXISTS, lambda: storage.create_topic("orders", 1, {}))
    expect_error(ErrorCode.INVALID_TOPIC_EXCEPTION, lambda: storage.create_topic("bad/name", 1, {}))
    expect_error(ErrorCode.INVALID_TOPIC_EXCEPTION, lambda: storage.create_topic("..", 1, {}))
    expect_error(ErrorCode.INVALID_PARTITIONS, lambda: storage.create_topic("zero", 0, {}))
    error = expect_error(
        ErrorCode.INVALID_CONFIG, lambda: storage.create_topic("cfg", 1, {"segment.bytes": "x"})
    )
    assert "segment.bytes" in error.message
    assert storage.topic("cfg") is None

    storage.log("orders", 2).append(*make_batch(values_of(1)), append_time_ms=NOW)
    expect_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, lambda: storage.log("orders", 3))
    grown = storage.create_partitions("orders", 5)
    assert grown.partitions == 5 and grown.topic_id == meta.topic_id
    assert storage.log("orders", 4).log_end_offset == 0
    assert storage.log("orders", 2).log_end_offset == 1
    expect_error(ErrorCode.INVALID_PARTITIONS, lambda: storage.create_partitions("orders", 5))

    altered = storage.alter_topic_configs("orders", {"retention.ms": None, "segment.bytes": "1000"})
    assert dict(altered.configs) == {"segment.bytes": "1000"}
    assert storage.topic("orders") == altered
    expect_error(
        ErrorCode.INVALID_CONFIG, lambda: storage.alter_topic_configs("orders", {"retention.bytes": "-2"})
    )

    storage.delete_topic("orders")
    assert storage.topic("orders") is None
    expect_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, lambda: storage.log("orders", 0))
    expect_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, lambda: storage.delete_topic("orders"))
    again = storage.create_topic("orders", 3, {})
    assert again.topic_id != meta.topic_id
    assert storage.log("orders", 2).log_end_offset == 0


def test_altered_segment_bytes_applies_to_open_logs(open_engine: Callable[[], Storage]) -> None:
    storage = open_engine()
    storage.create_topic("t", 1, {})
    log = storage.log("t", 0)
    for _ in range(5):
        log.append(*make_batch(values_of(1, 200)), append_time_ms=NOW)
    assert log.segment_count == 1  # type: ignore[attr-defined]
    storage.alter_topic_configs("t", {"segment.bytes": "300"})
    for _ in range(3):
        log.append(*make_batch(values_of(1, 200)), append_time_ms=NOW)
    assert log.segment_count == 4  # type: ignore[attr-defined]


def test_topic_by_id_follows_deletes_recreates_and_config_changes(open_engine: Callable[[], Storage]) -> None:
    storage = open_engine()
    try:
        first = storage.create_topic("orders", 1, {})
        assert storage.topic_by_id(first.topic_id) == first
        altered = storage.alter_topic_configs("orders", {"retention.ms": "1000"})
        assert storage.topic_by_id(first.topic_id) == altered
        storage.delete_topic("orders")
        assert storage.topic_by_id(first.topic_id) is None
        second = storage.create_topic("orders", 2, {})
        assert second.topic_id != first.topic_id
        assert storage.topic_by_id(first.topic_id) is None
        assert storage.topic_by_id(second.topic_id) == second
    finally:
        storage.close()
