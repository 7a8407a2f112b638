"""The REST Proxy API v2 against a direct confluent-kafka client on the same broker, in one run.

Starts a sluice broker and `sluice gateway --rest-listen` (child processes on 127.0.0.1), then times, in
`--rounds` interleaved rounds (each figure printed is its best round: the machine is shared):

* produce: `--messages` values of `--size` bytes as v2 binary POSTs of `--batch` records (100), with
  `--concurrency` requests in flight. The direct side does what such a call does, in the application: the
  same values in batches of `--batch`, a delivery callback per record keeping its partition and offset (the
  REST answer lists them), a batch done once all its records are acknowledged, `--concurrency` batches in
  flight, the REST API's producer settings (linger.ms 1, acks all; v2 produce itself now writes each
  request's records as one batch and does not linger). For reference
  it also prints a producer handing every record over at once with one flush at the end and no per-record
  outcome (the most a direct client does without knowing where each record went).
* consume: a v2 consumer instance (format binary, assigned the partition, GET records with max_bytes
  1,000,000 until all are read) vs a confluent-kafka Consumer (assign from offset 0, batches of 10,000)
  reading the same topic. Both rates are timed from the moment their first records came (connecting and the
  first fetch not timed), counting only the records after it; their CPU covers the whole read.

The default REST client (`--client lean`) is a load generator that costs little CPU, as it shares the
machine's cores with the gateway: keep-alive connections writing pre-built requests and checking each answer
(produce: status and every record's error_code; consume: status, record count and that offsets follow on),
without aiohttp's client or a JSON decoder per record. `--client aiohttp` drives it with aiohttp instead.

Each figure prints messages/s and CPU per message: for the REST side the gateway process's (all its threads,
from /proc, over the timed part only), for the direct side this process's own (the client does the work a
gateway does). Ratios are REST / direct for rates and direct / REST for CPU. With `--peer-url URL` (a REST
proxy already listening on the same broker) or `--peer-cmd` (a command starting one, with `{bootstrap}` and
`{port}` filled in: Karapace's, for instance) the same REST scenarios run against it too, and sluice / peer is
printed.

    .venv/bin/python bench/rest_bench.py
    .venv/bin/python bench/rest_bench.py --messages 20000 --peer-cmd 'env ... python -m karapace.kafka_rest_apis'
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SluiceBroker, cpu_seconds, free_port, ratio, wait_port

from sluice.gateway.config import FETCH_QUEUE_BACKOFF_MS
from sluice.testing import create_topic

HOST = "127.0.0.1"
V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
# The direct producer's settings: the gateway's REST producer also lingers 1 ms (REST_LINGER_SECONDS) and
# waits for the leader's acknowledgement (librdkafka's default acks=all on a single broker).
OFFSET = re.compile(rb'"offset":(\d+)')
# About 10,000 of the 100-byte records per answer at most, as the direct consumer's batches.
FETCH_PARAMS = {"timeout": "1000", "max_bytes": "1000000"}
DIRECT_PRODUCER = {"linger.ms": 1, "queue.buffering.max.messages": 10_000_000}


def start_gateway(bootstrap: str, settings: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "gateway",
            "--bootstrap",
            bootstrap,
            "--grpc-listen",
            "",
            "--http-listen",
            "",
            "--rest-listen",
            f"{HOST}:{port}",
            *(arg for setting in settings for arg in ("-X", setting)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(HOST, port, 60)
    return proc, f"http://{HOST}:{port}"


def start_peer(command: str, bootstrap: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        shlex.split(command.format(bootstrap=bootstrap, port=port)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(HOST, port, 120)
    return proc, f"http://{HOST}:{port}"


async def wait_topic_visible(session: aiohttp.ClientSession, url: str, topic: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with session.get(f"{url}/topics/{topic}") as reply:
            if reply.status == 200:
                return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{url} never saw topic {topic}")


async def rest_produce(url: str, topic: str, values: list[bytes], batch: int, concurrency: int) -> float:
    """Seconds to POST all values in batches, `concurrency` requests in flight."""
    bodies = [
        {"records": [{"value": base64.b64encode(v).decode()} for v in values[i : i + batch]]}
        for i in range(0, len(values), batch)
    ]
    async with aiohttp.ClientSession(headers={"Content-Type": BINARY, "Accept": V2}) as session:
        await wait_topic_visible(session, url, topic)
        queue = list(reversed(bodies))

        async def worker() -> None:
            while queue:
                body = queue.pop()
                async with session.post(f"{url}/topics/{topic}", json=body) as reply:
                    answer = await reply.json(content_type=None)
                    assert reply.status == 200, answer
                    assert all(o.get("error_code") is None for o in answer["offsets"]), answer

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started


async def lean_produce(url: str, topic: str, values: list[bytes], batch: int, concurrency: int) -> float:
    """`rest_produce` with a load generator's client: `concurrency` keep-alive HTTP/1.1 connections writing
    pre-built requests and reading each answer (status, then its offsets checked), so that the client's own
    CPU (aiohttp's costs about 3 us per record here) does not crowd out the gateway on a small machine."""
    async with aiohttp.ClientSession() as session:
        await wait_topic_visible(session, url, topic)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    requests = []
    for i in range(0, len(values), batch):
        body = json.dumps(
            {"records": [{"value": base64.b64encode(v).decode()} for v in values[i : i + batch]]}
        ).encode()
        head = (
            f"POST /topics/{topic} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {BINARY}\r\nAccept: {V2}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        requests.append(head.encode() + body)
    queue = list(reversed(requests))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while queue:
                writer.write(queue.pop())
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
                answer = json.loads(await reader.readexactly(length))
                assert status == 200, answer
                assert all(o.get("error_code") is None for o in answer["offsets"]), answer
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def create_binary_consumer(session: aiohttp.ClientSession, url: str, topic: str) -> str:
    """A v2 binary consumer instance assigned partition 0 of `topic` (no group join, as the direct consumer's
    `assign`), reading from its beginning: its URL."""
    group = f"bench-{uuid.uuid4().hex[:8]}"
    body = {"format": "binary", "auto.offset.reset": "earliest", "auto.commit.enable": "false"}
    async with session.post(f"{url}/consumers/{group}", json=body, headers={"Content-Type": V2}) as reply:
        # From the instance id rather than base_uri: a proxy may advertise another host name.
        base = f"{url}/consumers/{group}/instances/{(await reply.json(content_type=None))['instance_id']}"
    assignment = {"partitions": [{"topic": topic, "partition": 0}]}
    async with session.post(f"{base}/assignments", json=assignment, headers={"Content-Type": V2}) as reply:
        assert reply.status == 204, await reply.text()
    return base


class ReadClock:
    """Times a read as the direct consumer's is timed: the rate from the moment the first records have come
    (connecting and the first fetch are not timed) to the last, counting only the records after that moment;
    the CPU from the clock's creation (the first fetch's work included) over all records read."""

    def __init__(self, cpu: Callable[[], float]) -> None:
        self.cpu = cpu
        self.cpu0 = cpu()
        self.started = 0.0
        self.seen = self.timed = self.skipped = 0

    def add(self, records: int) -> None:
        self.seen += records
        if self.started:
            self.timed += records
        elif records:
            self.started = time.perf_counter()

    def result(self) -> tuple[float, int, float]:
        """(seconds, records) of the timed part, and the CPU seconds per record read."""
        assert self.timed, "the first answer held every record: nothing left to time (use more --messages)"
        return time.perf_counter() - self.started, self.timed, (self.cpu() - self.cpu0) / self.seen


async def rest_consume(
    url: str, topic: str, count: int, cpu: Callable[[], float]
) -> tuple[float, int, float, int]:
    """`ReadClock.result` (and 0 offsets skipped: not checked) of reading the topic from offset 0 through a v2 consumer instance, with aiohttp's
    client; `cpu()` reads the server's CPU seconds."""
    async with aiohttp.ClientSession() as session:
        base = await create_binary_consumer(session, url, topic)
        clock = ReadClock(cpu)
        while clock.seen < count:
            async with session.get(
                f"{base}/records", params=FETCH_PARAMS, headers={"Accept": BINARY}
            ) as reply:
                records = await reply.json(content_type=None)
                assert reply.status == 200, records
                clock.add(len(records))
        result = clock.result()
        await session.delete(base)
        return *result, 0


async def lean_consume(
    url: str, topic: str, count: int, cpu: Callable[[], float]
) -> tuple[float, int, float, int]:
    """`rest_consume` with a load generator's client: one keep-alive HTTP/1.1 connection writing a pre-built
    GET and reading each answer's status and body, which it checks without decoding every record: the
    records are counted, and each answer's first offset must follow the previous answer's last one (offsets
    skipped are counted in `clock.skipped`: Karapace's proxy drops the record that overflows max_bytes)."""
    async with aiohttp.ClientSession() as session:
        base = await create_binary_consumer(session, url, topic)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        path = base.removeprefix(url)
        query = "&".join(f"{k}={v}" for k, v in FETCH_PARAMS.items())
        request = f"GET {path}/records?{query} HTTP/1.1\r\nHost: {host}\r\nAccept: {BINARY}\r\n\r\n".encode()
        reader, writer = await asyncio.open_connection(host, int(port))
        clock, following = ReadClock(cpu), 0
        try:
            while following < count:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
                body = await reader.readexactly(length)
                assert int(head.split(b" ", 2)[1]) == 200, body
                records = body.count(b'"offset":')
                if records:
                    first = int(OFFSET.match(body, body.index(b'"offset":')).group(1))
                    last = int(OFFSET.match(body, body.rindex(b'"offset":')).group(1))
                    assert first >= following and last >= first + records - 1, (following, first, last)
                    clock.skipped += first - following + last - (first + records - 1)
                    following = last + 1
                clock.add(records)
            result = clock.result()
        finally:
            writer.close()
        await session.delete(base)
        return *result, clock.skipped


def direct_produce(bootstrap: str, topic: str, values: list[bytes]) -> tuple[float, float]:
    """The fastest a direct producer goes: every record handed over at once, one flush at the end, no
    per-record outcome. Printed for reference; the ratio uses `direct_produce_batched`."""
    producer = Producer({"bootstrap.servers": bootstrap, **DIRECT_PRODUCER})
    cpu0, started = time.process_time(), time.perf_counter()
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    return time.perf_counter() - started, time.process_time() - cpu0


def direct_produce_batched(
    bootstrap: str, topic: str, values: list[bytes], batch: int, concurrency: int
) -> tuple[float, float]:
    """What a v2 produce call does, done by the application itself: batches of `batch` records, each record
    with a delivery callback that keeps its partition and offset (the REST answer lists them), a batch
    done once all its records are acknowledged, and `concurrency` batches in flight, as the REST client
    keeps `concurrency` requests in flight."""
    producer = Producer({"bootstrap.servers": bootstrap, **DIRECT_PRODUCER})
    batches = [values[i : i + batch] for i in range(0, len(values), batch)]
    offsets: list[list[tuple[int, int] | None]] = [[None] * len(b) for b in batches]
    remaining = [len(b) for b in batches]
    in_flight = 0

    def delivered(slot: int, index: int, error: Any, message: Any) -> None:
        nonlocal in_flight
        assert error is None, error
        offsets[slot][index] = (message.partition(), message.offset())
        remaining[slot] -= 1
        if not remaining[slot]:
            in_flight -= 1

    cpu0, started = time.process_time(), time.perf_counter()
    produce, following = producer.produce, 0
    while following < len(batches) or in_flight:
        while following < len(batches) and in_flight < concurrency:
            for index, value in enumerate(batches[following]):
                produce(topic, value, None, -1, functools.partial(delivered, following, index))
            following, in_flight = following + 1, in_flight + 1
        producer.poll(1)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
    assert all(o is not None for slot in offsets for o in slot)
    return elapsed, cpu


def direct_consume(bootstrap: str, topic: str, count: int) -> tuple[float, int, float]:
    """`ReadClock.result` of a Consumer reading the topic from offset 0, in batches of up to 10,000 records,
    with the gateway's consumer settings (a full prefetch queue re-checked every 10 ms, not after librdkafka's
    default second: reading a backlog over 100,000 records otherwise stalls at each refill)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"direct-{uuid.uuid4().hex[:8]}",
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    clock = ReadClock(time.process_time)
    while clock.seen < count:
        clock.add(sum(1 for m in consumer.consume(10_000, timeout=1) if m.error() is None))
    result = clock.result()
    consumer.close()
    return result


def measure(
    label: str, url: str, pid: int, bootstrap: str, values: list[bytes], args: argparse.Namespace
) -> dict[str, float]:
    topic = create_topic(bootstrap, 1, f"rest-bench-{label}", timeout=30)
    cpu0 = cpu_seconds(pid)
    client = lean_produce if args.client == "lean" else rest_produce
    produce_s = asyncio.run(client(url, topic, values, args.batch, args.concurrency))
    produce_cpu = cpu_seconds(pid) - cpu0
    cpu0 = cpu_seconds(pid)
    consumer = lean_consume if args.client == "lean" else rest_consume
    consume_s, read, consume_cpu, skipped = asyncio.run(
        consumer(url, topic, len(values), lambda: cpu_seconds(pid))
    )
    if skipped:
        print(f"{label}: {skipped} records never came back from the consumer instance", file=sys.stderr)
    assert not skipped or not label.startswith("sluice"), "sluice skipped records"
    n = len(values)
    return {
        "produce_rate": n / produce_s,
        "produce_us": produce_cpu / n * 1e6,
        "consume_rate": read / consume_s,
        "consume_us": consume_cpu * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--client",
        choices=("lean", "aiohttp"),
        default="lean",
        help="REST produce client: keep-alive connections writing pre-built requests, or aiohttp's session",
    )
    parser.add_argument("--peer-url", help="a REST proxy already serving on the same broker")
    parser.add_argument(
        "--peer-cmd", help="command starting a REST proxy: {bootstrap} and {port} are filled in"
    )
    parser.add_argument("--peer-name", default="karapace")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each figure is its best")
    parser.add_argument(
        "--gateway-setting",
        "-X",
        action="append",
        default=[],
        help="KEY=VALUE librdkafka setting for the gateway",
    )
    args = parser.parse_args()
    values = [(b"%08d" % i).ljust(args.size, b"x") for i in range(args.messages)]
    n = len(values)
    rounds: dict[str, list[dict[str, float]]] = {"rest": [], "direct": [], "unbounded": [], "peer": []}
    with SluiceBroker() as broker:
        gateway, url = start_gateway(broker.bootstrap, args.gateway_setting)
        peer, peer_url, peer_pid = None, args.peer_url, 0
        try:
            if args.peer_cmd:
                peer, peer_url = start_peer(args.peer_cmd, broker.bootstrap)
                peer_pid = peer.pid
            for round_ in range(args.rounds):
                rounds["rest"].append(
                    measure(f"sluice-{round_}", url, gateway.pid, broker.bootstrap, values, args)
                )
                topic = create_topic(broker.bootstrap, 1, f"rest-bench-direct-{round_}", timeout=30)
                produce_s, produce_cpu = direct_produce_batched(
                    broker.bootstrap, topic, values, args.batch, args.concurrency
                )
                consume_s, read, consume_cpu = direct_consume(broker.bootstrap, topic, n)
                rounds["direct"].append(
                    {
                        "produce_rate": n / produce_s,
                        "produce_us": produce_cpu / n * 1e6,
                        "consume_rate": read / consume_s,
                        "consume_us": consume_cpu * 1e6,
                    }
                )
                topic = create_topic(broker.bootstrap, 1, f"rest-bench-unbounded-{round_}", timeout=30)
                produce_s, produce_cpu = direct_produce(broker.bootstrap, topic, values)
                rounds["unbounded"].append(
                    {"produce_rate": n / produce_s, "produce_us": produce_cpu / n * 1e6}
                )
                if peer_pid:
                    rounds["peer"].append(
                        measure(
                            f"{args.peer_name}-{round_}", peer_url, peer_pid, broker.bootstrap, values, args
                        )
                    )
        finally:
            gateway.terminate()
            gateway.wait(30)
            if peer is not None:
                peer.terminate()
                peer.wait(30)
    rest, direct, unbounded = best(rounds["rest"]), best(rounds["direct"]), best(rounds["unbounded"])
    rows = [("sluice REST v2", rest), ("direct confluent-kafka", direct)]
    if rounds["peer"]:
        rows.append((f"{args.peer_name} REST v2", best(rounds["peer"])))
    print(
        f"{args.messages} x {args.size} B, batches of {args.batch}, {args.concurrency} requests in flight, "
        f"best of {args.rounds} interleaved rounds"
    )
    print(f"{'':26}{'produce msg/s':>15}{'us CPU/msg':>12}{'consume msg/s':>15}{'us CPU/msg':>12}")
    for name, row in rows:
        print(
            f"{name:26}{row['produce_rate']:15,.0f}{row['produce_us']:12.2f}"
            f"{row['consume_rate']:15,.0f}{row['consume_us']:12.2f}"
        )
    print(
        f"{'direct, all at once':26}{unbounded['produce_rate']:15,.0f}{unbounded['produce_us']:12.2f}"
        "   (one flush at the end, no outcome per record: for reference)"
    )
    print(
        f"sluice / direct: produce {ratio(rest['produce_rate'], direct['produce_rate']):.2f} "
        f"(CPU/msg {ratio(direct['produce_us'], rest['produce_us']):.2f}), "
        f"consume {ratio(rest['consume_rate'], direct['consume_rate']):.2f} "
        f"(CPU/msg {ratio(direct['consume_us'], rest['consume_us']):.2f}); "
        f"produce vs all at once {ratio(rest['produce_rate'], unbounded['produce_rate']):.2f} "
        f"(CPU/msg {ratio(unbounded['produce_us'], rest['produce_us']):.2f})"
    )
    if rounds["peer"]:
        peer_row = best(rounds["peer"])
        print(
            f"sluice / {args.peer_name}: produce {ratio(rest['produce_rate'], peer_row['produce_rate']):.2f} "
            f"(CPU/msg {ratio(peer_row['produce_us'], rest['produce_us']):.2f}), "
            f"consume {ratio(rest['consume_rate'], peer_row['consume_rate']):.2f} "
            f"(CPU/msg {ratio(peer_row['consume_us'], rest['consume_us']):.2f})"
        )


def best(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's best round (highest rate, least CPU): the machine is shared, and what other work
    takes from a round is noise, not the measured program's cost."""
    return {key: (max if key.endswith("_rate") else min)(r[key] for r in rounds) for key in rounds[0]}


if __name__ == "__main__":
    main()
