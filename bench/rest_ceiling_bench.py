"""How fast any CPython REST produce front built on confluent-kafka can go on this machine, against the direct
producer, in one run: the ceiling under `rest_bench.py`'s produce ratio.

One sluice broker. In each of `--rounds` rounds:

* the direct producer hands `--direct-messages` records over at once and flushes once (no outcome per
  record), then again with a delivery callback per record;
* `wrk` (a C load generator: its CPU is not Python's) POSTs the same v2 binary body of `--batch` records of
  `--size` bytes for `--seconds` at each of `--connections`, to four servers in turn:
  `rest_ceiling_server.py` in its modes `http` (answers at once), `parse` (+ msgspec reading the body, base64 included),
  `produce` (+ confluent-kafka produce with a delivery callback per record and the answer listing each
  offset: the least a v2 produce does), `batch` (the request's records written as one record batch in one
  Produce request of the server's own, offsets from its base offset: a prototype of a gateway that
  bypasses the client library's per-record path), and `sluice gateway --rest-listen` itself.

Each figure is the best round: records/s and the server's CPU per record (all its threads, from /proc; the
direct rows: the producer's own), and its rate / the direct producer's (all at once) rate.

Needs `wrk` (Debian: `apt-get install wrk`).

    .venv/bin/python bench/rest_ceiling_bench.py
    .venv/bin/python bench/rest_ceiling_bench.py --connections 16 --seconds 5 --rounds 1
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SluiceBroker, cpu_seconds, free_port, wait_port
from rest_bench import BINARY, HOST, V2, start_gateway

from sluice.testing import create_topic

SERVER = Path(__file__).resolve().parent / "rest_ceiling_server.py"
MODES = ("http", "parse", "produce", "batch")
WRK_SCRIPT = """
wrk.method = "POST"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
wrk.headers["Content-Type"] = "{content_type}"
wrk.headers["Accept"] = "{accept}"
"""


def direct(bootstrap: str, topic: str, count: int, size: int, *, callback: bool) -> tuple[float, float]:
    """(records/s, us CPU per record) of one producer handing `count` records over at once."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 10_000_000}
    )
    value, delivered = os.urandom(size), [0]

    def report(error: object, message: object) -> None:
        assert error is None, error
        delivered[0] += 1

    produce = producer.produce
    cpu0, started = time.process_time(), time.perf_counter()
    if callback:
        for _ in range(count):
            produce(topic, value, None, -1, report)
    else:
        for _ in range(count):
            produce(topic, value)
    assert producer.flush(60) == 0
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
    assert not callback or delivered[0] == count
    return count / elapsed, cpu / count * 1e6


def drop_topic(bootstrap: str, topic: str) -> None:
    """Delete a measured topic: a run writes several GB, and a broker whose disk falls under its free-space
    floor (5% of the disk by default) refuses produce, which once read as a gateway that served nothing."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: its handle serves it
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)


def check_answer(url: str, batch: int, body: bytes, produces: bool) -> None:
    """One POST before timing: the server answers 200, listing every record's offset if it produces."""
    request = urllib.request.Request(url, body, {"Content-Type": BINARY, "Accept": V2}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200, reply.status
        offsets = json.loads(reply.read())["offsets"]
    assert len(offsets) == (batch if produces else 0), len(offsets)
    assert all(o["error_code"] is None for o in offsets), offsets


def run_wrk(url: str, script: Path, connections: int, seconds: float, batch: int) -> float:
    """Records/s wrk drove through `url` (every answer a 2xx, or it stops)."""
    out = subprocess.run(
        ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds:g}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    problems = re.findall(r"(Non-2xx or 3xx responses: \d+|Socket errors: .*)", out)
    if problems:
        raise SystemExit(f"wrk against {url}: {problems}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)) * batch  # type: ignore[union-attr]
    if not rate:
        raise SystemExit(f"wrk drove nothing through {url}:\n{out}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", default="16,64", help="comma-separated wrk connection counts")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--direct-messages", type=int, default=500_000)
    parser.add_argument(
        "--linger-ms", type=float, default=1.0, help="the ceiling servers' producer linger.ms"
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk: apt-get install wrk")
    connections = [int(c) for c in args.connections.split(",")]
    records = [{"value": base64.b64encode(os.urandom(args.size)).decode()} for _ in range(args.batch)]
    body = json.dumps({"records": records}).encode()
    work = Path(tempfile.mkdtemp(prefix="rest-ceiling-"))
    (work / "body.json").write_bytes(body)
    script = work / "post.lua"
    script.write_text(WRK_SCRIPT.format(body=work / "body.json", content_type=BINARY, accept=V2))
    best: dict[str, tuple[float, float]] = {}

    def keep(label: str, rate: float, us: float) -> None:
        if label not in best or rate > best[label][0]:
            best[label] = (rate, us)

    with SluiceBroker() as broker:
        bootstrap = broker.bootstrap
        for round_ in range(args.rounds):
            topic = create_topic(bootstrap, 1, f"ceiling-direct-{round_}", timeout=30)
            keep(
                "direct, all at once",
                *direct(bootstrap, topic, args.direct_messages, args.size, callback=False),
            )
            keep(
                "direct, all at once, a callback per record",
                *direct(bootstrap, topic, args.direct_messages, args.size, callback=True),
            )
            drop_topic(bootstrap, topic)
            for mode in (*MODES, "sluice gateway"):
                topic = create_topic(bootstrap, 1, f"ceiling-{mode.replace(' ', '-')}-{round_}", timeout=30)
                if mode in MODES:
                    port = free_port()
                    command = [
                        sys.executable,
                        str(SERVER),
                        mode,
                        str(port),
                        bootstrap,
                        topic,
                        str(args.linger_ms),
                    ]
                    server = subprocess.Popen(command, stdout=subprocess.PIPE)
                    assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
                    wait_port(HOST, port, 30)
                    base = f"http://{HOST}:{port}"
                else:
                    server, base = start_gateway(bootstrap, [])
                url = f"{base}/topics/{topic}"
                try:
                    check_answer(url, args.batch, body, produces=mode not in ("http", "parse"))
                    for count in connections:
                        cpu0 = cpu_seconds(server.pid)
                        started = time.perf_counter()
                        rate = run_wrk(url, script, count, args.seconds, args.batch)
                        used = cpu_seconds(server.pid) - cpu0
                        served = rate * (time.perf_counter() - started)
                        keep(f"{mode}, {count} connections", rate, used / served * 1e6)
                finally:
                    server.kill()
                    server.wait()
                    drop_topic(bootstrap, topic)
    shutil.rmtree(work, ignore_errors=True)
    direct_rate = best["direct, all at once"][0]
    print(
        f"v2 binary produce, {args.batch} x {args.size} B per request, wrk for {args.seconds:g} s, "
        f"best of {args.rounds} rounds"
    )
    print(f"{'':48} {'records/s':>12} {'us CPU/rec':>10} {'/ direct':>9}")
    for label, (rate, us) in best.items():
        print(f"{label:48} {rate:>12,.0f} {us:>10.2f} {rate / direct_rate:>9.2f}")


if __name__ == "__main__":
    main()
