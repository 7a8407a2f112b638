"""Corruption costs the damaged batch, never the intact data after it (issue #15), and offsets with gaps
(compaction keeps offsets and leaves holes) are accepted by recovery and by the index checks."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
from cleaner_helpers import consumer_batches
from storage_batches import make_batch, values_of

from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import parse_batch_header
from sluice.storage import DiskStorage
from sluice.storage.damage import DAMAGE_FILE
from sluice.storage.disk import DiskPartitionLog
from sluice.storage.segment import segment_file_name

NOW = 1_700_000_000_000


def fill(log: DiskPartitionLog, batches: int, records: int = 5, size: int = 100) -> None:
    for n in range(batches):
        batch, header = make_batch(values_of(records, size, prefix=f"b{n}-"), [NOW + n] * records)
        log.append(batch, header, append_time_ms=NOW)


def readable(log: DiskPartitionLog) -> dict[int, bytes]:
    """Base offset -> batch bytes of every batch a consumer can read, skipping damaged offsets."""
    return {
        header.base_offset: data[position : position + header.size]
        for _, data, position, header in consumer_batches(log)
    }


def make_partition(
    data_dir: Path, batches: int, segment_bytes: int = 50_000
) -> tuple[dict[int, bytes], Path]:
    storage = DiskStorage(data_dir)
    storage.create_topic("t", 1, {"segment.bytes": str(segment_bytes)})
    log = storage.log("t", 0)
    fill(log, batches)
    contents = readable(log)
    storage.close()
    return contents, data_dir / "t-0"


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x40
    path.write_bytes(data)


def test_issue_scenario_one_flipped_byte_with_indexes_removed_costs_one_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case, scaled down: a clean stop, one byte flipped at 40% of the first segment and its
    index files removed; every other acknowledged batch is still there at its offset."""
    contents, partition = make_partition(tmp_path / "data", 1200)
    logs = sorted(partition.glob("*.log"))
    assert len(logs) > 5
    first = logs[0]
    flip(first, int(first.stat().st_size * 0.4))
    first.with_suffix(".index").unlink()
    first.with_suffix(".timeindex").unlink()
    with caplog.at_level(logging.ERROR, logger="sluice.storage"):
        storage = DiskStorage(tmp_path / "data")
    log = storage.log("t", 0)
    survivors = readable(log)
    lost = sorted(set(contents) - set(survivors))
    assert len(lost) == 1, lost
    assert all(survivors[base] == contents[base] for base in survivors)
    assert sorted(partition.glob("*.log")) == logs
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(str(first) in m and f"offsets {lost[0]}..{lost[0] + 4}" in m for m in errors), errors
    with pytest.raises(KafkaError) as raised:
        log.read(lost[0] + 2, 1000)
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
    # Reading from before the damage stops at it instead of serving damaged bytes.
    before = log.read(lost[0] - 5, 1 << 20)
    assert parse_batch_header(before, 0).base_offset == lost[0] - 5 and len(before) == len(
        contents[lost[0] - 5]
    )
    recorded = json.loads((partition / DAMAGE_FILE).read_text())["ranges"]
    assert [(r["segment"], r["first_offset"], r["end_offset"]) for r in recorded] == [
        (0, lost[0], lost[0] + 5)
    ]
    # The ERROR line names the byte range too, and it is the one recorded.
    byte_range = f"bytes {recorded[0]['start']}..{recorded[0]['end']}"
    assert any(str(first) in m and byte_range in m for m in errors), errors
    assert recorded[0]["start"] <= int(first.stat().st_size * 0.4) < recorded[0]["end"]
    storage.close()
    # A clean restart trusts the rebuilt indexes and still knows the damage from damaged.json.
    storage = DiskStorage(tmp_path / "data")
    assert storage.was_clean_shutdown
    log = storage.log("t", 0)
    assert readable(log) == survivors
    with pytest.raises(KafkaError) as raised:
        log.read(lost[0], 1000)
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
    storage.close()


@pytest.mark.parametrize("seed", range(6))
def test_random_damage_in_any_segment_loses_only_the_batches_it_touches(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    contents, partition = make_partition(tmp_path / "data", 400, segment_bytes=20_000)
    logs = sorted(partition.glob("*.log"))
    victim = rng.choice(logs[:-1])  # a sealed segment: its damage cannot be a torn tail
    size = victim.stat().st_size
    start = rng.randrange(size - 2000)
    data = bytearray(victim.read_bytes())
    for position in range(start, start + rng.randrange(1, 1500)):
        data[position] = rng.randrange(256)
    victim.write_bytes(data)
    if seed % 2:
        (partition / "partition.checkpoint").unlink()
        (tmp_path / "data" / ".clean-shutdown").unlink()
    else:
        victim.with_suffix(".index").unlink()
    storage = DiskStorage(tmp_path / "data")
    log = storage.log("t", 0)
    survivors = readable(log)
    assert all(survivors[base] == contents[base] for base in survivors)
    victim_base = int(victim.stem)
    victim_end = int(logs[logs.index(victim) + 1].stem)
    # Batches fully outside the damaged bytes survive: at most the batches overlapping it are lost.
    lost = set(contents) - set(survivors)
    assert lost and all(victim_base <= base < victim_end for base in lost)
    assert len(lost) <= 1500 // 500 + 2
    assert log.log_end_offset == max(contents) + 5
    storage.close()


def test_damage_in_the_middle_of_the_active_segment_keeps_later_batches_and_appends_continue(
    tmp_path: Path,
) -> None:
    contents, partition = make_partition(tmp_path / "data", 60, segment_bytes=1 << 30)
    (tmp_path / "data" / ".clean-shutdown").unlink()  # as after kill -9: the active segment is scanned
    active = sorted(partition.glob("*.log"))[-1]
    flip(active, active.stat().st_size // 2)
    storage = DiskStorage(tmp_path / "data")
    log = storage.log("t", 0)
    survivors = readable(log)
    assert len(contents) - len(survivors) == 1
    fill(log, 1)
    assert log.log_end_offset == 305
    storage.close()


def test_damage_at_the_end_of_a_sealed_segment_keeps_the_segments_after_it(tmp_path: Path) -> None:
    contents, partition = make_partition(tmp_path / "data", 200, segment_bytes=20_000)
    logs = sorted(partition.glob("*.log"))
    victim = logs[1]
    flip(victim, victim.stat().st_size - 10)  # the last batch of a sealed segment
    (partition / "partition.checkpoint").unlink()
    (tmp_path / "data" / ".clean-shutdown").unlink()
    storage = DiskStorage(tmp_path / "data")
    log = storage.log("t", 0)
    survivors = readable(log)
    lost = sorted(set(contents) - set(survivors))
    assert len(lost) == 1 and lost[0] + 5 == int(logs[2].stem)
    assert sorted(partition.glob("*.log")) == logs
    with pytest.raises(KafkaError) as raised:
        log.read(lost[0], 100)
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
    storage.close()


def test_torn_tail_of_the_active_segment_is_still_truncated(tmp_path: Path) -> None:
    contents, partition = make_partition(tmp_path / "data", 30)
    active = sorted(partition.glob("*.log"))[-1]
    with active.open("ab") as f:
        f.write(make_batch(values_of(5, 100))[0][:300])  # a write the crash tore
    (tmp_path / "data" / ".clean-shutdown").unlink()
    storage = DiskStorage(tmp_path / "data")
    log = storage.log("t", 0)
    assert readable(log) == contents
    assert log.truncated_bytes_at_load == 300
    assert not (partition / DAMAGE_FILE).exists()
    storage.close()


def write_gapped_segments(partition: Path) -> list[tuple[int, bytes]]:
    """Segments as compaction leaves them: batches keep their offsets, removed ones leave holes,
    including a hole at the end of a sealed segment."""
    layout = {0: [0, 3, 9, 12], 20: [25, 40], 50: [50, 52, 70]}
    written = []
    partition.mkdir(parents=True)
    for base, offsets in layout.items():
        data = b""
        for offset in offsets:
            batch, _ = make_batch(
                values_of(2, 50, prefix=f"o{offset}-"), [NOW + offset] * 2, base_offset=offset
            )
            data += batch
            written.append((offset, batch))
        (partition / segment_file_name(base, ".log")).write_bytes(data)
    return written


@pytest.mark.parametrize("indexes", ["rebuilt", "trusted"])
def test_offsets_with_gaps_are_accepted(tmp_path: Path, indexes: str) -> None:
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("t", 1, {"index.interval.bytes": "100"})
    storage.close()
    for path in (data_dir / "t-0").iterdir():
        path.unlink()
    (data_dir / "t-0").rmdir()
    written = write_gapped_segments(data_dir / "t-0")
    (data_dir / ".clean-shutdown").unlink()
    if indexes == "trusted":  # a clean close writes indexes; the next open adopts them
        DiskStorage(data_dir).close()
    storage = DiskStorage(data_dir)
    assert storage.was_clean_shutdown == (indexes == "trusted")
    log = storage.log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 72)
    assert readable(log) == dict(written)
    # A fetch in a hole gets the next batch, also across a hole at the end of a segment.
    assert parse_batch_header(log.read(5, 1), 0).base_offset == 9
    assert parse_batch_header(log.read(14, 1), 0).base_offset == 25
    assert parse_batch_header(log.read(43, 1), 0).base_offset == 50
    assert not (data_dir / "t-0" / DAMAGE_FILE).exists()
    fill(log, 1)
    assert log.log_end_offset == 77
    storage.close()


def test_after_a_crash_only_the_active_segment_past_its_checkpoint_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush checkpoints how much of the active segment is durable (every ACTIVE_CHECKPOINT_BYTES);
    after a crash the bytes before that are adopted like a sealed segment's, the rest checked batch by
    batch, so a torn tail is still cut and a start-up never rescans a whole 1 GiB active segment."""
    from sluice.storage import disk

    monkeypatch.setattr(disk, "ACTIVE_CHECKPOINT_BYTES", 20_000)
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("t", 1, {"index.interval.bytes": "1000"})
    log = storage.log("t", 0)
    fill(log, 50)
    log.flush()
    checkpoint = json.loads((data_dir / "t-0" / "partition.checkpoint").read_text())
    assert checkpoint["active_segment"] == 0 and checkpoint["active_position"] >= 20_000
    durable = checkpoint["active_position"]
    fill(log, 3)  # written after the checkpoint, then the crash
    contents = readable(log)
    storage.close(clean=False)
    active = data_dir / "t-0" / segment_file_name(0, ".log")
    flip(active, 200)  # inside the checkpointed prefix: adopted without a CRC check, as sealed segments are
    with active.open("ab") as f:
        f.write(b"\x00" * 100)  # a torn write past the checkpoint
    storage = DiskStorage(data_dir)
    log = storage.log("t", 0)
    assert log.truncated_bytes_at_load == 100
    assert log.log_end_offset == 265
    assert len(readable(log)) == len(contents)
    assert log.segments[-1].size_bytes > durable
    storage.close()


def test_the_cleaner_leaves_a_damaged_segment_alone_until_it_is_repaired(tmp_path: Path) -> None:
    """Compaction rewrites segments, and damaged.json's byte ranges would not describe the rewritten file:
    cleaning stops before the first damaged segment until `repair` has quarantined the damage."""
    from cleaner_helpers import all_records, append_keyed, compacted_log

    from sluice.storage.compaction.cleaner import clean_partition
    from sluice.storage.verify import repair_data_dir

    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    log = compacted_log(storage, segment_bytes="1500")
    for n in range(60):
        append_keyed(log, [(f"k{n % 3}".encode(), f"v{n}".encode().ljust(60, b"."))])
    storage.close()
    logs = sorted((data_dir / "table-0").glob("*.log"))
    assert len(logs) > 4
    flip(logs[1], 100)
    for suffix in (".index", ".timeindex"):  # so the start scans that segment, as after a crash
        logs[1].with_suffix(suffix).unlink()
    storage = DiskStorage(data_dir)
    log = storage.log("table", 0)
    assert [d.segment for d in log.damaged] == [int(logs[1].stem)]
    before = {path.name: path.read_bytes() for path in logs[:2]}
    clean_partition(log, log.config, NOW)
    # Nothing at or after the damaged segment was rewritten: its bytes, and the reads they give, are as they were.
    assert logs[1].read_bytes() == before[logs[1].name]
    with pytest.raises(KafkaError) as raised:
        log.read(log.damaged[0].first_offset, 1000)
    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
    storage.close()
    repair_data_dir(data_dir)
    storage = DiskStorage(data_dir)
    log = storage.log("table", 0)
    assert log.damaged == []
    assert clean_partition(log, log.config, NOW)
    latest = {key: (offset, value) for offset, _, key, value, _ in all_records(log)}
    assert {key: value for key, (_, value) in latest.items()} == {
        f"k{n % 3}".encode(): f"v{n}".encode().ljust(60, b".") for n in range(57, 60)
    }
    assert sorted(offset for offset, _ in latest.values()) == [57, 58, 59]
    storage.close()
