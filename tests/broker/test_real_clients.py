"""Every real client creates a topic, produces with keys, headers and every codec, and reads it all back
byte-exact from sluice's broker; offsets are looked up by timestamp."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def expected_messages(codec: str, count: int = 30) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [
        (f"key-{i}".encode(), f"{codec}-value-{i}-".encode() + bytes(range(256)) * (i % 3),
         [("h1", f"v{i}".encode()), ("h2", b"\x00\xff")])
        for i in range(count)
    ]


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def read_all_confluent(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.5):
            assert msg.error() is None, msg.error()
            got.append(msg)
    consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(bootstrap: str, topic_name: str, codec: str) -> None:
    create_topic(bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "enable.idempotence": True,
                         "linger.ms": 5})
    sent = expected_messages(codec)
    before_ms = int(time.time() * 1000)
    acked = []
    for key, value, headers in sent:
        producer.produce(topic_name, key=key, value=value, headers=headers,
                         on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset())))
    assert producer.flush(30) == 0
    assert all(err is None for err, _, _ in acked) and len(acked) == len(sent)
    got = read_all_confluent(bootstrap, topic_name, 2, len(sent))
    assert sorted((m.key(), m.value(), m.headers()) for m in got) == sorted(
        (k, v, h) for k, v, h in sent)
    by_key = {m.key(): (m.partition(), m.offset()) for m in got}
    delivered = {(p, o) for _, p, o in acked}
    assert set(by_key.values()) == delivered

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ts"})
    found = consumer.offsets_for_times([TopicPartition(topic_name, p, before_ms) for p in range(2)], timeout=10)
    later = consumer.offsets_for_times([TopicPartition(topic_name, p, int(time.time() * 1000) + 60_000)
                                        for p in range(2)], timeout=10)
    consumer.close()
    starts = {tp.partition: tp.offset for tp in found}
    assert all(offset == 0 for p, offset in starts.items() if any(pp == p for pp, _ in delivered))
    assert all(tp.offset == -1 for tp in later)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(bootstrap: str, topic_name: str, codec: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.admin import NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([KNewTopic(topic_name, 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                             acks="all")
    sent = expected_messages(codec)
    futures = [producer.send(topic_name, key=k, value=v, headers=h) for k, v, h in sent]
    metadata = [f.get(timeout=30) for f in futures]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    parts = [KTP(topic_name, p) for p in range(2)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    ts = consumer.offsets_for_times({p: 0 for p in parts})
    consumer.close()
    assert sorted((r.key, r.value, [(k, v) for k, v in r.headers]) for r in got) == sorted(sent)
    assert {(r.partition, r.offset) for r in got} == {(m.partition, m.offset) for m in metadata}
    used = {m.partition for m in metadata}
    assert all(ts[KTP(topic_name, p)].offset == 0 for p in used)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(bootstrap: str, topic_name: str, codec: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as ANewTopic

    sent = expected_messages(codec)

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([ANewTopic(topic_name, 2, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                                    enable_idempotence=True)
        await producer.start()
        results = [await producer.send_and_wait(topic_name, key=k, value=v, headers=h) for k, v, h in sent]
        await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        parts = [ATP(topic_name, p) for p in range(2)]
        consumer.assign(parts)
        await consumer.seek_to_beginning()
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.extend(records)
        ts = await consumer.offsets_for_times({p: 0 for p in parts})
        await consumer.stop()
        assert sorted((r.key, r.value, list(r.headers)) for r in got) == sorted(
            (k, v, [(hk, hv) for hk, hv in h]) for k, v, h in sent)
        assert {(r.partition, r.offset) for r in got} == {(m.partition, m.offset) for m in results}
        used = {m.partition for m in results}
        assert all(ts[ATP(topic_name, p)].offset == 0 for p in used)

    asyncio.run(run())


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(bootstrap: str, topic_name: str, codec: str) -> None:
    create_topic(bootstrap, topic_name)
    lines = [f"k{i}|{codec} value {i}" for i in range(25)]
    produced = subprocess.run(
        ["kcat", "-b", bootstrap, "-P", "-t", topic_name, "-K", "|", "-H", "source=kcat", "-z", codec,
         "-X", "enable.idempotence=true"],
        input="\n".join(lines) + "\n", text=True, capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-J"],
        text=True, capture_output=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    got = [json.loads(line) for line in consumed.stdout.splitlines() if line.strip()]
    assert sorted((m["key"], m["payload"]) for m in got) == sorted(tuple(line.split("|", 1)) for line in lines)
    assert all(m["headers"] == ["source", "kcat"] for m in got)
    listed = subprocess.run(["kcat", "-b", bootstrap, "-Q", "-t", f"{topic_name}:0:0"],
                            text=True, capture_output=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert f"{topic_name} [0] offset 0" in listed.stdout
