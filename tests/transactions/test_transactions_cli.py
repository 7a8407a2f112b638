"""`sluice transactions list|describe|abort` against a real broker with a hanging transaction."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.transactions.conftest import consume_all, create_topic, txn_producer


def sluice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args], text=True, capture_output=True, timeout=120
    )


def test_operator_lists_describes_and_aborts_a_hanging_transaction(
    bootstrap: str, topic_name: str, txn_id: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=2)
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic_name, b"hanging", partition=1)
    producer.flush(10)

    listed = sluice("transactions", "list", "--state", "Ongoing", "--json", "-b", bootstrap)
    assert listed.returncode == 0, listed.stderr
    mine = [r for r in json.loads(listed.stdout) if r["transactional_id"] == txn_id]
    assert len(mine) == 1 and mine[0]["state"] == "Ongoing" and mine[0]["partitions"] == [f"{topic_name}-1"]
    assert mine[0]["age_ms"] >= 0

    described = sluice("transactions", "describe", txn_id, "--json", "-b", bootstrap)
    assert described.returncode == 0, described.stderr
    row = json.loads(described.stdout)
    assert row["producer_id"] == mine[0]["producer_id"] and row["state"] == "Ongoing"

    missing = sluice("transactions", "describe", txn_id + "-nope", "-b", bootstrap)
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

    aborted = sluice("transactions", "abort", "--transactional-id", txn_id, "-b", bootstrap)
    assert aborted.returncode == 0, aborted.stderr
    after = json.loads(sluice("transactions", "describe", txn_id, "--json", "-b", bootstrap).stdout)
    assert after["state"] == "CompleteAbort" and after["producer_epoch"] > row["producer_epoch"]
    # The partition is stable again and the aborted record is hidden from read_committed readers.
    producer2 = txn_producer(bootstrap, txn_id + "-2")
    producer2.begin_transaction()
    producer2.produce(topic_name, b"later", partition=1)
    producer2.commit_transaction(30)
    assert consume_all(bootstrap, topic_name, "read_committed", partitions=2) == [b"later"]
    again = sluice("transactions", "abort", "--transactional-id", txn_id, "-b", bootstrap)
    assert again.returncode == 1 and "no open transaction" in again.stderr


def test_operator_aborts_by_partition_and_producer_id(bootstrap: str, topic_name: str, txn_id: str) -> None:
    create_topic(bootstrap, topic_name)
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic_name, b"stuck")
    producer.flush(10)
    row = json.loads(sluice("transactions", "describe", txn_id, "--json", "-b", bootstrap).stdout)
    wrong = sluice("transactions", "abort", "-b", bootstrap, "--topic", topic_name, "--partition", "0")
    assert wrong.returncode != 0
    aborted = sluice(
        "transactions",
        "abort",
        "-b",
        bootstrap,
        "--topic",
        topic_name,
        "--partition",
        "0",
        "--producer-id",
        str(row["producer_id"]),
        "--producer-epoch",
        str(row["producer_epoch"]),
    )
    assert aborted.returncode == 0, aborted.stderr
    assert consume_all(bootstrap, topic_name, "read_committed") == []
    assert consume_all(bootstrap, topic_name, "read_uncommitted") == [b"stuck"]
