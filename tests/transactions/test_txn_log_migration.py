"""`__transaction_state` in Kafka's record layout, and the one-time migration of a data directory that an
earlier sluice wrote with JSON values: the broker starts on it, keeps every transactional id (a half-ended
commit is finished), rewrites them once in Kafka's layout, and a real transactional producer carries on."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from sluice.broker.broker import TRANSACTION_STATE_TOPIC
from sluice.broker.config import BrokerConfig
from sluice.coordinator.transaction_log import decode_key, decode_value, encode_value, state_key
from sluice.coordinator.txn_metadata import PendingOffset, TxnMetadata, TxnState
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches
from sluice.server.app import build_broker
from sluice.testing import BrokerProcess


def now() -> int:
    return int(time.time() * 1000)


def legacy_key(transactional_id: str) -> bytes:
    """The key as sluice wrote it before: the int16 version, then the id's bytes without a length."""
    return b"\x00\x00" + transactional_id.encode()


def legacy_value(
    pid: int, epoch: int, state: str, partitions: list[list], offsets: dict | None = None
) -> bytes:
    """A value as sluice wrote it before: JSON with short keys."""
    return json.dumps(
        {
            "v": 0,
            "pid": pid,
            "epoch": epoch,
            "last_pid": -1,
            "last_epoch": -1,
            "timeout": 60_000,
            "state": state,
            "partitions": partitions,
            "offsets": offsets or {},
            "groups": sorted(offsets or {}),
            "start": now() - 1000,
            "updated": now() - 1000,
        },
        separators=(",", ":"),
    ).encode()


def state_records(broker) -> list[tuple[bytes, bytes | None]]:
    log = broker.partition(TRANSACTION_STATE_TOPIC, 0).log
    data = log.read(0, 1 << 24)
    return [(r.key, r.value) for pos, _ in iter_batches(data) for r in decode_batch(data, pos)[1]]


def write_old_data_dir(data: Path) -> int:
    """A data directory as the earlier sluice left it: "done" committed long ago, "halfway" stopped between
    its PrepareCommit record and its markers (over topic t-0, with an offset for group g). Returns the
    producer id of "done"."""
    broker = build_broker(BrokerConfig(data_dir=data, listen_port=0))
    broker.create_topic("t", 1, {})
    done_pid, halfway_pid = broker.new_producer_id(now()), broker.new_producer_id(now())
    records = [
        (legacy_key("done"), legacy_value(done_pid, 3, "CompleteCommit", [])),
        (legacy_key("gone"), legacy_value(broker.new_producer_id(now()), 0, "CompleteAbort", [])),
        (legacy_key("gone"), None),
        (
            legacy_key("halfway"),
            legacy_value(halfway_pid, 0, "PrepareCommit", [["t", 0]], {"g": [["t", 0, 7, -1, ""]]}),
        ),
    ]
    batch = encode_batch([Record(i, 0, k, v, []) for i, (k, v) in enumerate(records)], base_timestamp=now())
    broker.append_internal(TRANSACTION_STATE_TOPIC, 0, batch, now())
    broker.end_flush(broker.begin_flush())
    broker.close()
    return done_pid


def test_the_value_layout_is_kafkas_and_round_trips() -> None:
    meta = TxnMetadata(
        "tx",
        42,
        5,
        30_000,
        TxnState.PREPARE_COMMIT,
        41,
        4,
        {("a", 0), ("a", 2), ("b", 1)},
        {"g": {("a", 0): PendingOffset(9, 2, "m")}},
        {"g"},
        1000,
        2000,
    )
    value = encode_value(meta)
    # Kafka's TransactionLogValue v1: version, ProducerId, ProducerEpoch, TransactionTimeoutMs, status byte.
    assert struct.unpack_from(">hqhib", value) == (1, 42, 5, 30_000, 2)
    assert decode_value("tx", value) == (meta, False)
    # TransactionLogKey v0: version, then the id as a Kafka string (int16 length).
    assert state_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(state_key("tx")) == ("tx", False)
    assert decode_key(legacy_key("tx")) == ("tx", True)


def test_an_old_json_data_dir_is_migrated_once_and_keeps_working(tmp_path: Path) -> None:
    done_pid = write_old_data_dir(tmp_path)

    broker = build_broker(BrokerConfig(data_dir=tmp_path, listen_port=0))
    txns = broker.transactions.coordinator.txns
    assert set(txns) == {"done", "halfway"}
    assert (txns["done"].producer_id, txns["done"].epoch) == (done_pid, 3)
    assert txns["halfway"].state is TxnState.COMPLETE_COMMIT  # recovery finished the commit
    records = state_records(broker)
    tombstoned = {k for k, v in records if v is None}
    assert {legacy_key("done"), legacy_key("halfway")} <= tombstoned
    latest = {decode_key(k)[0]: v for k, v in records if decode_key(k) and not decode_key(k)[1] and v}
    assert set(latest) == {"done", "halfway"}
    assert all(not decode_value(t, v)[1] for t, v in latest.items()), "rewritten in Kafka's layout"
    end = broker.partition(TRANSACTION_STATE_TOPIC, 0).log.log_end_offset
    broker.close()

    again = build_broker(BrokerConfig(data_dir=tmp_path, listen_port=0))
    assert again.partition(TRANSACTION_STATE_TOPIC, 0).log.log_end_offset == end, "migrated only once"
    assert again.transactions.coordinator.txns["done"].epoch == 3
    again.close()

    # A real transactional producer with the migrated id: fenced forward from its stored epoch, it commits.
    process = BrokerProcess(tmp_path).start()
    try:
        producer = Producer({"bootstrap.servers": process.bootstrap, "transactional.id": "done"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("t", b"after-migration", partition=0)
        producer.commit_transaction(30)
        consumer = Consumer(
            {
                "bootstrap.servers": process.bootstrap,
                "group.id": "migration-check",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe(["t"])
        deadline = time.monotonic() + 30
        got = []
        while time.monotonic() < deadline and b"after-migration" not in got:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.close()
        assert b"after-migration" in got
        # The offset "halfway" committed for group g inside its transaction was written by the recovery.
        group = Consumer({"bootstrap.servers": process.bootstrap, "group.id": "g"})
        assert group.committed([TopicPartition("t", 0)], timeout=30)[0].offset == 7
        group.close()
    finally:
        process.stop()
    final = build_broker(BrokerConfig(data_dir=tmp_path, listen_port=0))
    assert final.transactions.coordinator.txns["done"].epoch > 3
    final.close()
