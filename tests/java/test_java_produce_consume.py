"""The official Java producer and consumer against sluice: every codec, keys, headers and timestamps come back
byte-exact (from Java and from librdkafka), offsets are found by time, and idempotent producing has no
duplicates."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from java_driver import JavaClient

from sluice.client.wire import WireClient
from sluice.protocol.records import BatchHeader, iter_batches

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # compression.type -> batch attribute bits
PARTITIONS = 3
BASE_TIME = 1_700_000_000_000


@dataclass(frozen=True)
class Rec:
    partition: int
    timestamp: int | None  # None: the producer stamps it
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    def line(self) -> str:
        """One line of SluiceJavaClient's produce file: hex everywhere, "-" for null ("" is empty)."""
        def hx(data: bytes | None) -> str:
            return "-" if data is None else data.hex()

        headers = ",".join(f"{name.encode().hex()}:{hx(value)}" for name, value in self.headers) or "-"
        timestamp = "-" if self.timestamp is None else str(self.timestamp)
        return " ".join([str(self.partition), timestamp, hx(self.key), hx(self.value), headers])


def sample(count: int, seed: int) -> list[Rec]:
    """Records with every shape that could go wrong: null and empty keys and values, binary and compressible
    values up to 20 kB, repeated, null-valued and non-ASCII header names, explicit and producer timestamps."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        key = None if i % 7 == 3 else b"" if i % 7 == 5 else f"key-{i}".encode() + bytes([0, 255, i % 256])
        value = (None if i % 11 == 5 else b"" if i % 13 == 4
                 else b"compressible " * rng.randint(10, 1500) if i % 3 == 0 else rng.randbytes(rng.randint(1, 3000)))
        headers: tuple[tuple[str, bytes | None], ...] = () if i % 4 == 0 else (
            ("trace", rng.randbytes(8)), ("nullable", None), ("trace", b""), ("zählung", str(i).encode()))
        timestamp = BASE_TIME + i if i % 2 == 0 else None
        records.append(Rec(i % PARTITIONS, timestamp, key, value, headers))
    return records


def write_records(path: Path, records: list[Rec]) -> str:
    path.write_text("".join(r.line() + "\n" for r in records))
    return str(path)


def raw_batches(bootstrap: str, topic: str, partition: int) -> list[BatchHeader]:
    """The record batch headers as the broker serves them (Fetch v4), to see compression and producer ids."""
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("Fetch")
        request = cls(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
                      topics=[cls.FetchTopic(topic=topic, partitions=[
                          cls.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=64 << 20)])])
        records = client.call("Fetch", 4, request).responses[0].partitions[0].records
        return [header for _, header in iter_batches(bytes(records))]


def confluent_read(bootstrap: str, topic: str, partition: int, count: int) -> list[dict[str, object]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    # Offset 0, not OFFSET_BEGINNING, which costs librdkafka an extra 0.5 s offset query.
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[dict[str, object]] = []
    try:
        for _ in range(100):
            for message in consumer.consume(count - len(out), 0.5):
                assert message.error() is None, message.error()
                out.append({"offset": message.offset(), "timestamp": message.timestamp()[1], "key": message.key(),
                            "value": message.value(), "headers": tuple(message.headers() or ())})
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_round_trips_byte_exact(java: JavaClient, java_bootstrap: str, topic_name: str, tmp_path: Path,
                                            codec: str) -> None:
    java.call("create-topic", topic_name, PARTITIONS)
    records = sample(60, seed=len(codec))
    # linger.ms gathers several records per batch, so the codec compresses real multi-record batches.
    produced = java.call("produce", topic_name, write_records(tmp_path / "in.txt", records),
                         f"compression.type={codec}", "acks=all", "linger.ms=20", "enable.idempotence=false")
    by_partition: dict[int, list[tuple[Rec, int]]] = {p: [] for p in range(PARTITIONS)}
    for rec, (partition, offset, timestamp) in zip(records, produced, strict=True):
        assert partition == rec.partition
        assert rec.timestamp is None or timestamp == rec.timestamp
        by_partition[partition].append((rec, timestamp))
        assert offset == len(by_partition[partition]) - 1  # one producer, in order: offsets 0, 1, 2...

    for partition, sent in by_partition.items():
        expected = [{"offset": o, "timestamp": ts, "key": r.key, "value": r.value, "headers": r.headers}
                    for o, (r, ts) in enumerate(sent)]
        from_java = java.call("consume", topic_name, partition, 0, len(sent))
        assert [{"offset": m["offset"], "timestamp": m["timestamp"],
                 "key": None if m["key"] is None else bytes.fromhex(m["key"]),
                 "value": None if m["value"] is None else bytes.fromhex(m["value"]),
                 "headers": tuple((n, None if v is None else bytes.fromhex(v)) for n, v in m["headers"])}
                for m in from_java] == expected
        assert {m["timestamp_type"] for m in from_java} == {"CreateTime"}
        assert confluent_read(java_bootstrap, topic_name, partition, len(sent)) == expected
        batches = raw_batches(java_bootstrap, topic_name, partition)
        assert {b.compression for b in batches} == {CODECS[codec]}  # stored as the producer compressed it
        assert len(batches) < len(sent)  # batched, not one record per request


def test_list_offsets_and_offsets_for_times(java: JavaClient, topic_name: str, tmp_path: Path) -> None:
    java.call("create-topic", topic_name, 1)
    # Timestamps 1 s apart, except that record 5 is the newest: max-timestamp must find it, not the last.
    stamps = [BASE_TIME + 1000 * i for i in range(8)]
    stamps[5] = BASE_TIME + 60_000
    path = tmp_path / "timed.txt"
    path.write_text("".join(f"0 {ts} - {i:02x} -\n" for i, ts in enumerate(stamps)))
    java.call("produce", topic_name, str(path), "linger.ms=0")

    def admin(spec: object) -> tuple[int, int]:
        found = java.call("list-offsets", topic_name, 0, spec)
        return found["offset"], found["timestamp"]

    assert admin("earliest")[0] == 0
    assert admin("latest")[0] == 8
    assert admin("max-timestamp") == (5, BASE_TIME + 60_000)
    assert admin(BASE_TIME + 2500) == (3, BASE_TIME + 3000)  # the first record at or after the time
    assert admin(BASE_TIME) == (0, BASE_TIME)
    assert admin(BASE_TIME + 6500) == (5, BASE_TIME + 60_000)  # record 5 is the first one that late
    assert admin(BASE_TIME + 120_000)[0] == -1  # nothing that late

    by_consumer = java.call("offsets-for-times", topic_name, 0, BASE_TIME + 2500)
    assert by_consumer == {"offset": 3, "timestamp": BASE_TIME + 3000, "beginning": 0, "end": 8}
    assert java.call("offsets-for-times", topic_name, 0, BASE_TIME + 120_000)["offset"] is None


def test_idempotent_producer_writes_each_record_once(java: JavaClient, java_bootstrap: str, topic_name: str,
                                                     tmp_path: Path) -> None:
    java.call("create-topic", topic_name, PARTITIONS)
    count = 3000
    path = tmp_path / "seq.txt"
    path.write_text("".join(f"- - {i % 50:04x} {i:08x} -\n" for i in range(count)))  # keyed: 50 keys
    # Five requests in flight per connection and small batches: many concurrent sequenced batches.
    produced = java.call("produce", topic_name, str(path), "enable.idempotence=true", "acks=all",
                         "max.in.flight.requests.per.connection=5", "batch.size=2048", "linger.ms=2",
                         "compression.type=lz4")
    assert len(produced) == count
    seen: list[int] = []
    for partition in range(PARTITIONS):
        end = java.call("list-offsets", topic_name, partition, "latest")["offset"]
        messages = java.call("consume", topic_name, partition, 0, end)
        assert [m["offset"] for m in messages] == list(range(end))  # contiguous
        values = [int(m["value"], 16) for m in messages]
        assert values == sorted(values)  # in send order within the partition
        seen += values
        batches = raw_batches(java_bootstrap, topic_name, partition)
        assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
        # Sequence numbers continue from batch to batch with no gap and no repeat.
        assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]
    assert sorted(seen) == list(range(count))  # every value once: no duplicates, nothing lost
