"""What a new user meets first: the first administrator is created before the broker's first start (the data
directory does not exist yet), and a default broker serves its admin API and /metrics on 127.0.0.1:9644."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

PASSWORD = "first-admin-secret"


def sluice(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_users_create_makes_the_missing_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "data"
    made = sluice(
        "users",
        "create",
        "admin",
        "--mechanism",
        "SCRAM-SHA-256",
        "--password-stdin",
        "--data-dir",
        str(data_dir),
        stdin=PASSWORD + "\n",
    )
    assert made.returncode == 0, made.stderr
    assert (data_dir / "security" / "credentials.json").is_file()
    listed = sluice("users", "list", "--data-dir", str(data_dir))
    assert listed.returncode == 0 and "admin" in listed.stdout and "SCRAM-SHA-256" in listed.stdout
    assert PASSWORD not in (data_dir / "security" / "credentials.json").read_text()


def test_users_create_names_a_data_dir_it_cannot_make(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    refused = sluice(
        "users",
        "create",
        "admin",
        "--password-stdin",
        "--data-dir",
        str(blocker / "data"),
        stdin=PASSWORD + "\n",
    )
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and str(blocker / "data") in said and "Traceback" not in said


def _start(*args: str) -> tuple[subprocess.Popen[str], list[str], threading.Event]:
    """`sluice broker` with `args`; the returned event is set once the start-up lines are out (the line that
    says the broker is ready, after the Kafka and admin listeners), or the process ended."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "broker",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            ":memory:",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    listening = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("sluice broker ready"):
                listening.set()
        listening.set()

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines, listening


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def test_a_default_broker_serves_the_admin_api_on_9644() -> None:
    proc, lines, listening = _start()
    try:
        assert listening.wait(60) and proc.poll() is None, "".join(lines)
        assert "sluice admin listening on http://127.0.0.1:9644\n" in lines, "".join(lines)
        with urllib.request.urlopen("http://127.0.0.1:9644/metrics", timeout=30) as response:
            assert response.status == 200 and b"sluice_" in response.read()
    finally:
        _stop(proc)


@pytest.mark.parametrize("flag", ["--admin-listen", "--metrics-listen"])
def test_admin_listen_takes_an_address_or_off(flag: str) -> None:
    from sluice.testing import free_port

    port = free_port()
    proc, lines, listening = _start(flag, f"127.0.0.1:{port}")
    off, off_lines, off_listening = _start(flag, "off")
    try:
        assert listening.wait(60) and off_listening.wait(60), "".join(lines + off_lines)
        assert f"sluice admin listening on http://127.0.0.1:{port}\n" in lines, "".join(lines)
        assert off.poll() is None and not any("admin listening" in line for line in off_lines), off_lines
    finally:
        _stop(proc)
        _stop(off)
