"""The REST Proxy API v2 against a direct confluent-kafka client on the same broker, in one run.

Starts a sluice broker and `sluice gateway --rest-listen` (child processes on 127.0.0.1), then times:

* produce: `--messages` values of `--size` bytes as v2 binary POSTs of `--batch` records (100), with
  `--concurrency` requests in flight, vs a confluent-kafka Producer writing the same values (produce + flush);
* consume: a v2 consumer instance (format binary, subscribe, GET records until all are read) vs a
  confluent-kafka Consumer (assign from offset 0) reading the same topic.

Each figure prints messages/s and, for the REST side, the gateway process's CPU per message (from /proc);
for the direct side, this process's CPU per message (the client does the work a gateway does). Ratios are
REST ÷ direct. With `--peer-url URL` (a REST proxy already listening, e.g. Karapace's, on the same broker:
see `--peer-cmd` to start one with `{bootstrap}` and `{port}` filled in) the same REST scenarios run against
it too, and sluice ÷ peer is printed.

    .venv/bin/python bench/rest_bench.py
    .venv/bin/python bench/rest_bench.py --messages 20000 --peer-cmd '/tmp/venv/bin/karapace ... {bootstrap} {port}'
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SluiceBroker, cpu_seconds, free_port, ratio, wait_port

from sluice.testing import create_topic

HOST = "127.0.0.1"
V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"


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
                assert all(o["error_code"] is None for o in answer["offsets"]), answer
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def rest_consume(url: str, topic: str, count: int) -> float:
    """Seconds to read the topic from offset 0 through a v2 consumer instance (group join not timed: the instance
    first waits for a record, then seeks back to the beginning)."""
    async with aiohttp.ClientSession(headers={"Content-Type": V2}) as session:
        group = f"bench-{uuid.uuid4().hex[:8]}"
        body = {"format": "binary", "auto.offset.reset": "earliest", "auto.commit.enable": "false"}
        async with session.post(f"{url}/consumers/{group}", json=body) as reply:
            # From the instance id rather than base_uri: a proxy may advertise another host name.
            base = f"{url}/consumers/{group}/instances/{(await reply.json(content_type=None))['instance_id']}"
        async with session.post(f"{base}/subscription", json={"topics": [topic]}) as reply:
            assert reply.status == 204
        accept = {"Accept": BINARY}
        params = {"timeout": "1000", "max_bytes": "8000000"}

        async def fetch() -> int:
            async with session.get(f"{base}/records", params=params, headers=accept) as reply:
                records = await reply.json(content_type=None)
                assert reply.status == 200, records
                return len(records)

        # Until the instance has joined its group and holds the partition, then the timed read from offset 0.
        while not await fetch():
            pass
        beginning = {"partitions": [{"topic": topic, "partition": 0}]}
        async with session.post(f"{base}/positions/beginning", json=beginning) as reply:
            assert reply.status == 204, await reply.text()
        seen, started = 0, time.perf_counter()
        while seen < count:
            seen += await fetch()
        elapsed = time.perf_counter() - started
        await session.delete(base)
        return elapsed


def direct_produce(bootstrap: str, topic: str, values: list[bytes]) -> tuple[float, float]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 10_000_000}
    )
    cpu0, started = time.process_time(), time.perf_counter()
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    return time.perf_counter() - started, time.process_time() - cpu0


def direct_consume(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"direct-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, started, cpu0 = 0, 0.0, 0.0
    while seen < count:
        got = [m for m in consumer.consume(10_000, timeout=1) if m.error() is None]
        if got and not started:
            started, cpu0 = time.perf_counter(), time.process_time()
        seen += len(got)
    result = time.perf_counter() - started, time.process_time() - cpu0
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
    consume_s = asyncio.run(rest_consume(url, topic, len(values)))
    consume_cpu = cpu_seconds(pid) - cpu0
    n = len(values)
    return {
        "produce_rate": n / produce_s,
        "produce_us": produce_cpu / n * 1e6,
        "consume_rate": n / consume_s,
        "consume_us": consume_cpu / n * 1e6,
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
    parser.add_argument(
        "--gateway-setting",
        "-X",
        action="append",
        default=[],
        help="KEY=VALUE librdkafka setting for the gateway",
    )
    args = parser.parse_args()
    values = [(b"%08d" % i).ljust(args.size, b"x") for i in range(args.messages)]
    with SluiceBroker() as broker:
        gateway, url = start_gateway(broker.bootstrap, args.gateway_setting)
        peer = None
        try:
            rest = measure("sluice", url, gateway.pid, broker.bootstrap, values, args)
            topic = create_topic(broker.bootstrap, 1, "rest-bench-direct", timeout=30)
            produce_s, produce_cpu = direct_produce(broker.bootstrap, topic, values)
            consume_s, consume_cpu = direct_consume(broker.bootstrap, topic, len(values))
            n = len(values)
            direct = {
                "produce_rate": n / produce_s,
                "produce_us": produce_cpu / n * 1e6,
                "consume_rate": n / consume_s,
                "consume_us": consume_cpu / n * 1e6,
            }
            rows = [("sluice REST v2", rest), ("direct confluent-kafka", direct)]
            if args.peer_cmd or args.peer_url:
                if args.peer_cmd:
                    peer, peer_url = start_peer(args.peer_cmd, broker.bootstrap)
                    peer_pid = peer.pid
                else:
                    peer_url, peer_pid = args.peer_url, 0
                rows.append(
                    (
                        f"{args.peer_name} REST v2",
                        measure(args.peer_name, peer_url, peer_pid, broker.bootstrap, values, args)
                        if peer_pid
                        else {},
                    )
                )
        finally:
            gateway.terminate()
            gateway.wait(30)
            if peer is not None:
                peer.terminate()
                peer.wait(30)
    print(f"{args.messages} x {args.size} B, batches of {args.batch}, {args.concurrency} requests in flight")
    print(f"{'':26}{'produce msg/s':>15}{'us CPU/msg':>12}{'consume msg/s':>15}{'us CPU/msg':>12}")
    for name, row in rows:
        if row:
            print(
                f"{name:26}{row['produce_rate']:15,.0f}{row['produce_us']:12.1f}{row['consume_rate']:15,.0f}{row['consume_us']:12.1f}"
            )
    print(
        f"sluice / direct: produce {ratio(rest['produce_rate'], direct['produce_rate']):.2f}, "
        f"consume {ratio(rest['consume_rate'], direct['consume_rate']):.2f}"
    )
    if len(rows) > 2 and rows[2][1]:
        peer_row = rows[2][1]
        print(
            f"sluice / {args.peer_name}: produce {ratio(rest['produce_rate'], peer_row['produce_rate']):.2f}, "
            f"consume {ratio(rest['consume_rate'], peer_row['consume_rate']):.2f}"
        )


if __name__ == "__main__":
    main()
