"""KIP-227 incremental fetch sessions, over the wire and with real clients."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sluice.broker.fetch_sessions import FetchSessionCache
from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, encode_batch

VERSION = 12  # topics by name; v13+ by id goes through the same session code


def fetch(
    client: WireClient,
    session_id: int,
    epoch: int,
    parts: dict[tuple[str, int], int],
    forgotten: dict[str, list[int]] | None = None,
    version: int = VERSION,
    wait_ms: int = 0,
    max_bytes: int = 1 << 20,
) -> Any:
    cls = client.request_class("Fetch")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in parts.items():
        by_topic.setdefault(topic, []).append(
            cls.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)
        )
    request = cls(
        max_wait_ms=wait_ms,
        min_bytes=1 if wait_ms else 0,
        session_id=session_id,
        session_epoch=epoch,
        topics=[cls.FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()],
        forgotten_topics_data=[
            cls.ForgottenTopic(topic=t, partitions=p) for t, p in (forgotten or {}).items()
        ],
    )
    return client.call("Fetch", version, request)


def listed(response: Any) -> set[tuple[str, int]]:
    return {(t.topic, p.partition_index) for t in response.responses for p in t.partitions}


def produce(client: WireClient, topic: str, partition: int, value: bytes) -> None:
    cls = client.request_class("Produce")
    batch = encode_batch([Record(0, 0, None, value, [])], base_timestamp=int(time.time() * 1000))
    request = cls(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            cls.TopicProduceData(
                name=topic, partition_data=[cls.PartitionProduceData(index=partition, records=batch)]
            )
        ],
    )
    assert client.call("Produce", 9, request).responses[0].partition_responses[0].error_code == 0


def test_incremental_fetches_carry_only_what_changed(broker: Any, topic_name: str) -> None:
    broker.create_topic(topic_name, 3)
    all_parts = {(topic_name, p): 0 for p in range(3)}
    with WireClient.connect(broker.bootstrap) as client:
        full = fetch(client, 0, 0, all_parts)
        assert full.error_code == ErrorCode.NONE and full.session_id != 0
        assert listed(full) == set(all_parts)  # a full fetch answers every partition
        session = full.session_id
        idle = fetch(client, session, 1, {})
        assert (idle.error_code, idle.session_id, listed(idle)) == (ErrorCode.NONE, session, set())
        produce(client, topic_name, 1, b"news")
        changed = fetch(client, session, 2, {})
        assert listed(changed) == {(topic_name, 1)}
        assert b"news" in bytes(changed.responses[0].partitions[0].records)
        # The client moves its position; nothing new after it, and the high watermark was already sent.
        assert listed(fetch(client, session, 3, {(topic_name, 1): 1})) == set()
        # Forgotten partitions leave the session: new data there is no longer answered.
        assert listed(fetch(client, session, 4, {}, forgotten={topic_name: [1]})) == set()
        produce(client, topic_name, 1, b"unheard")
        produce(client, topic_name, 2, b"heard")
        assert listed(fetch(client, session, 5, {})) == {(topic_name, 2)}
        # Epoch -1 closes the session: the id is gone afterwards.
        closing = fetch(client, session, -1, all_parts)
        assert closing.session_id == 0 and listed(closing) == set(all_parts)
        assert fetch(client, session, 6, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_waiting_incremental_fetch_wakes_on_new_data_and_backlogs_are_not_forgotten(
    broker: Any, topic_name: str
) -> None:
    broker.create_topic(topic_name, 2)
    with WireClient.connect(broker.bootstrap) as client, WireClient.connect(broker.bootstrap) as writer:
        for n in range(3):
            produce(writer, topic_name, 0, b"backlog-%d" % n + b"x" * 300)
        # Room for one batch per answer: partition 0 has more to give after each one.
        session = fetch(client, 0, 0, {(topic_name, 0): 0, (topic_name, 1): 0}, max_bytes=1).session_id
        second = fetch(client, session, 1, {(topic_name, 0): 1}, max_bytes=1)
        assert b"backlog-1" in bytes(second.responses[0].partitions[0].records)
        # Not named again and no new data: still behind, so still read (from the session's position).
        third = fetch(client, session, 2, {})
        assert b"backlog-1" in bytes(third.responses[0].partitions[0].records)
        last = fetch(client, session, 3, {(topic_name, 0): 2})
        assert b"backlog-2" in bytes(last.responses[0].partitions[0].records)
        assert listed(fetch(client, session, 4, {(topic_name, 0): 3})) == set()
        timer = threading.Timer(0.5, produce, (writer, topic_name, 1, b"wake"))
        started = time.monotonic()
        timer.start()
        try:
            woken = fetch(client, session, 5, {}, wait_ms=20_000)
        finally:
            timer.join()
        assert listed(woken) == {(topic_name, 1)}
        assert time.monotonic() - started < 15  # answered on the data, not at the end of the wait


def test_wrong_epoch_and_unknown_session_are_refused(broker: Any, topic_name: str) -> None:
    broker.create_topic(topic_name, 1)
    with WireClient.connect(broker.bootstrap) as client:
        session = fetch(client, 0, 0, {(topic_name, 0): 0}).session_id
        stale = fetch(client, session, 5, {})
        assert (stale.error_code, stale.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, [])
        assert fetch(client, session, 1, {}).error_code == ErrorCode.NONE  # a refused epoch changes nothing
        assert fetch(client, 987654, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # A new full fetch naming the old id replaces that session.
        renewed = fetch(client, session, 0, {(topic_name, 0): 0})
        assert renewed.session_id not in (0, session)
        assert fetch(client, session, 2, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def fetch_topic(name: str, partitions: int) -> Any:
    return SimpleNamespace(
        topic=name,
        topic_id=None,
        partitions=[
            SimpleNamespace(partition=p, fetch_offset=0, partition_max_bytes=1) for p in range(partitions)
        ],
    )


def test_the_cache_evicts_a_stale_session_then_only_for_a_larger_one() -> None:
    cache = FetchSessionCache(max_sessions=2, eviction_ms=1000)

    def opened(now_ms: int, size: int) -> Any:
        session = cache.create(now_ms, size)
        if session is not None:
            cache.update(session, [fetch_topic("t", size)], (), False, lambda _: None)
        return session

    small, big = opened(0, 1), opened(0, 5)
    assert small is not None and big is not None
    assert opened(500, 1) is None  # full, nothing stale, not larger than the smallest: sessionless
    newcomer = opened(500, 3)  # larger than the smallest session: it takes that one's place
    assert newcomer is not None and cache.get(small.id) is None and cache.get(big.id) is not None
    big.last_used_ms = 1500  # used since; the newcomer was not
    assert opened(2000, 1) is not None  # the one unused for over eviction_ms goes first
    assert cache.get(newcomer.id) is None and cache.get(big.id) is not None
    # New data reaches only the sessions still holding the partition.
    assert cache.touch(("t", 4)) == [("", big.id)]


@pytest.mark.parametrize("partitions", [40])
def test_a_real_consumer_reads_everything_through_sessions(
    broker: Any, topic_name: str, partitions: int
) -> None:
    broker.create_topic(topic_name, partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    expected = set()
    for n in range(400):
        value = f"m{n}".encode()
        producer.produce(topic_name, value, partition=n % partitions)
        expected.add(value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic_name,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(partitions)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while seen != expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None
                seen.add(message.value() or b"")
            if len(seen) == 200:
                break
        # Data arriving while the consumer idles in its session reaches it too.
        for n in range(400, 440):
            value = f"m{n}".encode()
            producer.produce(topic_name, value, partition=n % partitions)
            expected.add(value)
        assert producer.flush(30) == 0
        while seen != expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                assert message.error() is None
                seen.add(message.value() or b"")
    finally:
        consumer.close()
    assert seen == expected
