"""Writing keyed updates with confluent-kafka and reading a compacted partition back, for tests/compaction."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.configs import describe_topic_configs
from sluice.client.wire import WireClient
from sluice.storage.config import CLEANER_DIRTY_RATIO, CLEANER_LAST_CLEANED_MS

CLEANER_SETTINGS = """\
log_cleaner_backoff_ms: 100
group_initial_rebalance_delay_ms: 0
"""
# Small segments so a few hundred updates span many closed segments, and a low ratio so a pass starts early.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
}

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


def write_config(directory: Path, extra: str = "") -> Path:
    path = directory / "broker.yaml"
    path.write_text(CLEANER_SETTINGS + extra)
    return path


def create_compacted(bootstrap: str, topic: str, **overrides: str) -> None:
    configs = {**COMPACTED, **{k.replace("_", "."): v for k, v in overrides.items()}}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


def produce_updates(
    bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes | None]], *, headers: bool = True
) -> list[Record]:
    """Send every (key, value) with acks=all, one per batch in order; the (offset, key, value) each got."""
    # Small batches, so the updates spread over many segments as a steady stream of writes would.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all", "batch.num.messages": 4}
    )
    delivered: list[Record] = []
    errors: list[str] = []

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.offset(), msg.key(), msg.value()))

    for n, (key, value) in enumerate(items):
        producer.produce(
            topic,
            key=key,
            value=value,
            headers=[("n", str(n).encode())] if headers else None,
            on_delivery=report,
        )
        if n % 200 == 199:
            producer.flush(30)
    producer.flush(30)
    assert not errors, errors
    return sorted(delivered)


def read_all(bootstrap: str, topic: str, until: int | None = None, timeout: float = 30) -> list[Record]:
    """Every record of partition 0 from offset 0 up to the end (or `until`), with confluent-kafka."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        end = high if until is None else until
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        position = low
        while position < end and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                out.append((msg.offset(), msg.key(), msg.value()))
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
        assert position >= end, f"stuck at {position} of {end}"
        return out
    finally:
        consumer.close()


def cleaner_status(bootstrap: str, topic: str) -> tuple[float, int]:
    """(dirty ratio, last cleaned ms) of partition 0 from the broker's read-only config entries, which it
    lists only when a DescribeConfigs names them (confluent-kafka's describe_configs cannot)."""
    with WireClient.connect(bootstrap) as client:
        entries = describe_topic_configs(client, topic, [CLEANER_DIRTY_RATIO, CLEANER_LAST_CLEANED_MS])
    ratio = (entries[CLEANER_DIRTY_RATIO] or "").split("=")[1]
    cleaned = (entries[CLEANER_LAST_CLEANED_MS] or "").split("=")[1]
    return float(ratio), int(cleaned)


def wait_for(condition: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def wait_cleaned(bootstrap: str, topic: str, after_ms: int = 0, timeout: float = 30) -> None:
    wait_for(lambda: cleaner_status(bootstrap, topic)[1] > after_ms, timeout, f"a cleaning of {topic}")


def wait_settled(bootstrap: str, topic: str, timeout: float = 60) -> list[Record]:
    """Wait until the cleaner has nothing dirty left in the topic and two reads agree; that read."""
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        ratio, cleaned = cleaner_status(bootstrap, topic)
        current = read_all(bootstrap, topic)
        if cleaned > 0 and ratio == 0.0 and current == previous:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} did not settle (dirty ratio {ratio})")
        previous = current
        time.sleep(0.3)


def updates(
    keys: int, rounds: int, size: int = 60, prefix: str = "key"
) -> list[tuple[bytes | None, bytes | None]]:
    return [
        (f"{prefix}-{k}".encode(), f"value-{r}-{k}".encode().ljust(size, b"."))
        for r in range(rounds)
        for k in range(keys)
    ]


def latest(records: list[Record]) -> dict[bytes, Record]:
    out: dict[bytes, Record] = {}
    for record in records:
        if record[1] is not None:
            out[record[1]] = record
    return out


def check_compacted(read: list[Record], written: list[Record]) -> None:
    """Nothing moved, nothing duplicated, every key's last value there, and far fewer records."""
    offsets = [r[0] for r in read]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"
    by_offset = {r[0]: r for r in written}
    assert all(by_offset[r[0]] == r for r in read), "every record is the one written at its offset"
    wanted = {r for r in latest(written).values() if r[2] is not None}
    assert wanted <= set(read)
