"""The log cleaner on a real disk log: what it keeps, where, and what survives restarts and crashes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cleaner_helpers import BASE_TS, all_records, append_keyed, compacted_log, last_per_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.broker.record_checks import check_keys_for_compaction
from sluice.errors import ErrorCode, RecordErrors
from sluice.protocol.compression import Codec
from sluice.protocol.records import Record, encode_batch, parse_batch_header
from sluice.storage.compaction.checkpoint import CleanerCheckpoint
from sluice.storage.compaction.cleaner import CleaningAborted, clean_partition
from sluice.storage.compaction.offset_map import OffsetMap
from sluice.storage.compaction.plan import plan_cleaning
from sluice.storage.compaction.reader import Throttler
from sluice.storage.disk import DiskStorage
from sluice.storage.loader import CLEANING_DIR, SWAP_MANIFEST


class Crash(Exception):
    pass


def fill(log, rounds: int, keys: int, *, compression: int = Codec.NONE, value_size: int = 40):
    history = []
    for n in range(rounds):
        items = [
            (f"k{(n * 3 + i) % keys}".encode(), f"v{n}-{i}".encode().ljust(value_size, b"."))
            for i in range(3)
        ]
        base = append_keyed(log, items, compression=compression, headers=[("h", f"{n}".encode())])
        history += [(base + i, key, value) for i, (key, value) in enumerate(items)]
    log.flush()
    return history


def expected_after_clean(log, history):
    """What a full cleaning leaves: the last record of each key among the sealed segments (the map never
    reads the active segment), and the active segment untouched."""
    active_base = log.segments[-1].base_offset
    latest = last_per_key([entry for entry in history if entry[0] < active_base])
    return {offset for offset, _ in latest.values()} | {
        offset for offset, _, _ in history if offset >= active_base
    }


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_last_value_per_key_stays_at_its_offset(tmp_path: Path, codec: int) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    history = fill(log, 120, 10, compression=codec)
    before = {offset: (key, value) for offset, key, value in history}
    size_before = log.size_bytes
    end_before = log.log_end_offset
    assert clean_partition(log, log.config, BASE_TS + 1000)
    records = all_records(log)
    offsets = [r[0] for r in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert set(offsets) == expected_after_clean(log, history)
    for offset, timestamp, key, value, headers in records:
        assert before[offset] == (key, value)
        assert timestamp == BASE_TS + offset % 3  # each batch holds 3 records, 1 ms apart
        assert headers and headers[0][0] == "h"
    assert log.size_bytes < size_before / 2
    assert log.log_end_offset == end_before and log.log_start_offset == 0
    storage.close(clean=True)
    # Restart after cleaning reads the same log.
    storage = DiskStorage(tmp_path)
    assert all_records(storage.log("table", 0)) == records
    storage.close(clean=False)
    storage = DiskStorage(tmp_path)  # and after an unclean stop, through recovery of gapped segments
    assert all_records(storage.log("table", 0)) == records
    storage.close()


def test_compressed_batch_keeps_its_codec_and_record_timestamps(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    for n in range(40):
        append_keyed(
            log,
            [(b"a", f"{n}".encode() * 30), (f"u{n}".encode(), b"x" * 30)],
            timestamp=BASE_TS + n * 10,
            compression=Codec.ZSTD,
        )
    log.flush()
    assert clean_partition(log, log.config, BASE_TS + 10_000)
    sealed = log.segments[0]
    data = sealed.read(0, 1 << 20)
    header = parse_batch_header(data)
    assert header.compression == Codec.ZSTD
    records = all_records(log)
    by_key = {key: (offset, ts) for offset, ts, key, _, _ in records}
    for n in range(40):
        assert by_key[f"u{n}".encode()] == (2 * n + 1, BASE_TS + n * 10 + 1)
    storage.close()


def test_consumer_position_inside_a_cleaned_segment_keeps_going(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    history = fill(log, 120, 5)
    position = 17  # a reader half way through the first segment
    before_clean = [r[0] for r in all_records(log) if r[0] >= position]
    clean_partition(log, log.config, BASE_TS + 1000)
    after = [r[0] for r in all_records(log) if r[0] >= position]
    # Reading from the old position answers the next surviving records, none before it.
    data = log.read(position, 1 << 20)
    assert parse_batch_header(data).last_offset >= position
    assert set(after) <= set(before_clean) and after
    assert after[-1] == history[-1][0]
    storage.close()


def test_tombstones_go_after_delete_retention(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage, delete_retention_ms="1000")
    for n in range(60):
        append_keyed(log, [(f"k{n % 6}".encode(), b"v" * 60)])
    for n in range(6):
        append_keyed(log, [(f"k{n}".encode(), None)])
    for n in range(60):  # push the tombstones out of the active segment
        append_keyed(log, [(f"other{n % 3}".encode(), b"w" * 60)])
    log.flush()
    now = BASE_TS + 5000
    clean_partition(log, log.config, now)
    tombstones = [r for r in all_records(log) if r[3] is None]
    assert len(tombstones) == 6, "kept during delete.retention.ms after the first cleaning"
    assert not [r for r in all_records(log) if r[2].startswith(b"k") and r[3] is not None]
    plan = plan_cleaning(log, log.config, now + 999, CleanerCheckpoint.read(log.directory))
    assert not plan.must_clean
    assert plan_cleaning(log, log.config, now + 1000, CleanerCheckpoint.read(log.directory)).must_clean
    assert clean_partition(log, log.config, now + 1000)
    assert not [r for r in all_records(log) if r[3] is None]
    storage.close()


def test_compact_delete_applies_retention_too(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage, cleanup_policy="compact,delete")
    assert log.config.compacts and log.config.deletes_old_segments
    fill(log, 100, 4)
    clean_partition(log, log.config, BASE_TS + 1000)
    # Cleaned-empty segments count from their file time, so "later" must be later than the wall clock.
    deleted = log.apply_retention(int(time.time() * 1000) + 10**7, 1000, -1)
    assert deleted >= 1 and log.log_start_offset > 0
    assert all(r[0] >= log.log_start_offset for r in all_records(log))
    storage.close()


def test_min_compaction_lag_and_dirty_ratio_hold_cleaning_back(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage, min_compaction_lag_ms="60000", min_cleanable_dirty_ratio="0.5")
    fill(log, 60, 4)
    assert not clean_partition(log, log.config, BASE_TS + 1000), "too young for min.compaction.lag.ms"
    assert clean_partition(log, log.config, BASE_TS + 61_000)
    # Freshly cleaned: little is dirty, so the ratio keeps the next pass away.
    append_keyed(log, [(b"k1", b"x")])
    log.flush()
    assert not plan_cleaning(
        log, log.config, BASE_TS + 62_000, CleanerCheckpoint.read(log.directory)
    ).worth_cleaning(log.config)
    storage.close()


def test_max_compaction_lag_forces_a_pass(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage, min_cleanable_dirty_ratio="0.99", max_compaction_lag_ms="5000")
    fill(log, 60, 60)  # all keys distinct: the dirty ratio alone never asks
    clean_partition(log, log.config, BASE_TS)
    fill(log, 30, 60)
    plan = plan_cleaning(log, log.config, BASE_TS + 1000, CleanerCheckpoint.read(log.directory))
    assert not plan.must_clean
    assert plan_cleaning(log, log.config, BASE_TS + 6000, CleanerCheckpoint.read(log.directory)).must_clean
    storage.close()


def test_small_cleaned_segments_are_grouped(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage, segment_bytes="4096")
    fill(log, 200, 3)
    segments_before = log.segment_count
    clean_partition(log, log.config, BASE_TS + 1000)
    # Groups are formed from sizes before cleaning (as Kafka does): the next pass merges what shrank.
    fill(log, 20, 3)
    clean_partition(log, log.config, BASE_TS + 2000)
    assert log.segment_count < segments_before / 3
    storage.close()


def test_offset_map_respects_its_budget_and_cleaning_still_is_correct(tmp_path: Path) -> None:
    offset_map = OffsetMap(160 * 10)
    assert all(offset_map.put(f"k{n}".encode(), n) for n in range(10))
    assert not offset_map.put(b"new", 11) and offset_map.put(b"k3", 12) and offset_map.get(b"k3") == 12
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage)
    history = fill(log, 150, 40)
    for _ in range(6):
        clean_partition(log, log.config, BASE_TS + 1000, dedupe_buffer_size=160 * 25)
    records = all_records(log)
    latest = last_per_key(history)
    by_offset = {offset: (key, value) for offset, key, value in history}
    # Nothing lost: every key's latest value is still there at its offset, nothing invented.
    assert {offset for _, (offset, _) in latest.items()} <= {r[0] for r in records}
    assert all(by_offset[r[0]] == (r[2], r[3]) for r in records)
    storage.close()


def test_throttler_sleeps_to_the_configured_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttler = Throttler(1000, clock=lambda: now[0], sleep=sleep)
    throttler.account(500)
    assert slept == [0.5]


def test_keyless_records_are_refused_by_position() -> None:
    batch = encode_batch(
        [Record(0, 0, b"k", b"v"), Record(1, 0, None, b"v"), Record(2, 0, None, b"v")],
        base_timestamp=BASE_TS,
        compression=Codec.GZIP,
    )
    with pytest.raises(RecordErrors) as caught:
        check_keys_for_compaction(batch, [parse_batch_header(batch)])
    assert caught.value.code == ErrorCode.INVALID_RECORD
    assert [index for index, _ in caught.value.record_errors] == [1, 2]


def test_checkpoint_survives_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "cleaner.checkpoint").write_text("{broken")
    assert CleanerCheckpoint.read(tmp_path).first_dirty_offset == 0


SWAP_STEPS = ["cleaned-written", "manifest-prepared", "committed", "old-removed", "swapped"]


def _crash_and_reopen(tmp_path: Path, step: str, keys: int, rounds: int) -> None:
    data = tmp_path / f"crash-{step}-{keys}-{rounds}"
    storage = DiskStorage(data)
    log = compacted_log(storage)
    history = fill(log, rounds, keys)
    before = all_records(log)

    def crash_point(at: str) -> None:
        if at == step:
            raise Crash(at)

    try:
        clean_partition(log, log.config, BASE_TS + 1000, crash_point=crash_point)
    except Crash:
        pass
    storage.close(clean=False)  # as after kill -9: nothing more is written
    storage = DiskStorage(data)
    log = storage.log("table", 0)
    after = all_records(log)
    assert not (log.directory / SWAP_MANIFEST).exists()
    assert not (log.directory / CLEANING_DIR).exists()
    old_offsets = [r[0] for r in before]
    new_offsets = [r[0] for r in after]
    assert new_offsets == sorted(set(new_offsets)), "no offset twice"
    # Either the old log, or a correctly cleaned one: never a mixture that lost a latest value.
    assert set(new_offsets) <= set(old_offsets)
    assert {offset for _, (offset, _) in last_per_key(history).items()} <= set(new_offsets)
    by_offset = {r[0]: r for r in before}
    assert all(by_offset[r[0]] == r for r in after)
    assert log.log_end_offset == history[-1][0] + 1
    # And the cleaner can still finish the job afterwards.
    clean_partition(log, log.config, BASE_TS + 2000)
    assert set(r[0] for r in all_records(log)) == expected_after_clean(log, history)
    storage.close()


@pytest.mark.parametrize("step", SWAP_STEPS)
def test_crash_at_each_swap_step_leaves_old_or_new(tmp_path: Path, step: str) -> None:
    _crash_and_reopen(tmp_path, step, keys=7, rounds=120)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(step=st.sampled_from(SWAP_STEPS), keys=st.integers(1, 30), rounds=st.integers(20, 150))
def test_crash_anywhere_loses_and_duplicates_nothing(
    tmp_path: Path, step: str, keys: int, rounds: int
) -> None:
    _crash_and_reopen(tmp_path, step, keys, rounds)


def test_swap_refused_when_segments_went_away(tmp_path: Path) -> None:
    storage = DiskStorage(tmp_path)
    log = compacted_log(storage, cleanup_policy="compact,delete")
    fill(log, 100, 4)
    before = log.segment_count

    def retention_in_between(fn):
        log.apply_retention(int(time.time() * 1000) + 10**7, 0, -1)
        return fn()

    with pytest.raises(CleaningAborted):
        clean_partition(log, log.config, BASE_TS + 1000, run_on_owner=retention_in_between)
    assert log.segment_count < before
    assert not list((log.directory / CLEANING_DIR).iterdir())
    assert not (log.directory / SWAP_MANIFEST).exists()
    storage.close()
    assert os.path.exists(tmp_path)
