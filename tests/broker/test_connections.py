"""Connection limits (issues #15 and #42): idle connections are closed after connections_max_idle_ms, a client
that sends part of a request and stalls is cut off after partial_request_timeout_ms, idle connections cost
a few KiB each, not a 64 KiB receive buffer; max_connections, max_connections_per_ip and its overrides
refuse what exceeds them (logged once per interval); at the open-file bound segment files yield
descriptors and the quietest idle connection makes room, so a new client still gets in."""

from __future__ import annotations

import resource
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sluice.testing import BrokerProcess, create_topic


@pytest.fixture
def strict_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    config = tmp_path / "broker.yaml"
    config.write_text(
        "connections_max_idle_ms: 600\npartial_request_timeout_ms: 600\nmax_connections: 3000\n"
    )
    proc = BrokerProcess(None, config=config).start()
    yield proc
    proc.stop()


def api_versions(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)
    return struct.pack(">i", len(body)) + body


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_idle_connection_is_closed_and_a_busy_one_is_not(strict_broker: BrokerProcess) -> None:
    idle = socket.create_connection(("127.0.0.1", strict_broker.port))
    busy = socket.create_connection(("127.0.0.1", strict_broker.port))
    started = time.monotonic()
    for n in range(8):  # 2 s of one request every 250 ms: never idle for 600 ms
        busy.sendall(api_versions(n))
        assert busy.recv(4)
        busy.recv(65536)
        time.sleep(0.25)
    assert closed_within(idle, 0.1), "the idle connection outlived connections_max_idle_ms"
    assert time.monotonic() - started >= 0.6
    busy.sendall(api_versions(99))
    assert busy.recv(4), "the busy connection was closed"
    assert strict_broker.logged("connections_max_idle_ms")
    # A real client reconnects after an idle close and carries on. librdkafka, finding every connection closed,
    # forgets the brokers it learned and starts again from the bootstrap list; a metadata request it still
    # counts as under way holds its refresh for a few seconds (up to 8 s seen on a quiet machine), while each
    # new bootstrap connection idles 600 ms and is closed again. The bound leaves room for that under load.
    producer = Producer({"bootstrap.servers": strict_broker.bootstrap})
    for round_ in range(2):
        if round_:
            time.sleep(1.0)
        producer.produce("after-idle", b"x")
        assert producer.flush(30) == 0


def test_half_a_request_then_silence_is_cut_off(strict_broker: BrokerProcess) -> None:
    sock = socket.create_connection(("127.0.0.1", strict_broker.port))
    frame = api_versions(1)
    sock.sendall(frame[:7])  # the size prefix and three bytes of a 10-byte request
    started = time.monotonic()
    assert closed_within(sock, 5)
    assert 0.5 <= time.monotonic() - started < 4
    assert strict_broker.logged("sent part of a request")
    # Requests that claim 100 MB and send 4 KiB hold what they sent until they are cut off, not 100 MB.
    before = strict_broker.rss_bytes()
    stalled = [socket.create_connection(("127.0.0.1", strict_broker.port)) for _ in range(50)]
    for n, sock in enumerate(stalled):
        sock.sendall(struct.pack(">ihhi", 100 * 1024 * 1024, 0, 9, n) + b"x" * 4096)
    time.sleep(0.3)
    assert strict_broker.rss_bytes() - before < 30 * 1024 * 1024
    assert all(closed_within(sock, 5) for sock in stalled)


def test_idle_connections_cost_a_few_kib_each(strict_broker: BrokerProcess) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = 1000
    if hard < count + 100:
        pytest.skip(f"the descriptor limit ({hard}) is below {count} connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, count + 100), hard))
    config = Path(strict_broker.config or "")
    config.write_text("connections_max_idle_ms: 600000\nmax_connections: 3000\n")
    strict_broker.stop()
    strict_broker.restart()
    time.sleep(0.5)
    before = strict_broker.rss_bytes()
    sockets = [socket.create_connection(("127.0.0.1", strict_broker.port)) for _ in range(count)]
    try:
        for n, sock in enumerate(sockets):  # each asks one thing, then stays quiet
            sock.sendall(api_versions(n))
        for sock in sockets:
            sock.recv(65536)
        time.sleep(2.5)  # a sweep gives quiet connections' receive buffers back
        per_connection = (strict_broker.rss_bytes() - before) / count
        assert per_connection < 16 * 1024, f"{per_connection / 1024:.1f} KiB per idle connection"
    finally:
        for sock in sockets:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def ask(sock: socket.socket, correlation_id: int) -> int:
    """One ApiVersions round trip; the correlation id of the answer."""
    sock.settimeout(5)
    sock.sendall(api_versions(correlation_id))
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    return struct.unpack(">i", data[4:8])[0]


def test_connections_past_max_connections_are_refused_and_the_others_keep_working(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("max_connections: 3\n")
    proc = BrokerProcess(None, config=config).start()
    try:
        time.sleep(0.3)  # BrokerProcess's own readiness probe has gone
        held = [socket.create_connection(("127.0.0.1", proc.port)) for _ in range(3)]
        assert [ask(sock, n) for n, sock in enumerate(held)] == [0, 1, 2]
        extra = socket.create_connection(("127.0.0.1", proc.port))
        assert closed_within(extra, 5), "the fourth connection was kept open"
        assert proc.logged("refusing connection")
        assert ask(held[0], 10) == 10
        held.pop().close()  # a slot frees up: a new connection is served again
        time.sleep(0.3)
        again = socket.create_connection(("127.0.0.1", proc.port))
        assert ask(again, 11) == 11
        for sock in [*held, extra, again]:
            sock.close()
    finally:
        proc.stop()


def metric(proc: BrokerProcess, line_start: str) -> float:
    """The value of the first /metrics line that starts with `line_start`."""
    assert proc.admin_url is not None
    with urllib.request.urlopen(proc.admin_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return float(next(line for line in text.splitlines() if line.startswith(line_start)).rsplit(" ", 1)[1])


def wait_for_metric(proc: BrokerProcess, line_start: str, value: float, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while (seen := metric(proc, line_start)) != value:
        assert time.monotonic() < deadline, f"{line_start.strip()} is {seen}, not {value}"
        time.sleep(0.05)


def test_per_address_limits_and_overrides_refuse_the_rest_logged_once(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("max_connections_per_ip: 2\nmax_connections_per_ip_overrides: '127.0.0.2:4'\n")
    proc = BrokerProcess(None, config=config, admin=True).start()
    try:
        time.sleep(0.3)  # BrokerProcess's own readiness probe has gone

        def connect(address: str) -> socket.socket:
            return socket.create_connection(("127.0.0.1", proc.port), source_address=(address, 0))

        first = [connect("127.0.0.1") for _ in range(2)]
        assert [ask(sock, n) for n, sock in enumerate(first)] == [0, 1]
        refused = [connect("127.0.0.1"), connect("127.0.0.1")]
        assert all(closed_within(sock, 5) for sock in refused), "a third connection from 127.0.0.1 was kept"
        # 127.0.0.2 has an override of its own.
        second = [connect("127.0.0.2") for _ in range(4)]
        assert [ask(sock, n) for n, sock in enumerate(second)] == [0, 1, 2, 3]
        refused.append(connect("127.0.0.2"))
        assert closed_within(refused[-1], 5)
        assert metric(proc, 'sluice_connections_refused_total{limit="max_connections_per_ip"}') == 3
        # Three refusals within the interval: one line, naming the first address refused.
        assert proc.logged("refusing connection from 127.0.0.1")
        time.sleep(0.2)
        assert sum("refusing connection" in line for line in proc.output) == 1
        first.pop().close()  # a slot frees up for that address
        time.sleep(0.3)
        again = connect("127.0.0.1")
        assert ask(again, 7) == 7
        for sock in [*first, *second, *refused, again]:
            sock.close()
    finally:
        proc.stop()


OPEN_FILES = 400
# What a broker under 400 descriptors gives client connections: 400 less a quarter reserved (100, for the
# limit is small) less the 64 segment files every broker keeps.
CONNECTION_BOUND = OPEN_FILES - OPEN_FILES // 4 - 64
PARTITIONS = 80  # more than the 64 segment files the cache keeps at the bound


def test_at_the_open_file_bound_files_yield_and_new_clients_still_get_in(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", open_files=OPEN_FILES, admin=True).start()
    try:
        topic = create_topic(proc.bootstrap, partitions=PARTITIONS, name="spread")
        time.sleep(0.3)
        fleet = [socket.create_connection(("127.0.0.1", proc.port)) for _ in range(CONNECTION_BOUND)]
        for n, sock in enumerate(fleet):
            assert ask(sock, n) == n
        # A real producer on top of the fleet: its connections close the quietest idle ones; each of the
        # partitions takes a segment file of at most 64 the cache may keep open.
        producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all"})
        for partition in range(PARTITIONS):
            producer.produce(topic, b"%d" % partition, partition=partition)
        assert producer.flush(30) == 0
        del producer  # closes its connections
        assert closed_within(fleet[0], 5), "the quietest connection was not closed to make room"
        assert metric(proc, "sluice_connections_closed_for_room_total") >= 1
        assert metric(proc, "sluice_connections ") <= CONNECTION_BOUND
        consumer = Consumer(
            {"bootstrap.servers": proc.bootstrap, "group.id": "reader", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(seen) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen[message.partition()] = message.value()
        consumer.close()
        assert seen == {p: b"%d" % p for p in range(PARTITIONS)}, "an acknowledged record did not read back"

        # Every connection at the bound is in the middle of a request: a new one is refused, and logged.
        for sock in fleet:
            sock.close()
        wait_for_metric(proc, "sluice_connections ", 0)
        busy = [socket.create_connection(("127.0.0.1", proc.port)) for _ in range(CONNECTION_BOUND)]
        for sock in busy:
            sock.sendall(api_versions(1)[:6])
        wait_for_metric(proc, "sluice_connections ", CONNECTION_BOUND)
        late = socket.create_connection(("127.0.0.1", proc.port))
        assert closed_within(late, 5)
        assert proc.logged("refusing connection from 127.0.0.1")
        assert metric(proc, 'sluice_connections_refused_total{limit="open_files"}') == 1
        assert not any(closed_within(sock, 0.001) for sock in busy)
        assert not [line for line in proc.output if "Too many open files" in line or "EMFILE" in line]
        for sock in [*busy, late]:
            sock.close()
    finally:
        proc.stop()
