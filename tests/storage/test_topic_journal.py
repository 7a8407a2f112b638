"""Topic metadata as a snapshot plus an append-only journal (storage/topic_journal.py): a creation that was
acknowledged survives kill -9, a torn last entry is cut off, compaction keeps every topic, an old data dir
with only metadata.json starts, and a full disk refuses a creation without leaving half of it behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from storage_batches import make_batch, values_of

from sluice.errors import KafkaError
from sluice.storage import DiskStorage
from sluice.storage import topic_journal as journal_module
from sluice.storage.api import TopicMeta
from sluice.storage.files import write_atomically
from sluice.storage.metadata import encode_metadata
from sluice.storage.topic_journal import JOURNAL_FILE, SNAPSHOT_FILE, MetadataDamaged

CREATOR = """
import sys
from sluice.storage import DiskStorage
storage = DiskStorage(sys.argv[1])
n = 0
while True:
    storage.create_topic(f"t{n}", 2, {"retention.ms": str(n)})
    print(n, flush=True)
    n += 1
"""


def test_topics_whose_creation_was_acknowledged_survive_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    child = subprocess.Popen(
        [sys.executable, "-c", CREATOR, str(data_dir)], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    assert child.stdout is not None
    acknowledged = -1
    for line in child.stdout:
        acknowledged = int(line)
        if acknowledged >= 60:
            break
    child.kill()
    child.wait(30)
    # The child ran on while we read: what it printed before the kill is acknowledged too (a line is one
    # write, so only a line cut short by the kill, without its newline, is not).
    for line in child.stdout:
        if line.endswith("\n"):
            acknowledged = int(line)
    storage = DiskStorage(data_dir)
    try:
        for n in range(acknowledged + 1):
            meta = storage.topic(f"t{n}")
            assert meta is not None and meta.partitions == 2 and meta.configs["retention.ms"] == str(n)
        names = {meta.name for meta in storage.topics()}
        assert names <= {f"t{n}" for n in range(acknowledged + 2)}  # at most one created but not yet printed
        storage.create_topic("after", 1, {})
    finally:
        storage.close(clean=False)
    storage = DiskStorage(data_dir)
    assert storage.topic("after") is not None and storage.topic(f"t{acknowledged}") is not None
    storage.close()


def test_a_torn_last_entry_is_cut_off_and_the_journal_goes_on(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("whole", 1, {})
    storage.close(clean=False)
    journal = data_dir / JOURNAL_FILE
    intact = journal.stat().st_size
    with journal.open("ab") as torn:
        torn.write(b'0badc0de {"put":{"name":"torn","topic_id"')  # kill -9 mid-append: no newline
    storage = DiskStorage(data_dir)
    assert [m.name for m in storage.topics()] == ["whole"]
    assert journal.stat().st_size == intact
    storage.create_topic("next", 1, {})
    storage.close()
    storage = DiskStorage(data_dir)
    assert sorted(m.name for m in storage.topics()) == ["next", "whole"]
    storage.close()


def test_damage_before_intact_entries_stops_the_open_naming_the_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("first", 1, {})
    storage.create_topic("second", 1, {})
    storage.close()
    journal = data_dir / JOURNAL_FILE
    data = bytearray(journal.read_bytes())
    data[20] ^= 0x01  # a flipped bit inside the first entry
    journal.write_bytes(bytes(data))
    with pytest.raises(MetadataDamaged, match=r"metadata\.log: damaged entry at byte 0"):
        DiskStorage(data_dir)


def test_compaction_rewrites_the_snapshot_and_keeps_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "COMPACT_MIN_ENTRIES", 4)
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    for n in range(12):
        storage.create_topic(f"c{n}", 1, {})
    storage.delete_topic("c3")
    storage.alter_topic_configs("c4", {"retention.ms": "7"})
    # Compacted when the journal held more entries than there were topics: it never grows past that.
    assert storage._journal is not None and storage._journal.entries <= 12
    storage.close(clean=False)
    expected = {f"c{n}" for n in range(12)} - {"c3"}
    storage = DiskStorage(data_dir)
    assert {m.name for m in storage.topics()} == expected
    assert storage.topic("c4").configs["retention.ms"] == "7"
    storage.close()
    # A crash between the snapshot and emptying the journal: the old journal replays over the new snapshot.
    journal_text = (data_dir / JOURNAL_FILE).read_bytes()
    storage = DiskStorage(data_dir)
    storage._journal.compact(dict((m.name, m) for m in storage.topics()))  # type: ignore[union-attr]
    storage.close()
    (data_dir / JOURNAL_FILE).write_bytes(journal_text)
    storage = DiskStorage(data_dir)
    assert {m.name for m in storage.topics()} == expected
    storage.close()


def test_a_data_dir_with_only_the_old_metadata_json_starts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    old = TopicMeta("old", uuid.uuid4(), 2, {"cleanup.policy": "delete"})
    write_atomically(data_dir / SNAPSHOT_FILE, encode_metadata("AAAAAAAAAAAAAAAAAAAAAA", {"old": old}))
    (data_dir / "old-1").mkdir()
    storage = DiskStorage(data_dir)
    assert storage.cluster_id == "AAAAAAAAAAAAAAAAAAAAAA" and storage.topic("old") == old
    batch, header = make_batch(values_of(2, 10))
    assert storage.log("old", 1).append(batch, header, append_time_ms=0) == 0
    storage.create_topic("new", 1, {})
    storage.close()
    storage = DiskStorage(data_dir)
    assert sorted(m.name for m in storage.topics()) == ["new", "old"]
    assert storage.log("old", 1).log_end_offset == 2
    storage.close()


def test_a_full_disk_refuses_a_creation_and_leaves_nothing_of_it(mount_tmpfs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data_dir = mount_tmpfs("1m") / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("before", 1, {})
    filler = data_dir.parent / "filler"
    with filler.open("wb") as out, pytest.raises(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    refused = 0
    for n in range(50):  # whatever room was left is taken by the first few entries
        try:
            storage.create_topic(f"full{n}", 3, {})
        except KafkaError as error:
            assert "No space left" in error.message
            assert not (data_dir / f"full{n}-0").exists()
            refused = n
            break
    else:
        pytest.fail("the full disk never refused a topic")
    storage.close(clean=False)
    filler.unlink()
    storage = DiskStorage(data_dir)
    names = {m.name for m in storage.topics()}
    assert names == {"before", *(f"full{n}" for n in range(refused))}
    storage.create_topic(f"full{refused}", 3, {})
    assert storage.log(f"full{refused}", 2).log_end_offset == 0
    storage.close()


def test_a_journal_without_its_snapshot_stops_the_open(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    storage = DiskStorage(data_dir)
    storage.create_topic("kept", 1, {})
    storage.close()
    (data_dir / SNAPSHOT_FILE).unlink()  # outside damage: the snapshot is always written first
    with pytest.raises(MetadataDamaged, match="is missing"):
        DiskStorage(data_dir)
    assert (data_dir / JOURNAL_FILE).stat().st_size > 0  # nothing was thrown away
