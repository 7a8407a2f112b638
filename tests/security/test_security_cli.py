"""`sluice users` offline (data dir, broker stopped) and online (-b with SASL options), `sluice acls`."""

from __future__ import annotations

import json
import uuid

from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker, sluice_cli

from sluice.security.authn import CredentialStore


def online(broker: SecureBroker) -> list[str]:
    return [
        "-b",
        broker.address("SASL_SSL"),
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        "--sasl-username",
        ADMIN,
        "--sasl-password",
        ADMIN_PASSWORD,
        "--ssl-cafile",
        str(broker.certs.ca_path),
    ]


def test_users_offline_store_salted_credentials_never_the_password(tmp_path) -> None:
    sluice_cli(
        "users",
        "create",
        "bob",
        "--mechanism",
        "SCRAM-SHA-512",
        "--password-stdin",
        "--data-dir",
        str(tmp_path),
        stdin="bobs-password\n",
    )
    stored = (tmp_path / "security" / "credentials.json").read_text()
    assert "bobs-password" not in stored
    store = CredentialStore(tmp_path / "security" / "credentials.json")
    assert store.check_password("bob", "bobs-password") and not store.check_password("bob", "other")
    listed = sluice_cli("users", "list", "--data-dir", str(tmp_path), "--json")
    assert json.loads(listed.stdout) == {"bob": {"SCRAM-SHA-512": 8192}}
    sluice_cli("users", "delete", "bob", "--data-dir", str(tmp_path))
    assert json.loads(sluice_cli("users", "list", "--data-dir", str(tmp_path), "--json").stdout) == {}


def test_an_explicit_data_dir_wins_over_a_bootstrap_from_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SLUICE_BOOTSTRAP", "127.0.0.1:1")  # what a shell set up for online commands has
    sluice_cli("users", "create", "kim", "--password-stdin", "--data-dir", str(tmp_path), stdin="pw\n")
    assert CredentialStore(tmp_path / "security" / "credentials.json").check_password("kim", "pw")
    both = sluice_cli("users", "list", "--data-dir", str(tmp_path), "-b", "127.0.0.1:2", check=False)
    assert both.returncode != 0 and "exactly one of" in both.stderr  # both given on the command line


def test_the_credential_file_is_readable_by_its_owner_only(tmp_path) -> None:
    sluice_cli(
        "users", "create", "eve", "--password-stdin", "--data-dir", str(tmp_path), stdin="eves-password\n"
    )
    path = tmp_path / "security" / "credentials.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o077 == 0


def test_users_cli_refuses_bad_input(tmp_path) -> None:
    no_stdin = sluice_cli("users", "create", "x", "--data-dir", str(tmp_path), check=False)
    assert no_stdin.returncode == 1 and "--password-stdin" in no_stdin.stderr
    both = sluice_cli(
        "users",
        "create",
        "x",
        "--password-stdin",
        "--data-dir",
        str(tmp_path),
        "-b",
        "h:1",
        stdin="pw\n",
        check=False,
    )
    assert both.returncode == 1 and "exactly one" in both.stderr
    bad_mech = sluice_cli(
        "users",
        "create",
        "x",
        "--mechanism",
        "MD5",
        "--password-stdin",
        "--data-dir",
        str(tmp_path),
        stdin="pw\n",
        check=False,
    )
    assert bad_mech.returncode == 1


def test_users_and_acls_online(secure_broker: SecureBroker) -> None:
    user = f"cli{uuid.uuid4().hex[:6]}"
    sluice_cli(
        "users",
        "create",
        user,
        "--mechanism",
        "SCRAM-SHA-256",
        "--password-stdin",
        *online(secure_broker),
        stdin="cli-pw\n",
    )
    listed = json.loads(sluice_cli("users", "list", "--json", *online(secure_broker)).stdout)
    assert listed[user] == {"SCRAM-SHA-256": 8192}
    topic = f"cli-{user}"
    sluice_cli(
        "acls",
        "add",
        "--principal",
        f"User:{user}",
        "--operation",
        "Write",
        "--operation",
        "Describe",
        "--topic",
        topic,
        *online(secure_broker),
    )
    sluice_cli(
        "acls",
        "add",
        "--principal",
        f"User:{user}",
        "--operation",
        "Read",
        "--topic",
        topic,
        "--deny",
        *online(secure_broker),
    )
    rows = json.loads(
        sluice_cli("acls", "list", "--principal", f"User:{user}", "--json", *online(secure_broker)).stdout
    )
    assert sorted((r["operation"], r["permission"], r["resource_name"]) for r in rows) == [
        ("DESCRIBE", "ALLOW", topic),
        ("READ", "DENY", topic),
        ("WRITE", "ALLOW", topic),
    ]
    removed = sluice_cli("acls", "remove", "--principal", f"User:{user}", "--deny", *online(secure_broker))
    assert "removed 1" in removed.stdout
    sluice_cli("users", "delete", user, *online(secure_broker))
    assert user not in json.loads(sluice_cli("users", "list", "--json", *online(secure_broker)).stdout)
