"""kill -9 while a producer streams with acks=all: everything acknowledged survives at its offset."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.testing import BrokerProcess

PARTITIONS = 2


def stream_until_killed(proc: BrokerProcess, round_no: int, acked: dict[tuple[int, int], bytes]) -> int:
    producer = Producer({
        "bootstrap.servers": proc.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
        "message.timeout.ms": 4000, "reconnect.backoff.max.ms": 200,
    })
    lock = threading.Lock()
    stop = threading.Event()
    sent = 0

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            with lock:
                key = (msg.partition(), msg.offset())
                assert key not in acked or acked[key] == msg.value(), f"offset {key} acknowledged twice"
                acked[key] = msg.value()

    def produce_loop() -> None:
        nonlocal sent
        while not stop.is_set():
            try:
                producer.produce("durable", value=f"r{round_no}-m{sent}".encode(), on_delivery=on_delivery)
                sent += 1
            except BufferError:
                pass
            producer.poll(0.0005 if sent % 100 else 0)

    thread = threading.Thread(target=produce_loop)
    thread.start()
    time.sleep(1.5)
    proc.kill()
    time.sleep(0.3)
    stop.set()
    thread.join()
    producer.flush(10)
    return sent


def read_everything(bootstrap: str) -> dict[tuple[int, int], bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition("durable", p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition("durable", p, 0) for p in range(PARTITIONS)])
    seen: dict[tuple[int, int], bytes] = {}
    # Up to a million messages: on a loaded machine reading them takes as long as it takes, so the bound is on
    # a stall (nothing new for 30 s), not on the whole read.
    stalled_at = time.monotonic() + 30
    while len(seen) < sum(ends.values()) and time.monotonic() < stalled_at:
        batch = consumer.consume(500, 0.5)
        for msg in batch:
            assert msg.error() is None, msg.error()
            seen[(msg.partition(), msg.offset())] = msg.value()
        if batch:
            stalled_at = time.monotonic() + 30
    consumer.close()
    assert len(seen) == sum(ends.values())
    return seen


def test_acknowledged_messages_survive_repeated_kill_9(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.create_topics([NewTopic("durable", PARTITIONS, 1)])["durable"].result(30)
    acked: dict[tuple[int, int], bytes] = {}
    for round_no in range(3):
        before = len(acked)
        stream_until_killed(proc, round_no, acked)
        assert len(acked) > before, f"round {round_no} acknowledged nothing"
        proc.restart()
    seen = read_everything(proc.bootstrap)
    proc.stop()
    lost = [key for key, value in acked.items() if seen.get(key) != value]
    assert not lost, f"{len(lost)} acknowledged messages lost or changed, e.g. {lost[:5]}"
    # Offsets are dense: recovery left no holes and no duplicates of acknowledged values.
    for p in range(PARTITIONS):
        offsets = sorted(o for (pp, o) in seen if pp == p)
        assert offsets == list(range(len(offsets)))
    values = [v for v in seen.values()]
    acked_values = set(acked.values())
    assert sum(1 for v in values if v in acked_values) == len(acked_values), "an acknowledged value stored twice"


def test_torn_tail_and_deleted_index_recover(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic("torn", 1, 1, config={"segment.bytes": "20000"})])["torn"].result(30)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(300):
            producer.produce("torn", value=f"m{i}".encode() * 20)
            producer.flush(10)
        proc.kill()
    partition_dir = data / "torn-0"
    logs = sorted(partition_dir.glob("*.log"))
    assert len(logs) > 2, "segments should have rolled"
    # A torn write at the tail, and an index lost from an older segment.
    with open(logs[-1], "ab") as tail:
        tail.write(b"\x00\x00\x00\x00\x00\x00\x01\x2c\x00\x00\x01\x00garbage")
    logs[0].with_suffix(".index").unlink()
    with BrokerProcess(data) as proc:
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "v", "enable.auto.commit": False})
        low, high = consumer.get_watermark_offsets(TopicPartition("torn", 0), timeout=10)
        assert (low, high) == (0, 300)
        consumer.assign([TopicPartition("torn", 0, 150)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 150 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(200, 0.5) if m.error() is None]
        consumer.close()
        assert got == [f"m{i}".encode() * 20 for i in range(150, 300)]
