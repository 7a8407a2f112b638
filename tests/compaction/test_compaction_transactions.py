"""Compacted topics with transactional and idempotent producers (confluent-kafka): read_committed still
sees exactly the committed data after cleaning, aborted data goes, and a producer that outlives a broker
restart keeps its sequence."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from compaction_helpers import (
    create_compacted,
    produce_updates,
    read_all,
    updates,
    wait_for,
    wait_settled,
    write_config,
)
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from sluice.storage.damage import Intact, scan_segment
from sluice.testing import BrokerProcess


def markers_on_disk(partition: Path) -> int:
    """COMMIT/ABORT control batches in the partition's segment files (40 transactions wrote 40)."""
    count = 0
    for segment in partition.glob("*.log"):
        # The intact batches only: the active segment's file runs on past its last batch (reserved space).
        with segment.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            count += sum(
                1
                for found in scan_segment(file.fileno(), size, 0)
                if isinstance(found, Intact) and found.header.is_control
            )
    return count


def read_committed(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "committed-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while consumer.position([TopicPartition(topic, 0)])[0].offset < high:
            assert time.monotonic() < deadline, "read_committed reader stuck"
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


# With delete.retention.ms=0 the COMMIT markers of emptied transactions go too.
@pytest.mark.parametrize("delete_retention_ms", ["86400000", "0"])
def test_read_committed_after_cleaning_sees_the_committed_data_only(
    tmp_path: Path, topic_name: str, delete_retention_ms: str
) -> None:
    proc = BrokerProcess(tmp_path / "data", config=write_config(tmp_path)).start()
    try:
        bootstrap = proc.bootstrap
        create_compacted(bootstrap, topic_name, delete_retention_ms=delete_retention_ms)
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "table-writer", "linger.ms": 2}
        )
        producer.init_transactions(30)
        expected: dict[bytes, bytes] = {}
        aborted_values: set[bytes] = set()
        offsets: dict[bytes, int] = {}  # value -> the offset it was written at

        def report(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                offsets[msg.value()] = msg.offset()

        for n in range(40):
            producer.begin_transaction()
            batch = {f"key-{(n * 3 + i) % 10}".encode(): f"txn-{n}-{i}".encode() * 20 for i in range(3)}
            for key, value in batch.items():
                producer.produce(topic_name, key=key, value=value, on_delivery=report)
            producer.flush(30)
            if n % 4 == 3:
                producer.abort_transaction(30)
                aborted_values.update(batch.values())
            else:
                producer.commit_transaction(30)
                expected.update(batch)
        # Plain updates of other keys roll segments past the transactions so they become cleanable.
        plain = produce_updates(bootstrap, topic_name, updates(5, 60, 200, "plain"))
        expected.update({key: value for _, key, value in plain if key is not None and value is not None})
        offsets.update({value: offset for offset, _, value in plain if value is not None})

        def cleaned_away() -> bool:
            return not aborted_values & {v for _, _, v in read_all(bootstrap, topic_name)}

        wait_for(cleaned_away, 60, "the cleaner to remove the aborted transactions")
        if delete_retention_ms == "0":
            wait_for(lambda: markers_on_disk(tmp_path / "data" / f"{topic_name}-0") < 40, 60, "markers to go")
        uncommitted = wait_settled(bootstrap, topic_name)
        after = read_committed(bootstrap, topic_name)
        assert {k: v for _, k, v in after if k is not None} == expected
        # Every survivor is at its original offset, and old committed values went too.
        assert all(offsets[value] == offset for offset, _, value in after if value is not None)
        assert len(after) < 30 * 3 + 300
        assert [r for r in uncommitted if r[2] is not None] == after
        producer.begin_transaction()  # the transactional producer carries on after the cleaning
        producer.produce(topic_name, key=b"key-0", value=b"final")
        producer.commit_transaction(30)
        final = read_committed(bootstrap, topic_name)
        assert final[-1][1:] == (b"key-0", b"final")
        producer.flush(30)
        proc.stop()  # a restart rebuilds producer state and the LSO from the cleaned log
        proc.start()
        assert read_committed(bootstrap, topic_name) == final
    finally:
        proc.stop()


def test_an_idempotent_producer_keeps_its_sequence_across_cleaning_and_restart(
    tmp_path: Path, topic_name: str
) -> None:
    proc = BrokerProcess(tmp_path / "data", config=write_config(tmp_path)).start()
    try:
        bootstrap = proc.bootstrap
        create_compacted(bootstrap, topic_name)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
        errors: list[str] = []

        def report(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))

        # Its first batch survives cleaning; its last batches hold keys that others overwrite, so the
        # cleaner would remove them whole: a restart then rebuilds a stale sequence unless one is kept.
        producer.produce(topic_name, key=b"idem-keep", value=b"kept", on_delivery=report)
        producer.flush(30)
        for n in range(3):
            producer.produce(topic_name, key=f"idem-{n}".encode(), value=b"old", on_delivery=report)
            producer.flush(30)
        overwrites = [(f"idem-{n}".encode(), b"new") for n in range(3)]
        produce_updates(bootstrap, topic_name, overwrites + updates(5, 60, 200, "plain"))

        def idempotent_records_gone() -> bool:
            return not [r for r in read_all(bootstrap, topic_name) if r[2] == b"old"]

        wait_for(idempotent_records_gone, 60, "the cleaner to remove the idempotent producer's records")
        proc.stop()
        proc.start()
        # The same producer (same id, next sequence) writes again: no OUT_OF_ORDER_SEQUENCE, no fatal error.
        producer.produce(topic_name, key=b"idem-0", value=b"after-restart", on_delivery=report)
        assert producer.flush(60) == 0
        assert not errors, errors
        assert read_all(bootstrap, topic_name)[-1][1:] == (b"idem-0", b"after-restart")
    finally:
        proc.stop()
