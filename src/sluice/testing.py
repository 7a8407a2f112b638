"""A real sluice broker in a child process, for tests (ours and users'): a free port of its own, own data dir."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

_READY = re.compile(r"^sluice broker listening on [^ ]+:(\d+)$")
_ADMIN_READY = re.compile(r"^sluice admin listening on (https?://[^ ]+)$")
_REGISTRY_READY = re.compile(r"^sluice registry listening on (https?://[^ ]+)$")
REGISTRY_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class _ChildProcess:
    """A sluice server in a child process: its output kept, a readiness line awaited, kill and stop."""

    proc: subprocess.Popen[str] | None
    output: list[str]
    _ready: threading.Event
    _announced: list[bool]

    def _spawn(self, cmd: list[str], on_line: Callable[[str], bool], what: str, timeout: float) -> None:
        """Start ``cmd``; ``on_line`` sees each output line and says when the server is ready."""
        self._launch(cmd, on_line)
        self._await_ready(what, timeout)

    def _launch(self, cmd: list[str], on_line: Callable[[str], bool]) -> None:
        """Start ``cmd`` without waiting for it (see `_await_ready`), so several can start side by side."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self._ready = ready = threading.Event()
        self._announced = announced = []  # the readiness line came (rather than the end of the output)

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                if not ready.is_set() and on_line(line.rstrip()):
                    announced.append(True)
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()

    def _await_ready(self, what: str, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.1):
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"{what} did not start:\n" + "".join(self.output))
        if not self._announced or self.proc.poll() is not None:
            try:
                self.proc.wait(10)  # its output ended: it is exiting, if not gone yet
            except subprocess.TimeoutExpired:
                self.kill()
            raise RuntimeError(f"{what} exited at start:\n" + "".join(self.output))

    def logged(self, text: str, within: float = 5.0) -> bool:
        """Whether the process wrote `text`, waiting up to `within` seconds: its output is read by a thread."""
        deadline = time.monotonic() + within
        while text not in "".join(self.output) and time.monotonic() < deadline:
            time.sleep(0.05)
        return text in "".join(self.output)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, exactly like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.kill()


def with_open_files(limit: int, cmd: list[str]) -> list[str]:
    """`cmd` run with an open-file limit (RLIMIT_NOFILE, soft and hard) of `limit`: lowering a limit needs
    no privilege, and exec keeps the pid, so the command's process is the one started."""
    setter = (
        "import os, resource, sys; limit = int(sys.argv[1]); "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)); os.execv(sys.argv[2], sys.argv[2:])"
    )
    return [sys.executable, "-c", setter, str(limit), *cmd]


class BrokerProcess(_ChildProcess):
    """`sluice broker` on 127.0.0.1 on a port of `free_port`'s; `kill()` is a real SIGKILL."""

    def __init__(self, data_dir: Path | str | None, *, port: int = 0, config: Path | None = None,
                 extra_args: list[str] | None = None, min_free_bytes: int | None = 0,
                 admin: bool = False, open_files: int | None = None) -> None:
        # Test brokers do not refuse produce for lack of free disk unless a test asks (None: the default).
        self.min_free_bytes = min_free_bytes
        self.data_dir = data_dir
        self.port = port
        # admin=True also serves /metrics and the admin API on a port of its own: see admin_url.
        self.admin = admin
        self.admin_url: str | None = None
        self._admin_port = 0
        self.config = config
        self.extra_args = extra_args or []
        # The broker's open-file limit (RLIMIT_NOFILE, soft and hard), set in the child before it starts.
        self.open_files = open_files
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        # The ports are chosen here, below the kernel's ephemeral range, not by binding port 0: a restart binds
        # them again, and a port from the ephemeral range may by then be some outgoing connection's local port
        # (EADDRINUSE, seen in a compaction restart test under parallel tests).
        first = self.proc is None
        if self.port == 0:
            self.port = free_port()
        if self.admin and self._admin_port == 0:
            self._admin_port = free_port()
        try:
            return self._start(timeout)
        except RuntimeError as exc:
            if not (first and "address already in use" in str(exc)):
                raise
            # Another caller of free_port took the same port a moment before: once more, on other ports.
            self.port = free_port()
            self._admin_port = free_port() if self.admin else 0
            return self._start(timeout)

    def _start(self, timeout: float) -> BrokerProcess:
        cmd = [sys.executable, "-m", "sluice", "broker", "--listen", f"127.0.0.1:{self.port}",
               "--data-dir", str(self.data_dir) if self.data_dir is not None else ":memory:"]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        if self.min_free_bytes is not None:
            cmd += ["--min-free-bytes", str(self.min_free_bytes)]
        # The admin listener is on by default (127.0.0.1:9644); test brokers take a port of free_port's or none.
        cmd += ["--admin-listen", f"127.0.0.1:{self._admin_port}" if self.admin else "off"]
        cmd += self.extra_args
        if self.open_files is not None:
            cmd = with_open_files(self.open_files, cmd)

        def on_line(line: str) -> bool:
            match = _READY.match(line)
            if match:
                self.port = int(match.group(1))
                return not self.admin
            admin_match = _ADMIN_READY.match(line)
            if admin_match:
                self.admin_url = admin_match.group(1)
                self._admin_port = int(self.admin_url.rsplit(":", 1)[1])  # the same port on restart
                return True
            return False

        self._spawn(cmd, on_line, "broker", timeout)
        return self

    def restart(self) -> BrokerProcess:
        """Start again on the same port and data dir (after kill() or stop())."""
        return self.start()

    def create_topic(
        self, name: str | None = None, partitions: int = 1, config: dict[str, str] | None = None
    ) -> str:
        """Create a topic on this broker (a unique name unless given) and return its name once it is ready."""
        return create_topic(self.bootstrap, partitions, name=name, config=config)

    def rss_bytes(self) -> int:
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def __enter__(self) -> BrokerProcess:
        return self.start()


class RegistryProcess(_ChildProcess):
    """`sluice registry` against ``bootstrap`` on 127.0.0.1 on a port of `free_port`'s; ``url`` once started.

    ``topic`` (default ``_schemas``) holds the schemas and ``group`` elects the primary (default
    ``<topic>-group`` when a topic is given), so registries with a topic of their own share a broker
    without seeing each other's schemas. A restart keeps the port (and the topic, so the schemas);
    ``kill()`` is a real SIGKILL.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str | None = None,
        *,
        group: str | None = None,
        port: int = 0,
        extra_args: list[str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group or (f"{topic}-group" if topic is not None else None)
        self.port = port
        self.extra_args = extra_args or []
        self.url: str | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self, timeout: float = 60.0) -> RegistryProcess:
        return self.launch().wait_ready(timeout)

    def wait_ready(self, timeout: float = 60.0) -> RegistryProcess:
        """Until a `launch`ed registry serves (RuntimeError with its output if it exited instead)."""
        self._await_ready("registry", timeout)
        return self

    def holds_seat(self) -> bool:
        """Whether this registry's log says it is the primary now (its last word on the matter)."""
        said = [line for line in self.output if "now the primary" in line or "no longer the primary" in line]
        return bool(said) and "now the primary" in said[-1]

    def launch(self) -> RegistryProcess:
        """Start without waiting (see `wait_ready`): registries started side by side start sooner."""
        if self.port == 0:  # below the ephemeral range, as BrokerProcess.start says why
            self.port = free_port()
        cmd = [sys.executable, "-m", "sluice", "registry", "--bootstrap", self.bootstrap,
               "--listen", f"127.0.0.1:{self.port}"]
        if self.topic is not None:
            cmd += ["--topic", self.topic]
        if self.group is not None:
            cmd += ["--group", self.group]
        cmd += self.extra_args
        self.output, self.url = [], None

        def on_line(line: str) -> bool:
            match = _REGISTRY_READY.match(line)
            if match:
                self.url = match.group(1)
                self.port = int(self.url.rsplit(":", 1)[1])  # the same port on restart
            return match is not None

        self._launch(cmd, on_line)
        return self

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, Any]:
        """One HTTP call: (status, JSON body decoded, or the text). Every answer, error or not, must carry
        the registry's content type (an AssertionError otherwise: this is a test helper)."""
        import urllib.error
        import urllib.request

        assert self.url is not None, "the registry is not started"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": REGISTRY_CONTENT_TYPE, **(headers or {})},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, payload, content_type = answer.status, answer.read(), answer.headers.get("Content-Type")
        except urllib.error.HTTPError as error:
            status, payload, content_type = error.code, error.read(), error.headers.get("Content-Type")
        assert content_type is not None and content_type.startswith(REGISTRY_CONTENT_TYPE), (content_type, payload)
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, payload.decode()

    def wait_primary(self, timeout: float = 30.0) -> None:
        """Until a write succeeds here (this registry or another one is primary)."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.call("PUT", "/config/__election_probe__", {"compatibility": "BACKWARD"})
            if status == 200:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no primary: {status} {body}")
            time.sleep(0.1)

    def __enter__(self) -> RegistryProcess:
        return self.start()


class SluiceCommand(_ChildProcess):
    """Any long-running `sluice <command> args…` (`serve`, `broker` with its own flags…), ready once a line
    starting with ``ready_prefix`` is printed. The caller picks every listener, so nothing takes a default
    port (`sluice serve` would take 8081/8082/9644 otherwise); ``output`` holds every line printed."""

    def __init__(self, *args: str, ready_prefix: str) -> None:
        self.args = list(args)
        self.ready_prefix = ready_prefix
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def launch(self) -> SluiceCommand:
        """Start without waiting (see `wait_ready`), so several can start side by side."""
        self.output = []
        self._launch([sys.executable, "-m", "sluice", *self.args], lambda line: line.startswith(self.ready_prefix))
        return self

    def wait_ready(self, timeout: float = 90.0) -> SluiceCommand:
        """Until the ready line (RuntimeError with the output if the command exited instead)."""
        self._await_ready(f"sluice {self.args[0]}", timeout)
        return self

    def start(self, timeout: float = 90.0) -> SluiceCommand:
        return self.launch().wait_ready(timeout)

    def __enter__(self) -> SluiceCommand:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.stop()
        except subprocess.TimeoutExpired:
            pass  # stop() killed it


def create_topic(
    bootstrap: str,
    partitions: int = 1,
    prefix: str = "t",
    timeout: float = 30.0,
    name: str | None = None,
    config: dict[str, str] | None = None,
) -> str:
    """Create `name` (default: a unique name from `prefix`); return it once metadata shows all its partitions."""
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    name = name or f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        future.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return name
        time.sleep(0.05)
    raise RuntimeError(f"topic {name} did not appear within {timeout:g}s")


def read_partition(bootstrap: str, topic: str, partition: int = 0, timeout: float = 30.0) -> dict[int, bytes]:
    """offset -> value of every record between the partition's watermarks, read by a plain confluent-kafka
    consumer (to check that what was acknowledged is where its answer said); an error event fails it."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
        consumer.assign([TopicPartition(topic, partition, low)])
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + timeout
        while len(seen) < high - low and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                seen[message.offset()] = message.value()
        return seen
    finally:
        consumer.close()


def start_together(*registries: RegistryProcess) -> None:
    """Start several registries side by side (each start is mostly waiting on Kafka)."""
    for registry in registries:
        registry.launch()
    for registry in registries:
        registry.wait_ready()


def wait_primary_together(*registries: RegistryProcess) -> None:
    """Until each of ``registries`` takes writes (one of them, or another, is the primary)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(registries)) as pool:
        list(pool.map(lambda registry: registry.wait_primary(), registries))


def _ephemeral_low() -> int:
    """Where the kernel's range for automatically chosen ports starts (Linux; 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORT_CLAIMS = Path(tempfile.gettempdir()) / f"sluice-port-claims-{os.getuid()}"
_PORT_CLAIM_PERIOD_S = 1800


def _claim(port: int) -> bool:
    """Claim ``port`` for this caller: False if another caller claimed it in this half hour or the last.

    A claim is an empty file named after the port in the current half hour's directory, created exclusively,
    so parallel test processes on one machine agree without talking. A claim lives 30 to 60 minutes: longer
    than any test that stops and restarts a child on its port. Older half hours' directories are removed.
    """
    period = int(time.time()) // _PORT_CLAIM_PERIOD_S
    if (_PORT_CLAIMS / str(period - 1) / str(port)).exists():
        return False
    current = _PORT_CLAIMS / str(period)
    if not current.is_dir():
        with contextlib.suppress(OSError):
            current.mkdir(parents=True, exist_ok=True)
            for old in _PORT_CLAIMS.iterdir():
                if old.name.isdigit() and int(old.name) < period - 1:
                    shutil.rmtree(old, ignore_errors=True)
    try:
        os.close(os.open(current / str(port), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        pass  # no writable temp dir: the port is as good as an unclaimed one, as before claims existed
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago, for a child process to listen on.

    Drawn at random from below the kernel's ephemeral range: a port the kernel handed out (bind to 0) is the
    kind every outgoing connection also takes, and under parallel tests one of them can grab it before the
    child binds it. Below that range the competitors are other callers of this function, in this process or
    another: each port handed out is claimed for a while with a file (see `_claim`), so no two callers get
    the same port, not even while the broker it was given to is down between a kill and its restart.
    """
    rng = random.SystemRandom()
    low = _ephemeral_low()
    if low > 10_000:
        for _ in range(50):
            port = rng.randrange(10_000, low)
            if not _claim(port):
                continue
            with socket.socket() as probe:
                try:
                    probe.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
