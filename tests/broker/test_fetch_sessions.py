"""KIP-227 incremental fetch sessions, over the wire and with real clients."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sluice.broker.fetch_sessions import FetchSessionCache
from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, encode_batch

VERSION = 12  # topics by name; v13+ by id goes through the same session code


def fetch(client: WireClient, session_id: int, epoch: int, parts: dict[tuple[str, int], int],
          forgotten: dict[str, list[int]] | None = None, version: int = VERSION) -> Any:
    cls = client.request_class("Fetch")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in parts.items():
        by_topic.setdefault(topic, []).append(
            cls.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20))
    request = cls(
        max_wait_ms=0, min_bytes=0, session_id=session_id, session_epoch=epoch,
        topics=[cls.FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()],
        forgotten_topics_data=[cls.ForgottenTopic(topic=t, partitions=p) for t, p in (forgotten or {}).items()],
    )
    return client.call("Fetch", version, request)


def listed(response: Any) -> set[tuple[str, int]]:
    return {(t.topic, p.partition_index) for t in response.responses for p in t.partitions}


def produce(client: WireClient, topic: str, partition: int, value: bytes) -> None:
    cls = client.request_class("Produce")
    batch = encode_batch([Record(0, 0, None, value, [])], base_timestamp=int(time.time() * 1000))
    request = cls(acks=-1, timeout_ms=10_000, topic_data=[cls.TopicProduceData(
        name=topic, partition_data=[cls.PartitionProduceData(index=partition, records=batch)])])
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


def test_the_cache_evicts_a_stale_session_then_only_for_a_larger_one() -> None:
    cache = FetchSessionCache(max_sessions=2, eviction_ms=1000)
    small = cache.create(0, 1)
    big = cache.create(0, 5)
    assert small is not None and big is not None
    small.topics["t"] = type("T", (), {"partitions": [object()]})()  # sized by its partitions
    big.topics["t"] = type("T", (), {"partitions": [object()] * 5})()
    assert cache.create(500, 1) is None  # full, nothing stale, not larger than the smallest: sessionless
    newcomer = cache.create(500, 3)  # larger than the smallest session: it takes that one's place
    assert newcomer is not None and cache.get(small.id) is None and cache.get(big.id) is not None
    big.last_used_ms = 1500  # used since; the newcomer was not
    assert cache.create(2000, 1) is not None  # the one unused for over eviction_ms goes first
    assert cache.get(newcomer.id) is None and cache.get(big.id) is not None


@pytest.mark.parametrize("partitions", [40])
def test_a_real_consumer_reads_everything_through_sessions(broker: Any, topic_name: str, partitions: int) -> None:
    broker.create_topic(topic_name, partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    expected = set()
    for n in range(400):
        value = f"m{n}".encode()
        producer.produce(topic_name, value, partition=n % partitions)
        expected.add(value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name, "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
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
