"""The aborted-transaction index: Kafka's 34-byte entries per segment file, read back, torn tails dropped."""

from __future__ import annotations

from pathlib import Path

from sluice.storage.txn_index import AbortedTxn, TxnIndex


def test_entries_survive_reopen_and_overlap_queries(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path)
    index.append(AbortedTxn(7, 10, 20, 10), segment_base=0)
    index.append(AbortedTxn(8, 30, 40, 30), segment_base=25)
    assert (tmp_path / "00000000000000000000.txnindex").stat().st_size == 34
    reopened = TxnIndex(tmp_path)
    reopened.load(first_segment_base=0)
    assert reopened.entries == [AbortedTxn(7, 10, 20, 10), AbortedTxn(8, 30, 40, 30)]
    assert [e.producer_id for e in reopened.collect(0, 15)] == [7]
    assert [e.producer_id for e in reopened.collect(21, 100)] == [8]
    assert reopened.collect(41, 100) == []


def test_torn_entry_is_dropped_and_deleted_segments_files_removed(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path)
    index.append(AbortedTxn(7, 10, 20, 10), segment_base=0)
    index.append(AbortedTxn(8, 30, 40, 30), segment_base=25)
    with (tmp_path / f"{25:020d}.txnindex").open("ab") as f:
        f.write(b"\x00\x00\x01")  # a crash mid-append
    reopened = TxnIndex(tmp_path)
    reopened.load(first_segment_base=25)  # segment 0 was deleted by retention
    assert reopened.entries == [AbortedTxn(8, 30, 40, 30)]
    assert not (tmp_path / f"{0:020d}.txnindex").exists()
    reopened.append(AbortedTxn(9, 50, 60, 50), segment_base=25)
    again = TxnIndex(tmp_path)
    again.load(first_segment_base=25)
    assert [e.producer_id for e in again.entries] == [8, 9]
