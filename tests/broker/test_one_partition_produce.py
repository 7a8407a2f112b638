"""Producers that send one message per Produce request (linger 0) to a broker that acknowledges before its
fsync (`fsync_before_ack: false`): those requests take the one-partition path (sluice.protocol.produce_request,
sluice.broker.handlers.produce.produce_one). What the clients see is what the general path gives: offsets in
order, every byte read back, an error for the one message refused, and nothing acknowledged lost to kill -9."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from sluice.testing import BrokerProcess

ONE_PER_REQUEST = {"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 5}


def start_nosync(root: Path) -> BrokerProcess:
    config = root / "broker.yaml"
    config.write_text("fsync_before_ack: false\n")
    return BrokerProcess(root / "data", config=config).start()


@pytest.fixture(scope="module")
def nosync(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_nosync(tmp_path_factory.mktemp("nosync"))
    yield proc
    proc.stop()


def produce_each(bootstrap: str, topic: str, values: list[bytes], **settings: Any) -> list[tuple[Any, int]]:
    """Send each value on its own; (error or None, offset) per value, in the order sent."""
    producer = Producer({"bootstrap.servers": bootstrap, **ONE_PER_REQUEST, **settings})
    reports: list[tuple[Any, int]] = [(None, -2)] * len(values)
    for i, value in enumerate(values):

        def report(err: Any, msg: Any, i: int = i) -> None:
            reports[i] = (err, msg.offset())

        producer.produce(topic, value=value, key=b"k%d" % i, headers=[("n", b"%d" % i)], on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    return reports


def read_back(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes | None, bytes | None, Any]]:
    """(offset, key, value, headers) of the first `count` records of partition 0."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, bytes | None, bytes | None, Any]] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.offset(), msg.key(), msg.value(), msg.headers()))
    finally:
        consumer.close()
    return seen


def expected(values: list[bytes], offsets: list[int] | None = None) -> list[tuple[int, bytes, bytes, Any]]:
    positions = offsets if offsets is not None else list(range(len(values)))
    return [
        (o, b"k%d" % i, v, [("n", b"%d" % i)]) for i, (o, v) in enumerate(zip(positions, values, strict=True))
    ]


@pytest.mark.parametrize(
    "settings",
    [{"acks": "1"}, {"acks": "all", "enable.idempotence": True}, {"acks": "0"}],
    ids=["acks1", "idempotent", "acks0"],
)
def test_each_message_gets_the_next_offset_and_reads_back(
    nosync: BrokerProcess, topic_name: str, settings: dict[str, Any]
) -> None:
    nosync.create_topic(topic_name)
    values = [b"value-%d-" % i + b"x" * (i % 300) for i in range(300)]
    reports = produce_each(nosync.bootstrap, topic_name, values, **settings)
    assert [err for err, _ in reports if err is not None] == []
    if settings["acks"] != "0":  # acks=0: no answer, so the client knows no offset
        assert [offset for _, offset in reports] == list(range(300))
    assert read_back(nosync.bootstrap, topic_name, 300) == expected(values)


def test_a_message_over_the_topic_limit_is_refused_alone(nosync: BrokerProcess, topic_name: str) -> None:
    nosync.create_topic(topic_name, config={"max.message.bytes": "1000"})
    values = [b"small-0", b"x" * 5000, b"small-2"]
    reports = produce_each(nosync.bootstrap, topic_name, values, acks="1")
    assert reports[0] == (None, 0) and reports[2] == (None, 1)
    assert reports[1][0] is not None and reports[1][0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    stored = read_back(nosync.bootstrap, topic_name, 2)
    assert [(offset, value) for offset, _, value, _ in stored] == [(0, b"small-0"), (1, b"small-2")]


def test_acknowledged_messages_survive_kill_9(tmp_path: Path) -> None:
    proc = start_nosync(tmp_path)
    try:
        topic = proc.create_topic()
        values = [b"kept-%d" % i for i in range(200)]
        reports = produce_each(proc.bootstrap, topic, values, acks="1")
        assert [offset for _, offset in reports] == list(range(200))
        proc.kill()
        proc.restart()
        assert read_back(proc.bootstrap, topic, 200) == expected(values)
        # New messages go after them: no offset is given twice.
        assert [offset for _, offset in produce_each(proc.bootstrap, topic, [b"after"], acks="1")] == [200]
    finally:
        proc.stop()
