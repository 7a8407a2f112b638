"""The web console's speed on a big cluster: `/topics` with many topics, the message browser at arbitrary
offsets of a large topic, and the server-side filter's scan rate, side by side with kcat reading the same
messages.

    .venv/bin/python bench/console_bench.py                       # 1,000 topics + 250,000 x 1 KiB (~244 MiB)
    .venv/bin/python bench/console_bench.py --messages 1000000    # the issue's 1 GB topic (~977 MiB)

The broker is `sluice broker` (fresh data dir); the console runs as `sluice console` in its own process,
pointed at the broker like any client: sizes on disk come from the broker's DescribeLogDirs.
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SluiceBroker, cpu_seconds, free_port, wait_port

BIG = "big"
NEEDLE = b"NEEDLE-7f3a9c"


def get(url: str, *, htmx: bool = False) -> tuple[float, str]:
    headers = {"HX-Request": "true"} if htmx else {}
    started = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as reply:
        body = reply.read().decode()
        assert reply.status == 200, reply.status
    return time.perf_counter() - started, body


def post(url: str, fields: dict[str, str]) -> str:
    request = urllib.request.Request(
        url,
        data=urlencode(fields).encode(),
        method="POST",
        headers={"HX-Request": "true", "Content-Type": "application/x-www-form-urlencoded"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return reply.read().decode()


def fill(bootstrap: str, topics: int, messages: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"bench-topic-{i:04d}" for i in range(topics - 1)] + [BIG]
    for at in range(0, len(names), 100):
        batch = [NewTopic(n, partitions if n == BIG else 1, 1) for n in names[at : at + 100]]
        for future in admin.create_topics(batch, request_timeout=60).values():
            future.result(120)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    filler = (b'{"order": %d, "item": "lamp", "note": "' + b"x" * size)[: size - 2]
    started = time.perf_counter()
    for i in range(messages):
        value = filler if i != messages - 1 else NEEDLE + filler[len(NEEDLE) :]
        producer.produce(BIG, value=value, key=b"k%d" % i, partition=i % partitions)
        if i % 50_000 == 0:
            producer.poll(0)
    assert producer.flush(600) == 0
    took = time.perf_counter() - started
    print(
        f"filled: {topics:,} topics; '{BIG}' with {messages:,} x {size} B = {messages * size / 2**20:,.0f} MiB "
        f"over {partitions} partitions in {took:.1f} s"
    )


def kcat_read(bootstrap: str) -> tuple[int, float, bool, float]:
    """Messages read, wall seconds, whether the needle was seen, and kcat's own CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", BIG, "-o", "beginning", "-e", "-q", "-f", "%k %s\n"],
        capture_output=True,
        check=True,
    ).stdout
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.count(b"\n"), took, NEEDLE in out, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=250_000)
    parser.add_argument("--size", type=int, default=1024, help="bytes per message value")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the large topic")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    with SluiceBroker() as broker:
        fill(broker.bootstrap, args.topics, args.messages, args.size, args.partitions)
        port = free_port()
        console = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "console",
                "-b",
                broker.bootstrap,
                "--listen",
                f"127.0.0.1:{port}",
                "--sample-interval",
                "3600",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_port("127.0.0.1", port, 30)
            base = f"http://127.0.0.1:{port}"
            get(base + "/topics")  # warm: first metadata, first connections

            topics = [get(base + "/topics")[0] for _ in range(args.rounds)]
            _, body = get(base + "/topics?internal=1")
            shown = body.count("<tr>") - 1
            assert "does not answer DescribeLogDirs" not in body, "sizes on disk are missing"
            rng = random.Random(7)
            per_part = args.messages // args.partitions
            browse, fragments = [], []
            for _ in range(args.rounds):
                p, offset = rng.randrange(args.partitions), rng.randrange(per_part - 50)
                query = urlencode({"mode": "offset", "value": offset, "partition": p, "limit": 50})
                took, page = get(f"{base}/topics/{BIG}/messages?{query}")
                assert f"{offset:,}" in page
                browse.append(took)
                fragments.append(get(f"{base}/topics/{BIG}/messages?{query}", htmx=True)[0])
            newest = [get(f"{base}/topics/{BIG}")[0] for _ in range(max(3, args.rounds // 4))]

            cpu0, broker0 = cpu_seconds(console.pid), broker.cpu_seconds()
            started = time.perf_counter()
            answer = post(f"{base}/topics/{BIG}/scan", {"needle": NEEDLE.decode(), "mode": "beginning"})
            job = re.search(r'id="scan-([0-9a-f]+)"', answer)
            assert job, answer
            while "Search done" not in answer:
                time.sleep(0.2)
                answer = get(f"{base}/scans/{job.group(1)}", htmx=True)[1]
            scan_wall = time.perf_counter() - started
            scan_cpu = cpu_seconds(console.pid) - cpu0
            scan_broker_cpu = broker.cpu_seconds() - broker0
            scanned = int(re.search(r'id="scanned">([\d,]+)<', answer).group(1).replace(",", ""))
            found = 'id="match-count">1<' in answer
        finally:
            console.terminate()
            console.wait(30)

        broker0 = broker.cpu_seconds()
        read, kcat_wall, kcat_found, kcat_cpu = kcat_read(broker.bootstrap)
        kcat_broker_cpu = broker.cpu_seconds() - broker0

    def ms(values: list[float]) -> str:
        values = sorted(values)
        return f"median {statistics.median(values) * 1000:6.0f} ms   p90 {values[int(len(values) * 0.9) - 1] * 1000:6.0f} ms"

    print(f"\n/topics ({shown:,} topics listed)         {ms(topics)}   (target < 500 ms)")
    print(f"browser at a random offset, full page  {ms(browse)}   (target < 500 ms)")
    print(f"browser at a random offset, htmx part  {ms(fragments)}")
    print(f"/topics/{BIG} (newest 50 of all parts)  {ms(newest)}")
    print("\nfilter scan over the whole large topic, needle in the last message:")
    print(
        f"  console  {scanned:>10,} msgs in {scan_wall:6.2f} s = {scanned / scan_wall:>9,.0f} msg/s   "
        f"console CPU {scan_cpu / max(scanned, 1) * 1e6:.2f} us/msg   "
        f"broker CPU {scan_broker_cpu / max(scanned, 1) * 1e6:.2f} us/msg   found={found}   (target >= 50,000 msg/s)"
    )
    print(
        f"  kcat     {read:>10,} msgs in {kcat_wall:6.2f} s = {read / kcat_wall:>9,.0f} msg/s   "
        f"kcat CPU    {kcat_cpu / max(read, 1) * 1e6:.2f} us/msg   "
        f"broker CPU {kcat_broker_cpu / max(read, 1) * 1e6:.2f} us/msg   found={kcat_found}   (-C -e, '%k %s')"
    )
    print(
        f"  ratio console/kcat: rate {(scanned / scan_wall) / (read / kcat_wall):.2f}, "
        f"client CPU per message {(scan_cpu / max(scanned, 1)) / (kcat_cpu / max(read, 1)):.2f}"
    )


if __name__ == "__main__":
    main()
