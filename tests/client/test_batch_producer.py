"""client/batch_producer: a call's records as one batch per partition, on the real broker, read back with
confluent-kafka; and what a caller is told when the broker is gone, stalls or dies with records in flight."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from sluice.client.batch_producer import (
    BatchProducer,
    BatchProducerSettings,
    ProduceFailed,
    QueueFull,
    settings_from_librdkafka,
)
from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.compression import Codec
from sluice.protocol.records import iter_batches
from sluice.testing import BrokerProcess, create_topic, free_port


def settings(bootstrap: str, **overrides: object) -> BatchProducerSettings:
    found = settings_from_librdkafka({"bootstrap.servers": bootstrap, "message.timeout.ms": 20_000})
    assert isinstance(found, BatchProducerSettings), found
    return BatchProducerSettings(**{**found.__dict__, **overrides})


def read_back(
    bootstrap: str, topic: str, partition: int, count: int
) -> list[tuple[int, bytes | None, bytes | None, list]]:
    """(offset, key, value, headers) of the partition's first `count` records."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    seen: list[tuple[int, bytes | None, bytes | None, list]] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                seen.append((message.offset(), message.key(), message.value(), message.headers() or []))
    finally:
        consumer.close()
    return seen


async def test_each_partitions_records_land_at_the_offsets_returned(bootstrap: str) -> None:
    topic = create_topic(bootstrap, 3)
    # 8 KiB values against 20 KiB batches: partition 1's 10 records take several batches, in order.
    plain = [(None, b"v%d" % i, ()) for i in range(50)]
    large = [(b"k%d" % i, bytes([i]) * 8192, (("h", b"x"), ("empty", None))) for i in range(10)]
    tombstones = [(b"gone", None, ())] * 3
    producer = BatchProducer(settings(bootstrap, max_batch_bytes=20_000))
    try:
        first = await producer.produce(topic, {0: plain, 1: large, 2: tombstones})
        again = await producer.produce(topic, {0: plain[:2]})
    finally:
        await producer.close(5)
    assert first == {0: list(range(50)), 1: list(range(10)), 2: [0, 1, 2]}
    assert again == {0: [50, 51]}
    assert read_back(bootstrap, topic, 0, 52) == [(i, None, b"v%d" % (i % 50), []) for i in range(52)]
    assert read_back(bootstrap, topic, 1, 10) == [
        (i, b"k%d" % i, bytes([i]) * 8192, [("h", b"x"), ("empty", None)]) for i in range(10)
    ]
    assert read_back(bootstrap, topic, 2, 3) == [(i, b"gone", None, []) for i in range(3)]


def batch_sizes(bootstrap: str, topic: str, partition: int) -> list[int]:
    """How many records each of the partition's batches holds, as the broker serves them (Fetch v4)."""
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("Fetch")
        wanted = cls.FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=64 << 20)
        request = cls(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=64 << 20,
            isolation_level=0,
            topics=[cls.FetchTopic(topic=topic, partitions=[wanted])],
        )
        records = client.call("Fetch", 4, request).responses[0].partitions[0].records
        return [header.record_count for _, header in iter_batches(bytes(records))]


async def test_calls_of_one_loop_turn_share_a_batch_each_keeping_its_order(bootstrap: str) -> None:
    """Calls made together (as concurrent REST requests are) go out as one batch per partition, in the order
    of the calls; each call's records are contiguous and its own. Calls too large to share go in batches of
    their own, and a call larger than a batch is split, its records in order."""
    topic = create_topic(bootstrap, 2)
    producer = BatchProducer(settings(bootstrap, max_batch_bytes=6_000))
    calls = [{0: [(None, b"c%d-%d" % (c, i), ()) for i in range(5)], 1: [(None, b"x", ())]} for c in range(8)]
    try:
        together = await asyncio.gather(*(producer.produce(topic, call) for call in calls))
        # 1 KiB values: two calls of 3 do not fit one 6,000-byte batch; a call of 9 takes two batches.
        large = [[(None, bytes([c]) * 1024, ()) for _ in range(n)] for c, n in enumerate((3, 3, 9))]
        apart = await asyncio.gather(*(producer.produce(topic, {1: records}) for records in large))
    finally:
        await producer.close(5)
    assert [answer[0] for answer in together] == [list(range(5 * c, 5 * c + 5)) for c in range(8)]
    assert [answer[1] for answer in together] == [[c] for c in range(8)]
    assert [answer[1] for answer in apart] == [list(range(8, 11)), list(range(11, 14)), list(range(14, 23))]
    assert batch_sizes(bootstrap, topic, 0) == [40]
    assert batch_sizes(bootstrap, topic, 1)[0] == 8 and sum(batch_sizes(bootstrap, topic, 1)[1:]) == 15
    assert [v for _, _, v, _ in read_back(bootstrap, topic, 0, 40)] == [
        b"c%d-%d" % (c, i) for c in range(8) for i in range(5)
    ]
    assert [v for _, _, v, _ in read_back(bootstrap, topic, 1, 23)][8:] == [
        v for records in large for _, v, _ in records
    ]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_compressed_batches_are_read_back(bootstrap: str, codec: str) -> None:
    found = settings_from_librdkafka({"bootstrap.servers": bootstrap, "compression.type": codec})
    assert isinstance(found, BatchProducerSettings) and found.compression == Codec[codec.upper()]
    topic = create_topic(bootstrap, 1)
    producer = BatchProducer(found)
    try:
        written = await producer.produce(
            topic, {0: [(None, b"compressible %d " % i * 10, ()) for i in range(100)]}
        )
    finally:
        await producer.close(5)
    assert written == {0: list(range(100))}
    assert [value for _, _, value, _ in read_back(bootstrap, topic, 0, 100)] == [
        b"compressible %d " % i * 10 for i in range(100)
    ]


async def test_a_partition_that_does_not_exist_fails_at_once_and_alone(bootstrap: str) -> None:
    topic = create_topic(bootstrap, 1)
    producer = BatchProducer(settings(bootstrap))
    started = time.monotonic()
    try:
        written = await producer.produce(topic, {0: [(None, b"a", ())], 7: [(None, b"b", ())]})
    finally:
        await producer.close(5)
    assert written[0] == [0]
    failure = written[7]
    assert isinstance(failure, ProduceFailed) and failure.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert f"{topic} [7]" in failure.message and time.monotonic() - started < 5


async def test_no_broker_fails_with_the_address_once_the_delivery_timeout_is_up() -> None:
    producer = BatchProducer(settings(f"127.0.0.1:{free_port()}", delivery_timeout_s=1.5))
    started = time.monotonic()
    try:
        written = await producer.produce("anything", {0: [(None, b"a", ())]})
    finally:
        await producer.close(1)
    failure = written[0]
    assert isinstance(failure, ProduceFailed) and "cannot reach 127.0.0.1" in failure.message
    assert 1.4 < time.monotonic() - started < 10  # tried again until the timeout, then answered


async def test_a_stalled_broker_is_not_written_twice(tmp_path: Path) -> None:
    """A request left unanswered past request.timeout.ms fails as "may have been written" and is not sent
    again (it may have been appended: a retry could duplicate it); once the broker is back the producer
    connects again, and every record is in the log exactly as often as it was acknowledged."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create_topic(broker.bootstrap, 1)
        producer = BatchProducer(settings(broker.bootstrap, request_timeout_s=1.0, delivery_timeout_s=10.0))
        try:
            assert await producer.produce(topic, {0: [(None, b"before", ())]}) == {0: [0]}
            assert broker.proc is not None
            os.kill(broker.proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                stalled = (await producer.produce(topic, {0: [(None, b"stalled", ())]}))[0]
                waited = time.monotonic() - started
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            assert isinstance(stalled, ProduceFailed) and "may have been written" in stalled.message
            assert waited < 5  # the request timeout, not the delivery timeout: no retry
            after = await producer.produce(topic, {0: [(None, b"after", ())]})
        finally:
            await producer.close(5)
        assert isinstance(after[0], list)
        values = [value for _, _, value, _ in read_back(broker.bootstrap, topic, 0, after[0][0] + 1)]
        assert values[0] == b"before" and values[-1] == b"after" and values.count(b"stalled") <= 1
    finally:
        broker.kill()


async def test_kill_9_with_records_in_flight_loses_and_moves_nothing_acknowledged(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create_topic(broker.bootstrap, 1)
        producer = BatchProducer(settings(broker.bootstrap, delivery_timeout_s=15.0))
        acknowledged: dict[bytes, int] = {}
        failures: list[ProduceFailed] = []

        async def writer(name: int) -> None:
            for round_ in range(400):
                values = [b"w%d-%d-%d" % (name, round_, i) for i in range(20)]
                result = (await producer.produce(topic, {0: [(None, v, ()) for v in values]}))[0]
                if isinstance(result, ProduceFailed):
                    failures.append(result)
                else:
                    acknowledged.update(zip(values, result, strict=True))

        async def crash() -> None:
            while len(acknowledged) < 2000:
                await asyncio.sleep(0.01)
            broker.kill()
            await asyncio.sleep(0.5)
            await asyncio.to_thread(broker.restart)

        try:
            await asyncio.gather(crash(), *(writer(n) for n in range(4)))
        finally:
            await producer.close(5)
        assert len(acknowledged) > 2000 and all(f.message for f in failures)
        end = max(acknowledged.values()) + 1
        log = {offset: value for offset, _, value, _ in read_back(broker.bootstrap, topic, 0, end)}
        assert {v: o for v, o in acknowledged.items() if log.get(o) != v} == {}
    finally:
        broker.kill()


def test_what_librdkafka_must_do_itself_is_named() -> None:
    base = {"bootstrap.servers": "127.0.0.1:9092"}
    reasons = {
        "idempotence": {**base, "enable.idempotence": True},
        "transactions": {**base, "transactional.id": "t"},
        "acks=0": {**base, "acks": 0},
        "TLS": {**base, "security.protocol": "SSL"},
        "OAUTHBEARER": {**base, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"},
        "compression": {**base, "compression.type": "brotli"},
        "max.in.flight": {**base, "max.in.flight.requests.per.connection": 1},
        "compression.level": {**base, "compression.type": "gzip", "compression.level": 9},
    }
    for word, config in reasons.items():
        reason = settings_from_librdkafka(config)
        assert isinstance(reason, str) and word.split("=")[0].lower() in reason.lower(), (word, reason)
    mapped = settings_from_librdkafka(
        {
            **base,
            "acks": "1",
            "message.timeout.ms": 4000,
            "request.timeout.ms": 3000,
            "retry.backoff.ms": 50,
            "batch.size": 5000,
            "message.max.bytes": 9000,
            "client.id": "me",
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "PLAIN",
        }
    )
    assert isinstance(mapped, BatchProducerSettings)
    assert (mapped.acks, mapped.delivery_timeout_s, mapped.request_timeout_s, mapped.retry_backoff_s) == (
        1,
        4,
        3,
        0.05,
    )
    assert (mapped.max_batch_bytes, mapped.client_id, mapped.bootstrap) == (5000, "me", ("127.0.0.1:9092",))


async def test_records_it_cannot_encode_fail_their_call_and_no_other(bootstrap: str) -> None:
    topic = create_topic(bootstrap, 2)
    producer = BatchProducer(settings(bootstrap))
    try:
        bad, good = await asyncio.gather(
            producer.produce(topic, {0: [(None, "not bytes", ())]}),  # type: ignore[list-item]
            producer.produce(f"{topic}-none", {0: []}),
        )
        after = await producer.produce(topic, {1: [(None, b"fine", ())]})
    finally:
        await producer.close(5)
    assert isinstance(bad[0], ProduceFailed) and "TypeError" in bad[0].message
    assert good == {0: []} and after == {1: [0]}


async def test_values_alone_share_a_batch_with_records_and_keep_their_order(bootstrap: str) -> None:
    topic = create_topic(bootstrap, 1)
    producer = BatchProducer(settings(bootstrap, max_batch_bytes=4_000))
    try:
        records, values, large = await asyncio.gather(
            producer.produce(topic, {0: [(b"k", b"r0", ()), (None, b"r1", (("h", b"v"),))]}),
            producer.produce_values(topic, 0, [b"v0", b"v1", b"v2"]),
            producer.produce_values(topic, 0, [bytes([i]) * 1500 for i in range(4)]),  # split: over 4,000 B
        )
    finally:
        await producer.close(5)
    assert (records, values, large) == ({0: [0, 1]}, [2, 3, 4], [5, 6, 7, 8])
    assert batch_sizes(bootstrap, topic, 0)[0] == 5
    read = read_back(bootstrap, topic, 0, 9)
    assert [(key, value) for _, key, value, _ in read] == [
        (b"k", b"r0"),
        (None, b"r1"),
        *((None, v) for v in (b"v0", b"v1", b"v2")),
        *((None, bytes([i]) * 1500) for i in range(4)),
    ]


async def test_records_beyond_the_queue_bound_are_refused_at_once_and_counted_back(bootstrap: str) -> None:
    """queue.buffering.max.messages bounds the records waiting for answers, as librdkafka's queue does."""
    found = settings_from_librdkafka({"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 10})
    assert isinstance(found, BatchProducerSettings) and found.max_queued_records == 10
    topic = create_topic(bootstrap, 1)
    producer = BatchProducer(found)
    try:
        first, second = await asyncio.gather(
            producer.produce_values(topic, 0, [b"a"] * 8),
            producer.produce(topic, {0: [(None, b"b", ())] * 8}),
            return_exceptions=True,
        )
        assert first == list(range(8))
        assert isinstance(second, QueueFull) and "queue.buffering.max.messages=10" in second.message
        assert producer.queued_records == 0
        assert await producer.produce_values(topic, 0, [b"c"] * 10) == list(
            range(8, 18)
        )  # a lone call may fill it
    finally:
        await producer.close(5)


async def test_a_message_timeout_of_0_means_no_limit_as_in_librdkafka() -> None:
    """With no broker to reach, such a call keeps trying instead of failing at its first refusal."""
    found = settings_from_librdkafka(
        {"bootstrap.servers": f"127.0.0.1:{free_port()}", "message.timeout.ms": 0}
    )
    assert isinstance(found, BatchProducerSettings) and found.delivery_timeout_s == float("inf")
    producer = BatchProducer(found)
    call = asyncio.ensure_future(producer.produce_values("anything", 0, [b"a"]))
    done, _ = await asyncio.wait([call], timeout=1.5)
    assert not done  # still trying after 1.5 s (with the old mapping it failed at once)
    await producer.close(0.1)
    failure = await call
    assert isinstance(failure, ProduceFailed) and "stopped" in failure.message
