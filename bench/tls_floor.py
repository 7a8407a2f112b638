"""The floor under TLS in a Python broker on this machine: the record layer alone, no Kafka.

    .venv/bin/python bench/tls_floor.py                  # 1 GB per case, 2 rounds
    .venv/bin/python bench/tls_floor.py --mb 300 --rounds 3

A server process receives (or sends) a stream over TLS 1.3 from a plain Python ssl client in another process,
in three ways, side by side:
  - uvloop:  asyncio's TLS transport under uvloop (memory BIOs), the way the broker's listeners run today;
  - socket:  a non-blocking ssl.SSLSocket driven by loop.add_reader/add_writer (OpenSSL reads the socket
             itself: no memory-BIO copies);
  - thread:  a thread per connection doing blocking SSLSocket reads, handing plaintext to the event loop,
             so decryption could overlap the loop's Python work (receive only).
With --work-us N each KiB received also costs N microseconds of Python on the event loop, standing in for
the broker's own per-message work (about 0.5-0.7 us per 1 KiB message in plaintext, see security_bench.py).
Printed: MB/s and the server's CPU per KiB. The figures bound what TLS costs any design that keeps
OpenSSL inside the Python process: compare them with the broker's whole plaintext cost per 1 KiB message.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median

CHUNK = 1 << 20


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spend(nbytes: int, us_per_kib: float) -> None:
    """Python work on the calling thread, proportional to the bytes received."""
    if us_per_kib <= 0:
        return
    end = time.thread_time() + nbytes / 1024 * us_per_kib / 1e6
    while time.thread_time() < end:
        pass


class _Stream(asyncio.BufferedProtocol):
    def __init__(
        self, done: asyncio.Future[tuple[float, float]], direction: str, total: int, work: float
    ) -> None:
        self.done, self.direction, self.total, self.work = done, direction, total, work
        self.buffer = bytearray(CHUNK)
        self.sent = 0
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.started = (time.perf_counter(), cpu_seconds())
        if self.direction == "send":
            self.pump()

    def pump(self) -> None:
        payload = b"x" * CHUNK
        while self.sent < self.total and not self.paused:
            self.transport.write(payload)  # type: ignore[attr-defined]
            self.sent += CHUNK
        if self.sent >= self.total:
            self.transport.close()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)

    def buffer_updated(self, nbytes: int) -> None:
        spend(nbytes, self.work)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        wall, cpu = self.started
        if not self.done.done():
            self.done.set_result((time.perf_counter() - wall, cpu_seconds() - cpu))


async def serve(
    mode: str, direction: str, total: int, work: float, context: ssl.SSLContext
) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[float, float]] = loop.create_future()
    if mode == "uvloop":
        server = await loop.create_server(
            lambda: _Stream(done, direction, total, work), "127.0.0.1", 0, ssl=context
        )
        print(server.sockets[0].getsockname()[1], flush=True)
        return await done
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    raw, _ = listener.accept()
    tls = context.wrap_socket(raw, server_side=True)
    started = (time.perf_counter(), cpu_seconds())

    def finish() -> None:
        if not done.done():
            done.set_result((time.perf_counter() - started[0], cpu_seconds() - started[1]))

    if mode == "thread":

        def deliver(chunk: bytes | None) -> None:
            if chunk is None:
                finish()
            else:
                spend(len(chunk), work)

        def read_forever() -> None:
            view = memoryview(bytearray(CHUNK))
            while n := tls.recv_into(view):
                while tls.pending() and n < CHUNK:
                    n += tls.recv_into(view[n:])
                loop.call_soon_threadsafe(deliver, bytes(view[:n]))
            loop.call_soon_threadsafe(deliver, None)

        threading.Thread(target=read_forever, daemon=True).start()
        return await done
    tls.setblocking(False)
    view = memoryview(bytearray(CHUNK))
    if direction == "recv":

        def readable() -> None:
            got = 0
            try:
                while got < CHUNK:
                    n = tls.recv_into(view[got:])
                    if n == 0:
                        spend(got, work)
                        loop.remove_reader(tls.fileno())
                        finish()
                        return
                    got += n
            except ssl.SSLWantReadError:
                pass
            spend(got, work)

        loop.add_reader(tls.fileno(), readable)
    else:
        payload = b"x" * CHUNK
        state = {"sent": 0}

        def writable() -> None:
            while state["sent"] < total:
                try:
                    state["sent"] += tls.send(payload)
                except ssl.SSLWantWriteError:
                    return
            loop.remove_writer(tls.fileno())
            tls.close()
            finish()

        loop.add_writer(tls.fileno(), writable)
    return await done


def client(port: int, direction: str, total: int, ca: str) -> None:
    context = ssl.create_default_context(cafile=ca)
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1"
    ) as tls:
        if direction == "recv":  # the server receives
            payload, sent = b"y" * CHUNK, 0
            while sent < total:
                tls.sendall(payload)
                sent += CHUNK
        else:
            view = memoryview(bytearray(CHUNK))
            try:
                while tls.recv_into(view):
                    pass
            except (ssl.SSLEOFError, ConnectionResetError):
                pass


def run_case(mode: str, direction: str, work: float, total: int, files: Path) -> tuple[float, float]:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode, direction, str(total), str(work), str(files)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    port = int(server.stdout.readline())
    client_proc = subprocess.Popen(
        [sys.executable, __file__, "--client", str(port), direction, str(total), str(files / "ca.pem")]
    )
    client_proc.wait(600)
    out = server.stdout.readline().split()
    server.wait(60)
    return float(out[0]), float(out[1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        mode, direction, total, work, files = sys.argv[2:7]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(Path(files) / "server.pem"))
        if mode == "uvloop":
            import uvloop

            uvloop.install()
        wall, cpu = asyncio.run(serve(mode, direction, int(total), float(work), context))
        print(wall, cpu, flush=True)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work-us", type=float, default=0.5, help="Python work per KiB received (0: none)")
    args = parser.parse_args()
    total = args.mb * 1_000_000
    with tempfile.TemporaryDirectory(prefix="tls-floor-") as tmp:
        files = Path(tmp)
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(files / "ca.pem"))
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(files / "server.pem"))
        cases = [
            ("uvloop", "recv", 0.0),
            ("socket", "recv", 0.0),
            ("uvloop", "send", 0.0),
            ("socket", "send", 0.0),
        ]
        if args.work_us > 0:
            cases += [(mode, "recv", args.work_us) for mode in ("uvloop", "socket", "thread")]
        results: dict[tuple[str, str, float], list[tuple[float, float]]] = {case: [] for case in cases}
        for _ in range(args.rounds):
            for case in cases:  # rounds alternate the cases, so all see the same machine
                results[case].append(run_case(*case, total, files))
    print(f"\n{args.mb} MB per case over TLS 1.3, median of {args.rounds} round(s)")
    print(f"{'server':8}{'direction':>10}{'work us/KiB':>13}{'MB/s':>9}{'server CPU us/KiB':>19}")
    for (mode, direction, work), rows in results.items():
        rate = median(total / wall / 1e6 for wall, _ in rows) or 0.0
        cpu = median(c / (total / 1024) * 1e6 for _, c in rows) or 0.0
        print(f"{mode:8}{direction:>10}{work:>13.1f}{rate:>9.0f}{cpu:>19.3f}")


if __name__ == "__main__":
    main()
