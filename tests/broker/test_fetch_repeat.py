"""A sessionless Fetch asked again (librdkafka's idle consumer) is answered from the answer it got last time,
and that answer is never stale: new data, a moved log start or a deleted topic are answered at once."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st
from tests.broker.without_sockets import Connection, dispatch

from sluice.broker.api import Respond
from sluice.broker.config import BrokerConfig
from sluice.broker.dispatch import Dispatched, build_dispatcher
from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.codec import Preencoded
from sluice.protocol.fetch_shape import fetch_shape
from sluice.protocol.headers import request_header
from sluice.protocol.messages import APIS_BY_NAME, request_codecs, response_codecs
from sluice.protocol.primitives import uvarint_bytes
from sluice.protocol.records import Record, encode_batch
from sluice.server.app import build_broker

FETCH = request_codecs(APIS_BY_NAME["Fetch"].key)
Part = tuple[str, int, int]  # topic, partition, fetch offset


def fetch_request(
    parts: list[Part], wait_ms: int = 500, epoch: int = -1, by_id: dict[str, Any] | None = None
) -> Any:
    """A sessionless fetch naming `parts` in that order (a topic named again where the list returns to it)."""
    cls = FETCH.cls
    topics: list[Any] = []
    for topic, partition, offset in parts:
        if not topics or topics[-1].topic != topic:
            topic_id = by_id[topic] if by_id else None
            topics.append(cls.FetchTopic(topic=topic, topic_id=topic_id, partitions=[]))
        topics[-1].partitions.append(
            cls.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)
        )
    return cls(max_wait_ms=wait_ms, min_bytes=1, session_id=0, session_epoch=epoch, topics=topics)


def rotated(parts: list[Part], by: int) -> list[Part]:
    return parts[by:] + parts[:by]


def shape_of(parts: list[Part], version: int = 12, **fields: Any) -> Any:
    request = fetch_request(parts, **fields)
    return fetch_shape(FETCH[version].encode(request), version)


PARTS: list[Part] = [(t, p, 0) for t in ("a", "b", "c") for p in range(4)]


def test_a_rotated_repeat_has_the_same_shape_and_any_change_a_different_one() -> None:
    shape = shape_of(PARTS)
    assert shape is not None
    for by in range(len(PARTS)):  # every start, including ones inside a topic (it is then named twice)
        assert shape_of(rotated(PARTS, by)) == shape
    moved = [(t, p, 7 if (t, p) == ("b", 2) else o) for t, p, o in PARTS]
    assert shape_of(moved) != shape
    assert shape_of(PARTS[:-1]) != shape
    assert shape_of(PARTS, wait_ms=100) != shape
    assert shape_of(PARTS, epoch=0) != shape


@pytest.mark.parametrize("version", [4, 5, 7, 9, 11, 12, 13, 15, 18])
def test_every_version_from_4_reads_the_same_way(version: int) -> None:
    by_id = {t: uuid.uuid5(uuid.NAMESPACE_DNS, t) for t in "abc"} if version >= 13 else None
    shape = fetch_shape(FETCH[version].encode(fetch_request(PARTS, by_id=by_id)), version)
    assert shape is not None
    for by in (1, 5, 11):
        assert (
            fetch_shape(FETCH[version].encode(fetch_request(rotated(PARTS, by), by_id=by_id)), version)
            == shape
        )
    moved = [(t, p, 7 if (t, p) == ("c", 3) else o) for t, p, o in PARTS]
    assert fetch_shape(FETCH[version].encode(fetch_request(moved, by_id=by_id)), version) != shape


def test_shapes_are_read_only_where_every_partition_entry_has_one_size() -> None:
    body = FETCH[12].encode(fetch_request(PARTS))
    assert fetch_shape(FETCH[3].encode(fetch_request(PARTS)), 3) is None  # before v4: decoded as usual
    for version, encoded in ((12, body), (9, FETCH[9].encode(fetch_request(PARTS)))):
        whole = fetch_shape(encoded, version)
        for cut in range(len(encoded)):  # a request cut short never passes for the whole one (nor raises)
            assert fetch_shape(encoded[:cut], version) != whole
    tagged = fetch_request(PARTS)
    tagged.topics[0].partitions[1].replica_directory_id = uuid.uuid4()
    assert fetch_shape(FETCH[17].encode(tagged), 17) is None  # a partition with a tagged field


@given(
    st.sampled_from([4, 9, 12]),
    st.lists(st.tuples(st.sampled_from("xyz"), st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=8),
    st.lists(st.tuples(st.sampled_from("xyz"), st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=8),
)
def test_equal_shapes_mean_the_same_partitions_with_the_same_offsets(
    version: int, one: list[Part], other: list[Part]
) -> None:
    if shape_of(one, version) == shape_of(other, version):
        assert sorted(one) == sorted(other)


# ----- the request pipeline, in process -----


@pytest.mark.parametrize("version", [9, 12])
def test_the_same_fetch_again_waits_on_one_key_and_gets_the_kept_bytes_until_data_comes(version: int) -> None:
    broker = build_broker(BrokerConfig(data_dir=None, auto_create_topics=False, fsync_before_ack=False))
    broker.create_topic("t", 3, {})
    dispatcher, connection = build_dispatcher(broker), Connection()
    parts = [("t", p, 0) for p in range(3)]

    def ask(order: list[Part]) -> Any:
        body = request_header(APIS_BY_NAME["Fetch"].key, version, 1, "repeat", version >= 12)
        dispatched, _ = dispatch(dispatcher, body + FETCH[version].encode(fetch_request(order)), connection, 1_000)
        assert isinstance(dispatched, Dispatched)
        return dispatched.outcome

    first = ask(parts)
    assert len(first.watch) == 3  # not kept yet: waits on each partition
    kept = first.retry(2_000, True)
    assert isinstance(kept, Preencoded)
    answer = response_codecs(APIS_BY_NAME["Fetch"].key)[version].decode(b"".join(kept.parts))[0]
    assert [(p.partition_index, p.high_watermark, p.records) for p in answer.responses[0].partitions] == [
        (0, 0, b""), (1, 0, b""), (2, 0, b"")]  # fmt: skip
    again = ask(rotated(parts, 1))
    assert len(again.watch) == 1  # the kept answer's hidden session
    assert again.retry(3_000, True) is kept
    # New data wakes the waiting fetch and is answered; the kept answer is gone.
    waiting = ask(rotated(parts, 2))
    batch = encode_batch([Record(0, 0, None, b"news", [])], base_timestamp=1)
    assert broker.append("t", 1, batch, 3_050).error == ErrorCode.NONE
    woken = waiting.retry(3_100, False)
    assert woken is not None and woken is not kept
    records = {p.partition_index: bytes(p.records) for p in woken.responses[0].partitions}
    assert b"news" in records[1] and records[0] == records[2] == b""
    # The same fetch again reads the record at once, as any fetch would.
    again = ask(parts)
    assert isinstance(again, Respond) and b"news" in bytes(again.response.responses[0].partitions[1].records)


# ----- over the wire, against the shared broker -----


def wire_fetch(
    client: WireClient, parts: list[Part], version: int, by_id: dict[str, Any] | None, wait_ms: int
) -> Any:
    return client.call("Fetch", version, fetch_request(parts, wait_ms=wait_ms, by_id=by_id))


def answered(response: Any) -> dict[int, tuple[int, int, int, bytes]]:
    """An answer about one topic: partition -> (error, high watermark, log start offset, records)."""
    return {
        p.partition_index: (p.error_code, p.high_watermark, p.log_start_offset, bytes(p.records or b""))
        for topic in response.responses
        for p in topic.partitions
    }


@pytest.mark.parametrize("version", [12, 16])
def test_a_repeated_idle_fetch_is_never_stale(broker: Any, topic_name: str, version: int) -> None:
    broker.create_topic(topic_name, 4)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for n in range(3):
        producer.produce(topic_name, b"old-%d" % n, partition=0)
    assert producer.flush(30) == 0
    with WireClient.connect(broker.bootstrap) as client:
        by_id = None
        if version >= 13:
            meta = client.call("Metadata", 12, client.request_class("Metadata")(
                topics=[client.request_class("Metadata").MetadataRequestTopic(name=topic_name)]))  # fmt: skip
            by_id = {topic_name: meta.topics[0].topic_id}
        parts = [(topic_name, 0, 3)] + [(topic_name, p, 0) for p in (1, 2, 3)]
        for by in range(6):  # idle, rotated as librdkafka does: kept after the first
            idle = answered(wire_fetch(client, rotated(parts, by % 4), version, by_id, 50))
            assert idle == {0: (0, 3, 0, b""), 1: (0, 0, 0, b""), 2: (0, 0, 0, b""), 3: (0, 0, 0, b"")}
        # A log start moved by DeleteRecords (the high watermark did not move) is told at once.
        delete = client.request_class("DeleteRecords")
        moved = client.call("DeleteRecords", 2, delete(timeout_ms=10_000, topics=[delete.DeleteRecordsTopic(
            name=topic_name, partitions=[delete.DeleteRecordsPartition(partition_index=0, offset=2)])]))  # fmt: skip
        assert moved.topics[0].partitions[0].error_code == 0
        assert answered(wire_fetch(client, parts, version, by_id, 50))[0] == (0, 3, 2, b"")
        # New data while a repeat waits: answered when it comes, not at the end of the wait.
        wire_fetch(client, parts, version, by_id, 50)  # kept again
        timer = threading.Timer(
            0.5, lambda: (producer.produce(topic_name, b"new", partition=2), producer.flush(30))
        )
        started = time.monotonic()
        timer.start()
        try:
            woken = answered(wire_fetch(client, rotated(parts, 1), version, by_id, 20_000))
        finally:
            timer.join()
        assert b"new" in woken[2][3] and woken[2][1] == 1
        assert time.monotonic() - started < 15
        # A deleted topic: the repeat is told it is gone.
        parts = [(topic_name, 0, 3), (topic_name, 1, 0), (topic_name, 2, 1), (topic_name, 3, 0)]
        wire_fetch(client, parts, version, by_id, 50)
        wire_fetch(client, parts, version, by_id, 50)
        drop = client.request_class("DeleteTopics")
        client.call("DeleteTopics", 4, drop(topic_names=[topic_name], timeout_ms=10_000))
        gone = answered(wire_fetch(client, rotated(parts, 2), version, by_id, 50))
        unknown = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert {error for error, *_ in gone.values()} == {unknown}


def test_an_idle_confluent_consumer_still_gets_every_record(broker: Any, topic_name: str) -> None:
    broker.create_topic(topic_name, 6)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name,
                         "fetch.wait.max.ms": 100, "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(6)])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    try:
        got: list[tuple[int, int, bytes]] = []
        for round_ in range(3):
            deadline = time.monotonic() + 0.6  # several idle fetches: the kept answer is in use
            while time.monotonic() < deadline:
                assert consumer.poll(0.1) is None
            producer.produce(topic_name, b"round-%d" % round_, partition=round_ * 2)
            assert producer.flush(30) == 0
            deadline = time.monotonic() + 30
            while len(got) <= round_ and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.append((message.partition(), message.offset(), message.value()))
        assert got == [(0, 0, b"round-0"), (2, 0, b"round-1"), (4, 0, b"round-2")]
    finally:
        consumer.close()


def test_an_idle_aiokafka_consumer_still_gets_every_record(broker: Any, topic_name: str) -> None:
    """aiokafka sends sessionless fetches of the older, non-flexible versions: kept answers serve it too."""
    broker.create_topic(topic_name, 4)

    async def run() -> list[tuple[int, int, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=100)
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        await consumer.start()
        await producer.start()
        try:
            consumer.assign([AioPartition(topic_name, p) for p in range(4)])
            for p in range(4):
                consumer.seek(AioPartition(topic_name, p), 0)
            got: list[tuple[int, int, bytes]] = []
            for round_ in range(3):
                assert await consumer.getmany(timeout_ms=600) == {}  # idle fetches: the kept answer in use
                await producer.send_and_wait(topic_name, b"round-%d" % round_, partition=round_)
                async with asyncio.timeout(30):
                    while len(got) <= round_:
                        for records in (await consumer.getmany(timeout_ms=500)).values():
                            got.extend((r.partition, r.offset, r.value) for r in records)
            return got
        finally:
            await producer.stop()
            await consumer.stop()

    assert asyncio.run(run()) == [(0, 0, b"round-0"), (1, 0, b"round-1"), (2, 0, b"round-2")]


def test_clients_that_go_away_mid_wait_or_send_a_damaged_repeat_leave_the_broker_serving(
    broker: Any, topic_name: str
) -> None:
    broker.create_topic(topic_name, 3)
    parts = [(topic_name, p, 0) for p in range(3)]
    for damage in ("hang up", "cut short", "flipped count"):
        with WireClient.connect(broker.bootstrap) as client:
            for by in range(3):  # kept from the second on
                assert answered(wire_fetch(client, rotated(parts, by), 12, None, 50))[0] == (0, 0, 0, b"")
            body = client.encode_request("Fetch", 12, fetch_request(rotated(parts, 1), wait_ms=20_000))
            if damage == "hang up":
                client.send_frame(body)  # parked on the kept answer, then the client is gone
            elif damage == "cut short":
                client.send_frame(body[:-7])
            else:  # the topic array's length now promises more topics than follow
                name = topic_name.encode()
                start = body.index(uvarint_bytes(len(name) + 1) + name) - 1
                assert body[start] == 2  # one topic (compact array: length + 1)
                client.send_frame(body[:start] + bytes([7]) + body[start + 1 :])
                with pytest.raises(OSError):
                    client.recv_frame()  # not answered: the broker closes a connection sending a malformed request
    # The broker still answers, and new data reaches a new reader of the same partitions at once.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce(topic_name, b"after", partition=1)
    assert producer.flush(30) == 0
    with WireClient.connect(broker.bootstrap) as client:
        for by in range(3):
            got = answered(wire_fetch(client, rotated(parts, by), 12, None, 50))
            assert b"after" in got[1][3] and got[0] == got[2] == (0, 0, 0, b"")
