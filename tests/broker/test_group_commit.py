"""The group commit seen from clients (sluice.server.group_commit): a pipelining connection's window shares
one fsync even when it arrives in pieces, a window that never fills is still answered, a client that
hangs up while the flush waits for it leaves the others served, and fsyncs on the fsync thread instead of
the event loop keep everything acknowledged through kill -9."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.metrics.test_broker_metrics import scrape

from sluice.broker.config import BrokerConfig
from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches
from sluice.server import group_commit
from sluice.server.app import build_broker
from sluice.server.group_commit import GroupCommit
from sluice.testing import BrokerProcess, create_topic

FSYNCS = "sluice_fsync_duration_seconds_count"


@pytest.fixture(scope="module")
def metered_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("group-commit"), admin=True).start()
    yield proc
    proc.stop()


def produce_frame(client: WireClient, topic: str, value: bytes) -> bytes:
    """One acks=1 Produce v9 of one record, framed, ready to write to the socket."""
    cls = client.request_class("Produce")
    records = encode_batch([Record(0, 0, None, value, [])], base_timestamp=int(time.time() * 1000))
    request = cls(
        acks=1,
        timeout_ms=10_000,
        topic_data=[
            cls.TopicProduceData(name=topic, partition_data=[cls.PartitionProduceData(index=0, records=records)])
        ],
    )
    body = client.encode_request("Produce", 9, request)
    return struct.pack(">i", len(body)) + body


def fsyncs(proc: BrokerProcess) -> float:
    assert proc.admin_url is not None
    return scrape(proc.admin_url)[FSYNCS][()]


def read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-read", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < count and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, 1) if m.error() is None]
    consumer.close()
    return values


class _Connection:
    """What the group commit asks of a connection (sluice.server.connection.KafkaConnection)."""

    closed = False

    def __init__(self) -> None:
        self.durable_window = 1
        self.durable_released_at = 0.0
        self.answers: list[int] = []

    def abort(self, reason: str) -> None:
        raise AssertionError(reason)

    def cork(self) -> None:
        pass

    def uncork(self) -> None:
        pass


class _Slot:
    def __init__(self, connection: _Connection) -> None:
        self.connection = connection

    def fill(self, response: Any, version: int | None = None) -> None:
        self.connection.answers.append(response)


def test_a_window_that_comes_in_pieces_shares_one_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, with the real broker and group commit on a real disk, the loop's iterations made
    explicit: a connection had 4 answers released together; its next 4 requests come 2 in one iteration
    and 2 in the next (librdkafka writes a request per answer it reads). The flush polls once more while
    polls bring requests, so the 4 share one fsync; the flush after a poll that brought nothing learns
    the smaller window, and a connection answered long ago is not waited for at all."""
    # Recent enough on a loaded machine too: a real client answers in well under a millisecond.
    monkeypatch.setattr(group_commit, "WINDOW_RECENT_S", 60.0)
    # Every flush on the loop, however slow a loaded machine's fsyncs: the loop's iterations then are the
    # whole story (a flush on the fsync thread ends whenever its fsync does).
    broker = build_broker(BrokerConfig(data_dir=tmp_path, auto_create_topics=False, fsync_on_loop_below_ms=1000))
    broker.create_topic("t", 1, {})
    commit = GroupCommit(broker)
    connection = _Connection()
    produced = 0

    def request() -> None:
        nonlocal produced
        batch = encode_batch([Record(0, 0, None, b"v%d" % produced, [])], base_timestamp=1)
        assert broker.append("t", 0, batch, 1_000).error == ErrorCode.NONE
        commit.wait(_Slot(connection), produced)  # type: ignore[arg-type]
        produced += 1

    def flushes() -> float:
        return sum(broker.metrics.fsync.counts)

    async def iterations(*steps: Callable[[], object]) -> None:
        """Each step in a loop iteration of its own, then enough iterations for the flush to end."""
        for step in steps:
            step()
            await asyncio.sleep(0)  # the rest of this task runs in the next iteration
        for _ in range(10):
            await asyncio.sleep(0)

    async def scenario() -> None:
        await iterations(lambda: [request() for _ in range(4)])
        assert (connection.answers, connection.durable_window, flushes()) == ([0, 1, 2, 3], 4, 1)
        await iterations(lambda: [request() for _ in range(2)], lambda: [request() for _ in range(2)])
        assert connection.answers == list(range(8)) and flushes() == 2
        await iterations(lambda: [request() for _ in range(3)])  # the rest never comes
        assert connection.answers == list(range(11)) and flushes() == 3
        assert connection.durable_window == 3
        monkeypatch.setattr(group_commit, "WINDOW_RECENT_S", 0.0)  # answered long ago: a new group is its own
        await iterations(lambda: [request() for _ in range(2)], lambda: [request() for _ in range(2)])
        assert connection.answers == list(range(15)) and flushes() == 5

    try:
        asyncio.run(scenario())
    finally:
        commit.close()
        broker.close()
    assert read_back(tmp_path) == [b"v%d" % n for n in range(15)]


def test_clients_that_keep_trickling_in_do_not_hold_the_flush_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty pipelining connections with windows they never fill, one request at a time, so that every poll
    brings a request and some window is always unfilled: the flush still starts once WINDOW_WAIT_S has
    passed (10 ms here), long before the stream of 100 ms ends."""
    monkeypatch.setattr(group_commit, "WINDOW_RECENT_S", 60.0)
    monkeypatch.setattr(group_commit, "WINDOW_WAIT_S", 0.01)
    broker = build_broker(BrokerConfig(data_dir=tmp_path, auto_create_topics=False))
    broker.create_topic("t", 1, {})
    commit = GroupCommit(broker)
    connections = [_Connection() for _ in range(50)]
    for connection in connections:
        connection.durable_window, connection.durable_released_at = 1_000_000, time.perf_counter()

    async def stream() -> float:
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < 0.1:
            batch = encode_batch([Record(0, 0, None, b"s%d" % n, [])], base_timestamp=1)
            assert broker.append("t", 0, batch, 1_000).error == ErrorCode.NONE
            commit.wait(_Slot(connections[n % 50]), n)  # type: ignore[arg-type]
            n += 1
            if any(c.answers for c in connections):
                return time.monotonic() - started
            await asyncio.sleep(0)
        return time.monotonic() - started

    try:
        first_answer_after = asyncio.run(stream())
    finally:
        commit.close()
        broker.close()
    assert first_answer_after < 0.09, first_answer_after


@pytest.mark.parametrize("below_ms", [0.5, 0.0])
def test_fsync_on_loop_below_ms_says_where_the_fsync_runs(tmp_path: Path, below_ms: float) -> None:
    """The first flush runs on the loop with the default (no flush has been slow yet); with 0 every flush
    runs on the fsync thread. Either way the answer comes once the record is on disk."""
    broker = build_broker(
        BrokerConfig(data_dir=tmp_path, auto_create_topics=False, fsync_on_loop_below_ms=below_ms)
    )
    broker.create_topic("t", 1, {})
    commit = GroupCommit(broker)
    connection = _Connection()

    async def one() -> None:
        batch = encode_batch([Record(0, 0, None, b"one", [])], base_timestamp=1)
        assert broker.append("t", 0, batch, 1_000).error == ErrorCode.NONE
        commit.wait(_Slot(connection), "answer")  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while not connection.answers and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    try:
        asyncio.run(one())
        assert connection.answers == ["answer"] and sum(broker.metrics.fsync.counts) == 1
        assert (commit._thread is not None) == (below_ms == 0)
    finally:
        commit.close()
        broker.close()
    assert read_back(tmp_path) == [b"one"]


def read_back(data_dir: Path) -> list[bytes | None]:
    """Partition t-0's values, read by a broker started afresh on `data_dir`: what the disk holds."""
    broker = build_broker(BrokerConfig(data_dir=data_dir, auto_create_topics=False))
    try:
        state = broker.partition("t", 0)
        data = state.log.read(0, 1 << 20)
        return [record.value for pos, _ in iter_batches(data) for record in decode_batch(data, pos)[1]]
    finally:
        broker.close()


def test_a_window_that_never_fills_is_still_answered(metered_broker: BrokerProcess) -> None:
    """After a window of 5, a lone request (the producer had nothing more to send) is answered without
    the rest ever coming, well within a second; so are the lone requests after it."""
    topic = create_topic(metered_broker.bootstrap, partitions=1, prefix="lone")
    with WireClient.connect(metered_broker.bootstrap) as client:
        client.sock.sendall(b"".join(produce_frame(client, topic, b"w%d" % n) for n in range(5)))
        for _ in range(5):
            client.recv_frame()
        waited = []
        for n in range(5, 10):
            started = time.monotonic()
            client.sock.sendall(produce_frame(client, topic, b"w%d" % n))
            client.recv_frame()
            waited.append(time.monotonic() - started)
    assert max(waited) < 1.0, waited
    assert read_values(metered_broker.bootstrap, topic, 10) == [b"w%d" % n for n in range(10)]


def test_a_client_that_hangs_up_while_the_flush_waits_for_it(metered_broker: BrokerProcess) -> None:
    """A pipelining client sends part of its next window and hangs up. Its records are appended and
    made durable all the same (readers see them), and another client's produce is answered at once."""
    topic = create_topic(metered_broker.bootstrap, partitions=1, prefix="gone")
    with WireClient.connect(metered_broker.bootstrap) as client:
        client.sock.sendall(b"".join(produce_frame(client, topic, b"g%d" % n) for n in range(5)))
        for _ in range(5):
            client.recv_frame()
        client.sock.sendall(b"".join(produce_frame(client, topic, b"g%d" % n) for n in range(5, 7)))
        client.sock.shutdown(socket.SHUT_RDWR)
    with WireClient.connect(metered_broker.bootstrap) as other:
        started = time.monotonic()
        other.sock.sendall(produce_frame(other, topic, b"after"))
        other.recv_frame()
        assert time.monotonic() - started < 5
    assert read_values(metered_broker.bootstrap, topic, 8) == [b"g%d" % n for n in range(7)] + [b"after"]


def test_fsyncs_on_the_fsync_thread_survive_kill_9(tmp_path: Path) -> None:
    """`fsync_on_loop_below_ms: 0` keeps every fsync on the fsync thread: a pipelining acks=all producer
    streams, the broker is killed with -9 twice, and every acknowledged record is read back at its offset
    after the restarts, with the offsets dense."""
    config = tmp_path / "broker.yaml"
    config.write_text("fsync_on_loop_below_ms: 0\n")
    proc = BrokerProcess(tmp_path / "data", config=config).start()
    topic = create_topic(proc.bootstrap, partitions=1, prefix="thread")
    acked: dict[int, bytes] = {}

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            assert msg.offset() not in acked, f"offset {msg.offset()} acknowledged twice"
            acked[msg.offset()] = msg.value()

    def stream(producer: Producer, stop: threading.Event, round_no: int) -> None:
        n = 0
        while not stop.is_set():
            try:
                producer.produce(topic, value=b"r%d-%d" % (round_no, n), on_delivery=on_delivery)
                n += 1
            except BufferError:
                pass
            producer.poll(0.0002)

    try:
        for round_no in range(2):
            producer = Producer({
                "bootstrap.servers": proc.bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 1,
                "max.in.flight.requests.per.connection": 5, "message.timeout.ms": 3000,
            })
            stop = threading.Event()
            before = len(acked)
            thread = threading.Thread(target=stream, args=(producer, stop, round_no))
            thread.start()
            deadline = time.monotonic() + 30
            while len(acked) < before + 300 and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.kill()
            stop.set()
            thread.join()
            producer.flush(5)
            assert len(acked) >= before + 300, f"round {round_no} acknowledged {len(acked) - before}"
            proc.restart()
        values = read_values(proc.bootstrap, topic, max(acked) + 1)
    finally:
        proc.stop()
    assert all(values[offset] == value for offset, value in acked.items())
    assert len(values) >= max(acked) + 1
