"""The client commands (topics, produce, consume, groups) reach a SASL_SSL listener with the security
settings given as `-X KEY=VALUE`, like kcat; a wrong password is a clear error, not a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker


def sluice(*args: str, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "1000"}
    return subprocess.run(
        [sys.executable, "-m", "sluice", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def x_settings(broker: SecureBroker, password: str = ADMIN_PASSWORD) -> list[str]:
    settings = broker.sasl(ADMIN, password)
    bootstrap = settings.pop("bootstrap.servers")
    return ["-b", bootstrap, *(arg for key, value in settings.items() for arg in ("-X", f"{key}={value}"))]


def test_client_commands_over_sasl_ssl_with_x_settings(secure_broker: SecureBroker) -> None:
    secured = x_settings(secure_broker)
    topic, group = f"secx-{uuid.uuid4().hex[:8]}", f"secx-g-{uuid.uuid4().hex[:8]}"
    created = sluice("topics", "create", topic, "-p", "2", *secured)
    assert created.returncode == 0, created.stderr
    produced = sluice("produce", topic, "-p", "1", "-K", ":", *secured, stdin="k1:one\nk2:two\n")
    assert produced.returncode == 0 and "produced 2" in produced.stderr, produced.stderr
    consumed = sluice("consume", topic, "-o", "beginning", "-e", "-f", "%p %k %s\\n", *secured)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["1 k1 one", "1 k2 two"]
    grouped = sluice("consume", topic, "-g", group, "-p", "1", "-o", "beginning", "-c", "1", *secured)
    assert grouped.returncode == 0 and grouped.stdout.splitlines() == ["one"], grouped.stderr
    reset = sluice(
        "groups", "reset-offsets", group, "--topic", f"{topic}:1", "--to-offset", "2", "--json", *secured
    )
    assert reset.returncode == 0, reset.stderr
    assert [row["new_offset"] for row in json.loads(reset.stdout)["partitions"]] == [2]
    described = sluice("groups", "describe", group, "--json", *secured)
    assert described.returncode == 0, described.stderr
    assert [row["current_offset"] for row in json.loads(described.stdout)["offsets"]] == [2]


def test_a_wrong_password_is_a_clear_error(secure_broker: SecureBroker) -> None:
    wrong = x_settings(secure_broker, "not-the-password")
    # A few, not every command: the broker doubles its answer delay with each failed login from one host.
    commands = (("consume", "anything", "-e"), ("groups", "list"), ("acls", "list"))
    for args in commands:
        result = sluice(*args, *wrong)
        assert result.returncode != 0, (args, result.stdout)
        assert "Authentication failed" in result.stderr or "SASL" in result.stderr, (args, result.stderr)
        # The command's own last word, at the first refusal rather than after librdkafka's retries time out.
        assert "error: authentication failed" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)


def test_users_and_acls_commands_take_x_settings_and_sluice_bootstrap(secure_broker: SecureBroker) -> None:
    """`sluice users` and `sluice acls` connect like every other client command: SLUICE_BOOTSTRAP and -X."""
    settings = secure_broker.sasl(ADMIN, ADMIN_PASSWORD)
    os.environ["SLUICE_BOOTSTRAP"] = settings.pop("bootstrap.servers")
    try:
        secured = [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]
        user, topic = f"x-{uuid.uuid4().hex[:8]}", f"x-acl-{uuid.uuid4().hex[:8]}"
        created = sluice("users", "create", user, "--password-stdin", *secured, stdin="pw-123456\n")
        assert created.returncode == 0, created.stderr
        listed = sluice("users", "list", *secured)
        assert listed.returncode == 0 and user in listed.stdout, listed.stderr
        added = sluice(
            "acls", "add", "--principal", f"User:{user}", "--operation", "Read", "--topic", topic, *secured
        )
        assert added.returncode == 0, added.stderr
        acls = sluice("acls", "list", "--topic", topic, *secured)
        assert acls.returncode == 0 and f"User:{user}" in acls.stdout, acls.stderr
        # Without the -X security settings the same commands cannot log in: an error, not a hang or traceback.
        refused = sluice("acls", "list", "--topic", topic, "-X", "socket.timeout.ms=3000", timeout=60)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr, refused.stderr
    finally:
        del os.environ["SLUICE_BOOTSTRAP"]
