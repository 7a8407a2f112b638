"""What a new user meets first: the first administrator is created before the broker's first start (the data
directory does not exist yet), and a default broker serves its admin API and /metrics on 127.0.0.1:9644."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from sluice.testing import SluiceCommand, free_port

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


def _broker(*args: str) -> SluiceCommand:
    """`sluice broker` with `args`, ready once the line that says so is out (after the Kafka and admin
    listeners' lines)."""
    return SluiceCommand(
        "broker",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        ":memory:",
        *args,
        ready_prefix="sluice broker ready",
    )


def test_a_default_broker_serves_the_admin_api_on_9644() -> None:
    with _broker() as served:
        assert "sluice admin listening on http://127.0.0.1:9644\n" in served.output, "".join(served.output)
        with urllib.request.urlopen("http://127.0.0.1:9644/metrics", timeout=30) as response:
            assert response.status == 200 and b"sluice_" in response.read()


@pytest.mark.parametrize("flag", ["--admin-listen", "--metrics-listen"])
def test_admin_listen_takes_an_address_or_off(flag: str) -> None:
    port = free_port()
    served, off = _broker(flag, f"127.0.0.1:{port}").launch(), _broker(flag, "off").launch()
    try:
        served.wait_ready(60)
        off.wait_ready(60)
        assert f"sluice admin listening on http://127.0.0.1:{port}\n" in served.output, "".join(served.output)
        assert not any("admin listening" in line for line in off.output), off.output
    finally:
        for broker in (served, off):
            try:
                broker.stop()
            except subprocess.TimeoutExpired:
                pass  # stop() killed it
