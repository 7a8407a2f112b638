"""Helpers for the console tests: the console served from a thread, and a Tansu broker process."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from sluice.console.app import CONSOLE, ConsoleConfig
from sluice.console.server import RunningConsole, start_console
from sluice.testing import free_port


class ConsoleThread:
    """The console's aiohttp server on its own event loop in a thread of the test process."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.running: RunningConsole | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> ConsoleThread:
        self.thread.start()
        self.running = asyncio.run_coroutine_threadsafe(start_console(self.config), self.loop).result(30)
        return self

    @property
    def url(self) -> str:
        assert self.running is not None
        return self.running.url.rstrip("/")

    @property
    def console(self) -> Any:
        assert self.running is not None
        return self.running.runner.app[CONSOLE]

    def call(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.running is not None:
            self.call(self.running.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class TansuProcess:
    def __init__(self, binary: Path, log: Path) -> None:
        self.binary = binary
        self.log = log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TansuProcess:
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited at start: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("tansu did not start listening")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
