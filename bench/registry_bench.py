"""The Schema Registry's speed, side by side with Karapace on the same broker, in one run:

- GET /schemas/ids/{id} and POST /subjects/{s} (lookup): requests/s and server CPU per request;
- register of a new version: p50/p99 latency (the broker fsyncs before acknowledging, its default).

    .venv/bin/python bench/registry_bench.py --karapace-cmd "/path/to/venv/bin/python -m karapace"
    .venv/bin/python bench/registry_bench.py --karapace-url http://127.0.0.1:8081 --karapace-pid 1234

Karapace is not on PyPI: install it from its source into a venv of its own and pass the command; the bench
sets KARAPACE_BOOTSTRAP_URI/HOST/PORT/TOPIC_NAME/GROUP_ID (and, for a source checkout, PYTHONPATH via
--karapace-pythonpath). Each registry gets its own `_schemas` topic on one `sluice broker`. The load
generator is --clients processes (a bare HTTP/1.1 client, --concurrency connections each); the ratios compare what the servers spend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SluiceBroker, cpu_seconds, free_port, percentile, ratio

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def schema(i: int, fields: int = 6) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": f"Bench{i}",
            "namespace": "bench.registry",
            "fields": [{"name": f"f{j}", "type": ["null", "string"], "default": None} for j in range(fields)],
        }
    )


def call(url: str, method: str = "GET", body: object = None, timeout: float = 30) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return 0, None


def wait_writable(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _ = call(f"{url}/config", "PUT", {"compatibility": "NONE"}, timeout=5)
        if status == 200:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{url} never accepted a write")


class Server:
    def __init__(
        self, name: str, url: str, pid: int | None, proc: subprocess.Popen[bytes] | None = None
    ) -> None:
        self.name, self.url, self.pid, self.proc = name, url, pid, proc

    def cpu(self) -> float:
        return cpu_seconds(self.pid) if self.pid else float("nan")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_sluice(bootstrap: str, log: Path) -> Server:
    port = free_port()
    cmd = [sys.executable, "-m", "sluice", "registry", "--bootstrap", bootstrap, "--listen", f"127.0.0.1:{port}",
           "--topic", "_schemas_sluice_bench", "--group", "sluice-bench-registry"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    return Server("sluice", f"http://127.0.0.1:{port}", proc.pid, proc)


def start_karapace(args: argparse.Namespace, bootstrap: str, log: Path) -> Server:
    if args.karapace_url:
        return Server("karapace", args.karapace_url.rstrip("/"), args.karapace_pid)
    port = free_port()
    env = {
        **os.environ,
        "KARAPACE_BOOTSTRAP_URI": bootstrap,
        "KARAPACE_HOST": "127.0.0.1",
        "KARAPACE_PORT": str(port),
        "KARAPACE_REGISTRY_HOST": "127.0.0.1",
        "KARAPACE_REGISTRY_PORT": str(port),
        "KARAPACE_TOPIC_NAME": "_schemas_karapace_bench",
        "KARAPACE_GROUP_ID": "karapace-bench-registry",
        "KARAPACE_LOG_LEVEL": "WARNING",
    }
    env.pop("PYTHONPATH", None)
    if args.karapace_pythonpath:
        env["PYTHONPATH"] = args.karapace_pythonpath
    proc = subprocess.Popen(
        shlex.split(args.karapace_cmd), stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env
    )
    return Server("karapace", f"http://127.0.0.1:{port}", proc.pid, proc)


def _raw_request(method: str, url: str, body: object) -> tuple[str, int, bytes]:
    """(host, port, the request's bytes): prepared once, so the load generator spends little per request."""
    parts = urllib.parse.urlsplit(url)
    payload = b"" if body is None else json.dumps(body).encode()
    head = (
        f"{method} {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: {CONTENT_TYPE}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return parts.hostname or "127.0.0.1", parts.port or 80, head.encode() + payload


async def hammer(requests: list[tuple[str, str, object]], concurrency: int) -> float:
    """Send every (method, url, body) over `concurrency` keep-alive connections; the wall seconds it took.
    A bare HTTP/1.1 client: an aiohttp client costs more CPU per request than the servers measured here."""
    prepared = [_raw_request(*r) for r in requests]
    queue = iter(prepared)
    failures = 0

    async def worker() -> None:
        nonlocal failures
        host, port, _ = prepared[0]
        reader, writer = await asyncio.open_connection(host, port)
        for _, _, raw in queue:
            writer.write(raw)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            failures += status != 200
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{failures} requests failed")
    return elapsed


def _hammer_share(share: tuple[list[tuple[str, str, object]], int]) -> float:
    return asyncio.run(hammer(*share))


def measure(
    server: Server, requests: list[tuple[str, str, object]], concurrency: int, clients: int
) -> tuple[float, float]:
    """(requests per second, server CPU microseconds per request); the load comes from `clients` processes so
    that the load generator is not what limits the rate."""
    asyncio.run(hammer(requests[: max(1, len(requests) // 10)], concurrency))  # warm-up
    shares = [(requests[i::clients], concurrency) for i in range(clients)]
    with multiprocessing.Pool(clients) as pool:
        cpu0 = server.cpu()
        started = time.perf_counter()
        pool.map(_hammer_share, shares)
        elapsed = time.perf_counter() - started
        cpu = server.cpu() - cpu0
    return len(requests) / elapsed, cpu / len(requests) * 1e6


def register_latencies(server: Server, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        status, body = call(
            f"{server.url}/subjects/register-bench/versions", "POST", {"schema": schema(i, 1 + i % 7)}
        )
        latencies.append(time.perf_counter() - started)
        assert status == 200, body
    return sorted(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--karapace-cmd", help="command that runs Karapace (configured through KARAPACE_* env)"
    )
    parser.add_argument(
        "--karapace-pythonpath", help="PYTHONPATH for the Karapace command (a source checkout)"
    )
    parser.add_argument("--karapace-url", help="an already running Karapace on the same broker instead")
    parser.add_argument("--karapace-pid", type=int, help="its process id, for CPU per request")
    parser.add_argument("--bootstrap", help="an existing broker (default: start a sluice broker, fsync on)")
    parser.add_argument("--schemas", type=int, default=50)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--registers", type=int, default=200)
    parser.add_argument("--clients", type=int, default=2, help="load-generating processes")
    args = parser.parse_args()

    logs = Path(tempfile.mkdtemp(prefix="registry-bench-"))
    broker = None if args.bootstrap else SluiceBroker(log_path=logs / "broker.log").start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    servers = [start_sluice(bootstrap, logs / "sluice.log")]
    if args.karapace_cmd or args.karapace_url:
        servers.append(start_karapace(args, bootstrap, logs / "karapace.log"))
    results: dict[str, dict[str, float]] = {}
    try:
        for server in servers:
            wait_writable(server.url)
            ids = []
            for i in range(args.schemas):
                status, body = call(
                    f"{server.url}/subjects/bench-{i}/versions", "POST", {"schema": schema(i)}
                )
                assert status == 200, (server.name, body)
                ids.append(body["id"])  # type: ignore[index]
            by_id = [
                ("GET", f"{server.url}/schemas/ids/{ids[n % len(ids)]}", None) for n in range(args.requests)
            ]
            lookups = [
                (
                    "POST",
                    f"{server.url}/subjects/bench-{n % args.schemas}",
                    {"schema": schema(n % args.schemas)},
                )
                for n in range(args.requests)
            ]
            got: dict[str, float] = {}
            got["id_rps"], got["id_cpu_us"] = measure(server, by_id, args.concurrency, args.clients)
            got["lookup_rps"], got["lookup_cpu_us"] = measure(server, lookups, args.concurrency, args.clients)
            latencies = register_latencies(server, args.registers)
            got["register_p50_ms"] = percentile(latencies, 50) * 1000
            got["register_p99_ms"] = percentile(latencies, 99) * 1000
            results[server.name] = got
    finally:
        for server in servers:
            server.stop()
        if broker is not None:
            broker.stop()

    print(f"registry bench: {args.schemas} schemas, {args.requests} requests x {args.concurrency} connections, "
          f"{args.registers} registers (broker fsync before ack: {'default on' if broker else 'as given'}); logs {logs}")  # fmt: skip
    names = list(results)
    print(f"{'':28}" + "".join(f"{n:>14}" for n in names) + ("   sluice/karapace" if len(names) > 1 else ""))
    for metric in (
        "id_rps",
        "id_cpu_us",
        "lookup_rps",
        "lookup_cpu_us",
        "register_p50_ms",
        "register_p99_ms",
    ):
        row = f"{metric:28}" + "".join(f"{results[n][metric]:>14.1f}" for n in names)
        if len(names) > 1:
            value = ratio(results["sluice"][metric], results["karapace"][metric])
            row += f"   {value:.2f}x" if value is not None else ""
        print(row)
    if len(names) > 1:
        for kind in ("id", "lookup"):
            speed = ratio(results["sluice"][f"{kind}_rps"], results["karapace"][f"{kind}_rps"])
            cpu = ratio(results["karapace"][f"{kind}_cpu_us"], results["sluice"][f"{kind}_cpu_us"])
            print(
                f"{kind}: sluice serves {speed:.2f}x Karapace's requests/s at 1/{cpu:.2f} of its CPU per request"
            )


if __name__ == "__main__":
    main()
