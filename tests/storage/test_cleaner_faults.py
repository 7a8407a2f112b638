"""The log cleaner against transactions, producer state, damaged and corrupt segments and a full disk."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cleaner_helpers import BASE_TS, all_records, append_keyed, compacted_log

from sluice.errors import CorruptRecordError
from sluice.protocol.control_batches import encode_end_txn_batch
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches, parse_batch_header
from sluice.storage.compaction.cleaner import clean_partition
from sluice.storage.compaction.manager import CleanerSettings, LogCleanerManager
from sluice.storage.compaction.offset_map import TxnFacts
from sluice.storage.disk import DiskPartitionLog, DiskStorage
from sluice.storage.loader import CLEANING_DIR


def append_producer(
    log: DiskPartitionLog,
    items: list[tuple[bytes, bytes | None]],
    producer_id: int,
    sequence: int,
    *,
    transactional: bool = False,
) -> int:
    records = [Record(n, n, key, value, []) for n, (key, value) in enumerate(items)]
    batch = encode_batch(
        records,
        base_timestamp=BASE_TS,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=transactional,
    )
    return log.append(batch, parse_batch_header(batch), append_time_ms=BASE_TS)


def append_marker(log: DiskPartitionLog, producer_id: int, *, commit: bool) -> int:
    batch = encode_end_txn_batch(
        commit=commit, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0, timestamp=BASE_TS
    )
    return log.append(batch, parse_batch_header(batch), append_time_ms=BASE_TS)


def batch_headers(log: DiskPartitionLog) -> list:
    headers = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        for pos, header in iter_batches(data):
            if header.base_offset >= offset:
                headers.append((header, decode_batch(data, pos)[1]))
            offset = header.last_offset + 1
    return headers


def filler(log: DiskPartitionLog, rounds: int, prefix: str = "f") -> None:
    """Plain updates of a few keys, so segments roll and later records make earlier ones obsolete."""
    for n in range(rounds):
        append_keyed(log, [(f"{prefix}{n % 3}".encode(), b"x" * 200)])


def test_aborted_transactions_go_committed_ones_compact_open_ones_stay(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    committed = append_producer(log, [(b"a", b"committed-old")], 10, 0, transactional=True)
    commit_marker = append_marker(log, 10, commit=True)
    aborted = append_producer(log, [(b"b", b"aborted")], 11, 0, transactional=True)
    abort_marker = append_marker(log, 11, commit=False)
    filler(log, 20)
    newer_a = append_keyed(log, [(b"a", b"plain-new")])
    open_txn = append_producer(log, [(b"c", b"open")], 12, 0, transactional=True)
    filler(log, 20, "g")
    append_keyed(log, [(b"c", b"plain-after-open")])
    filler(log, 20, "h")
    log.flush()
    facts = TxnFacts(
        last_stable_offset=open_txn,  # producer 12's transaction is still open
        aborted=((11, aborted, abort_marker),),
    )
    assert clean_partition(log, log.config, BASE_TS + 1000, facts=facts)
    offsets = {r[0]: r for r in all_records(log)}
    assert committed not in offsets, "a committed transactional record is compacted by key like any other"
    assert offsets[newer_a][3] == b"plain-new"
    assert aborted not in offsets, "an aborted transaction's data goes once it is decided"
    assert offsets[open_txn][3] == b"open", "a batch at or above the LSO may be in an open transaction"
    # Markers are kept, and every transactional batch keeps its producer fields.
    markers = [h.base_offset for h, _ in batch_headers(log) if h.is_control]
    assert markers == [commit_marker, abort_marker]
    (open_header,) = [h for h, _ in batch_headers(log) if h.base_offset == open_txn]
    assert open_header.is_transactional and open_header.producer_id == 12
    storage.close()


def test_without_transaction_facts_transactional_batches_are_kept(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    txn = append_producer(log, [(b"a", b"in-txn")], 10, 0, transactional=True)
    append_marker(log, 10, commit=False)
    filler(log, 20)
    append_keyed(log, [(b"a", b"plain-new")])
    filler(log, 20, "g")
    log.flush()
    assert clean_partition(log, log.config, BASE_TS + 1000)
    assert txn in {r[0] for r in all_records(log)}
    storage.close()


def test_a_producers_newest_batch_is_kept_empty_with_its_sequence(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    append_producer(log, [(b"p", b"1")], 7, 0)
    last = append_producer(log, [(b"q", b"2"), (b"r", b"3")], 7, 1)
    filler(log, 20)
    append_keyed(log, [(b"p", b"new"), (b"q", b"new"), (b"r", b"new")])
    filler(log, 20, "g")
    log.flush()
    facts = TxnFacts(last_stable_offset=log.log_end_offset, last_batches=frozenset({last}))
    assert clean_partition(log, log.config, BASE_TS + 1000, facts=facts)
    by_base = {h.base_offset: (h, records) for h, records in batch_headers(log)}
    header, records = by_base[last]
    assert records == [] and header.record_count == 0
    assert (header.producer_id, header.base_sequence, header.last_offset_delta) == (7, 1, 1)
    assert header.base_offset == last and header.last_offset == last + 1
    assert 0 not in by_base, "an older batch of the producer goes whole"
    storage.close()
    # The producer state a restart rebuilds from headers still knows sequence 2 comes next.
    again = DiskStorage(tmp_path)
    headers = [h for h, _ in batch_headers(again.log("table", 0)) if h.producer_id == 7]
    assert headers[-1].base_sequence + headers[-1].last_offset_delta == 2
    again.close()


def two_segment_log(tmp_path: Path) -> tuple[DiskStorage, DiskPartitionLog]:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    for n in range(60):
        append_keyed(log, [(f"k{n % 4}".encode(), f"v{n}".encode().ljust(200, b"."))])
    log.flush()
    return storage, log


def flip_in_value(segment_path: Path) -> None:
    """Flip a byte inside the first batch's record (not its header), so only the CRC can tell."""
    data = bytearray(segment_path.read_bytes())
    data[parse_batch_header(data).size - 20] ^= 0x40
    segment_path.write_bytes(data)


def test_a_segment_with_recorded_damage_stops_the_cleaner(tmp_path: Path) -> None:
    storage, log = two_segment_log(tmp_path)
    segments = log.segments
    assert len(segments) >= 4
    damaged = segments[2]
    storage.close()
    flip_in_value(damaged.log_path)
    damaged.index_path.unlink()  # the next start scans it with CRCs and records the damage
    storage = DiskStorage(tmp_path)
    log = storage.log("table", 0)
    assert [d.segment for d in log.damaged] == [damaged.base_offset]
    before = {r[0]: r for r in all_records(log)}
    assert clean_partition(log, log.config, BASE_TS + 1000)
    after = {r[0]: r for r in all_records(log)}
    assert [d.segment for d in log.damaged] == [damaged.base_offset], "the damage is still on record"
    # The segments before the damaged one were cleaned; it and all after it are untouched.
    assert {o for o in before if o < damaged.base_offset} > {o for o in after if o < damaged.base_offset}
    assert {o: r for o, r in before.items() if o >= damaged.base_offset} == {
        o: r for o, r in after.items() if o >= damaged.base_offset
    }
    storage.close()


def test_a_corrupt_batch_the_cleaner_meets_makes_the_partition_uncleanable(tmp_path: Path) -> None:
    storage, log = two_segment_log(tmp_path)
    first = log.segments[0]
    storage.close()
    flip_in_value(first.log_path)  # a clean start trusts the segment: nobody has checked this CRC yet
    storage = DiskStorage(tmp_path)
    log = storage.log("table", 0)
    assert not log.damaged
    files_before = sorted(p.name for p in log.directory.iterdir())
    sizes_before = [s.size_bytes for s in log.segments]
    with pytest.raises(CorruptRecordError):
        clean_partition(log, log.config, BASE_TS + 1000)
    assert [s.size_bytes for s in log.segments] == sizes_before
    assert sorted(p.name for p in log.directory.iterdir() if p.name != CLEANING_DIR) == files_before
    assert not any((log.directory / CLEANING_DIR).iterdir())
    # The cleaner threads give up on the partition (until restart) instead of retrying forever.
    cleaner = LogCleanerManager(
        CleanerSettings(worker_processes=False, backoff_ms=10),
        lambda: [("table", 0, log.config, log)],
        lambda fn: fn(),
        lambda: BASE_TS + 1000,
    )
    assert not cleaner.clean_once()
    assert "CRC" in cleaner.state_of(log).uncleanable and cleaner.stats.uncleanable_partitions == 1
    assert not cleaner.clean_once() and cleaner.stats.uncleanable_partitions == 1
    storage.close()


@pytest.fixture
def small_tmpfs(mount_tmpfs: Callable[[str], Path]) -> Path:
    return mount_tmpfs("4m")


def test_a_full_disk_during_cleaning_changes_nothing_and_the_next_pass_works(small_tmpfs: Path) -> None:
    storage = DiskStorage(small_tmpfs / "data")
    log = compacted_log(storage, segment_bytes="200000")
    for n in range(1200):  # about 1.4 MB: 1,200 updates of 300 keys
        append_keyed(log, [(f"k{n % 300}".encode(), f"v{n}".encode().ljust(1000, b"."))])
    log.flush()
    before = all_records(log)
    stat = os.statvfs(small_tmpfs)
    ballast = small_tmpfs / "ballast"
    ballast.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 50_000))  # leave too little for a copy
    with pytest.raises(OSError) as raised:
        clean_partition(log, log.config, BASE_TS + 1000)
    assert raised.value.errno == 28  # ENOSPC
    assert all_records(log) == before
    assert not any((log.directory / CLEANING_DIR).iterdir()), "the partial copy is removed at once"
    ballast.unlink()
    assert clean_partition(log, log.config, BASE_TS + 1000)
    after = all_records(log)
    assert len(after) < len(before) and {r[0] for r in after} <= {r[0] for r in before}
    storage.close()


def test_segment_ms_rolls_a_quiet_compacted_topic_so_it_gets_cleaned(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    # segment.bytes far above what is written: only segment.ms can close the segment.
    log = compacted_log(storage, segment_bytes="1048576", segment_ms="60000")
    for n in range(30):
        append_keyed(log, [(f"k{n % 3}".encode(), f"v{n}".encode())], timestamp=BASE_TS + n)
    log.flush()
    assert not clean_partition(log, log.config, BASE_TS + 120_000), "the active segment is never cleaned"
    # A record a minute and a half younger than the segment's first rolls it.
    append_keyed(log, [(b"k0", b"late")], timestamp=BASE_TS + 90_000, now_ms=BASE_TS + 90_000)
    log.flush()
    assert len(log.segments) == 2
    assert clean_partition(log, log.config, BASE_TS + 120_000)
    # The last of each key in the closed segment; the active segment (k0=late) is not read by the map.
    assert [r[3] for r in all_records(log)] == [b"v27", b"v28", b"v29", b"late"]
    storage.close()


def test_commit_markers_go_after_delete_retention_once_their_transaction_is_empty(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage, delete_retention_ms="5000")
    append_producer(log, [(b"a", b"committed-old")], 10, 0, transactional=True)
    emptied_commit = append_marker(log, 10, commit=True)
    aborted = append_producer(log, [(b"b", b"aborted")], 11, 0, transactional=True)
    emptied_abort = append_marker(log, 11, commit=False)
    kept_data = append_producer(log, [(b"z", b"committed-live")], 12, 0, transactional=True)
    kept_commit = append_marker(log, 12, commit=True)
    filler(log, 20)
    append_keyed(log, [(b"a", b"plain-new")])
    filler(log, 20, "g")
    log.flush()
    facts = TxnFacts(log.log_end_offset, ((11, aborted, emptied_abort),))

    def markers() -> list[int]:
        return [h.base_offset for h, _ in batch_headers(log) if h.is_control]

    assert clean_partition(log, log.config, BASE_TS + 1000, facts=facts)
    assert markers() == [emptied_commit, emptied_abort, kept_commit], "kept for delete.retention.ms"
    assert not clean_partition(log, log.config, BASE_TS + 5999, facts=facts), "nothing due before then"
    assert clean_partition(log, log.config, BASE_TS + 6000, facts=facts), (
        "the markers' deadline forces a pass"
    )
    # An ABORT marker stays (readers need it to end the skipping its index entry starts); a COMMIT
    # marker whose transaction still has data stays.
    assert markers() == [emptied_abort, kept_commit]
    assert kept_data in {r[0] for r in all_records(log)}
    storage.close()
    again = DiskStorage(tmp_path)  # and the log opens again as it was left
    reopened = again.log("table", 0)
    assert [h.base_offset for h, _ in batch_headers(reopened) if h.is_control] == [emptied_abort, kept_commit]
    again.close()
