"""`sluice consume -e` against kcat, side by side, reading the same topic from the same sluice broker.

    .venv/bin/python bench/consume_cli_bench.py                 # 1,000,000 x 100 B, 3 rounds
    .venv/bin/python bench/consume_cli_bench.py --count 200000 --rounds 2

Both tools dump the whole topic to /dev/null and exit at its end:
    kcat -C -b ... -t T -e -o beginning -f '%s\\n'
    sluice consume T -b ... -e -o beginning
Rounds alternate the two; the figure is the median rate (messages/s) of each and their ratio
(target: sluice at least 50% of kcat). The tool's own CPU seconds (user+sys of the child) are printed
too, since wall-clock swings on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SluiceBroker, median, ratio

REPO = Path(__file__).resolve().parent.parent


def fill(bootstrap: str, topic: str, count: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": "1"})
    value = b"x" * size
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one command writing to /dev/null."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(cmd, stdout=sink, check=True, env=env, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    topic = "consume-cli-bench"
    with SluiceBroker() as broker:
        fill(broker.bootstrap, topic, args.count, args.size)
        kcat = [
            "kcat",
            "-C",
            "-b",
            broker.bootstrap,
            "-t",
            topic,
            "-e",
            "-o",
            "beginning",
            "-f",
            "%s\\n",
            "-q",
        ]
        sluice = [
            sys.executable,
            "-m",
            "sluice",
            "consume",
            topic,
            "-b",
            broker.bootstrap,
            "-e",
            "-o",
            "beginning",
        ]
        results: dict[str, list[tuple[float, float]]] = {"kcat": [], "sluice": []}
        for round_no in range(args.rounds):
            for name, cmd in (("kcat", kcat), ("sluice", sluice)):
                wall, cpu = run(cmd, env)
                results[name].append((wall, cpu))
                print(
                    f"round {round_no + 1} {name:6s} {wall:6.2f} s  {args.count / wall:>10,.0f} msg/s  "
                    f"cpu {cpu:5.2f} s",
                    flush=True,
                )
    rate = {name: median(args.count / wall for wall, _ in rows) for name, rows in results.items()}
    cpu = {name: median(c for _, c in rows) for name, rows in results.items()}
    print(f"\n{args.count:,} x {args.size} B, median of {args.rounds} round(s)")
    print(f"{'tool':8s}{'msg/s':>12s}{'MB/s':>9s}{'cpu s':>8s}")
    for name in ("kcat", "sluice"):
        print(f"{name:8s}{rate[name]:>12,.0f}{rate[name] * args.size / 1e6:>9.1f}{cpu[name]:>8.2f}")
    share = ratio(rate["sluice"], rate["kcat"])
    assert share is not None
    print(f"sluice / kcat rate: {share:.2f} (target >= 0.50)")


if __name__ == "__main__":
    main()
