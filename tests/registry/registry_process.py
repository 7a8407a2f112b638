"""`sluice registry` in a child process for the registry tests: an ephemeral port, its own `_schemas` topic
and election group (so tests sharing the session broker never see each other's schemas)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import trustme

_READY = re.compile(r"^sluice registry listening on (\S+)$")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A fresh CA and a certificate for 127.0.0.1 it signed, as PEM files: (cert, key, ca)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path, ca_path = directory / "cert.pem", directory / "key.pem", directory / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    ca.cert_pem.write_to_path(str(ca_path))
    return cert_path, key_path, ca_path


class RegistryProcess:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        group: str | None = None,
        port: int = 0,
        extra: list[str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group or f"{topic}-group"
        self.port = port
        self.extra = extra or []
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._ready = threading.Event()

    def start(self, timeout: float = 60.0) -> RegistryProcess:
        return self.launch().wait_ready(timeout)

    def launch(self) -> RegistryProcess:
        """Start the process without waiting for it (see `wait_ready`), so several can start side by side."""
        cmd = [
            sys.executable, "-m", "sluice", "registry", "--bootstrap", self.bootstrap,
            "--listen", f"127.0.0.1:{self.port}", "--topic", self.topic, "--group", self.group, *self.extra,
        ]  # fmt: skip
        self.output, self.url = [], ""
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self._ready = ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                match = _READY.match(line.strip())
                if match:
                    self.url = match.group(1)
                    self.port = int(self.url.rsplit(":", 1)[1])  # the same port on restart
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        return self

    def wait_ready(self, timeout: float = 60.0) -> RegistryProcess:
        assert self.proc is not None
        if not self._ready.wait(timeout) or not self.url or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("registry did not start:\n" + "".join(self.output))
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def holds_seat(self) -> bool:
        """Whether this registry's log says it is the primary now (its last word on the matter)."""
        said = [line for line in self.output if "now the primary" in line or "no longer the primary" in line]
        return bool(said) and "now the primary" in said[-1]

    def wait_primary(self, timeout: float = 30.0) -> None:
        """Until a write succeeds here (this one or another registry is primary)."""
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.call("PUT", "/config/__election_probe__", {"compatibility": "BACKWARD"})
            if status == 200:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no primary: {status} {body}")
            time.sleep(0.1)

    def call(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
        headers: dict[str, str] | None = None, timeout: float = 30.0,
    ) -> tuple[int, Any]:  # fmt: skip
        """One HTTP call: (status, decoded JSON body or text)."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": CONTENT_TYPE, **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, payload, content_type = (
                    answer.status,
                    answer.read(),
                    answer.headers.get("Content-Type"),
                )
        except urllib.error.HTTPError as error:
            status, payload, content_type = error.code, error.read(), error.headers.get("Content-Type")
        assert content_type is not None and content_type.startswith(CONTENT_TYPE), (content_type, payload)
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, payload.decode()


def start_together(*procs: RegistryProcess) -> None:
    """Start several registries side by side (each start is mostly waiting on Kafka)."""
    for proc in procs:
        proc.launch()
    for proc in procs:
        proc.wait_ready()


def wait_primary_together(*procs: RegistryProcess) -> None:
    with ThreadPoolExecutor(len(procs)) as pool:
        list(pool.map(lambda proc: proc.wait_primary(), procs))
