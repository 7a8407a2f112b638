"""Every client command finds the broker through SLUICE_BOOTSTRAP when -b is not given, and hands its
`-X KEY=VALUE` settings to the Kafka clients it makes (a setting librdkafka does not know is refused with
its name, which shows the settings reach the client)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from typer.testing import CliRunner

from sluice.cli import app

runner = CliRunner()
GOOD = ("-X", "client.id=settings-test", "-X", "socket.keepalive.enable=true")
BAD = ("-X", "no.such.property=1")


def cli(*args: str, bootstrap: str) -> tuple[int, str]:
    """Exit code and stdout+stderr, with the broker given only through the environment."""
    result = runner.invoke(app, list(args), env={"SLUICE_BOOTSTRAP": bootstrap})
    return result.exit_code, result.stdout + result.stderr


def test_every_client_command_takes_the_environment_bootstrap_and_x_settings(bootstrap: str) -> None:
    # Short names: the tables must not wrap them.
    topic_name = f"settings-{uuid.uuid4().hex[:8]}"
    group_name = f"g-{topic_name}"

    def ok(*args: str) -> str:
        code, out = cli(*args, *GOOD, bootstrap=bootstrap)
        assert code == 0, (args, out)
        return out

    ok("topics", "create", topic_name, "-p", "2")
    assert topic_name in ok("topics", "list")
    assert topic_name in ok("topics", "describe", topic_name)
    produced = subprocess.run(
        [sys.executable, "-m", "sluice", "produce", topic_name, *GOOD],
        input="a\nb\n",
        text=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "SLUICE_BOOTSTRAP": bootstrap},
    )
    assert produced.returncode == 0 and "produced 2" in produced.stderr, produced.stderr
    ok("groups", "reset-offsets", group_name, "--topic", topic_name, "--to-latest")
    described = json.loads(ok("groups", "describe", group_name, "--json"))
    assert sum(row["current_offset"] for row in described["offsets"]) == 2
    assert group_name in ok("groups", "list")
    ok("groups", "delete", group_name)

    # The same commands with a property librdkafka does not know: refused, naming it.
    for args in (
        ("topics", "create", f"{topic_name}-x"),
        ("topics", "list"),
        ("topics", "describe", topic_name),
        ("topics", "delete", topic_name),
        ("groups", "list"),
        ("groups", "describe", group_name),
        ("groups", "reset-offsets", group_name, "--topic", topic_name, "--to-earliest"),
        ("groups", "delete", group_name),
        ("pipeline", "stats", "--topics", topic_name),
    ):
        code, out = cli(*args, *BAD, bootstrap=bootstrap)
        assert code != 0 and "no.such.property" in out, (args, code, out)
    ok("topics", "delete", topic_name)
    assert topic_name not in ok("topics", "list")
