"""`sluice users`: SCRAM users, offline in a stopped broker's data dir or online over the wire (KIP-554).

Offline (`--data-dir`) is how the first administrator is made, like `kafka-storage format --add-scram`; it
writes the same credential file the broker reads at start, so the broker must be stopped. Online (`-b`)
goes through confluent-kafka's AdminClient (DescribeUserScramCredentials / AlterUserScramCredentials), with
the client security options (cli.common), against sluice or any Kafka.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sluice.cli.common import (
    ClientSecurity,
    Settings,
    console,
    fail,
    new_client,
    parse_settings,
    serving,
    with_client_security,
)

app = typer.Typer(help="Create, list and delete SCRAM users.", no_args_is_help=True)

TIMEOUT_S = 15.0
Mechanism = Annotated[str, typer.Option("--mechanism", help="SCRAM-SHA-256 or SCRAM-SHA-512.")]
DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Broker data dir (offline; broker stopped).")
]
Bootstrap = Annotated[
    str | None, typer.Option("--bootstrap", "-b", envvar="SLUICE_BOOTSTRAP", help="Broker to ask (online).")
]


def admin(bootstrap: str, security: ClientSecurity, settings: list[str] | None = None) -> Any:
    """An AdminClient with the security options, then the user's -X settings (last: they win)."""
    from confluent_kafka.admin import AdminClient

    config = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, **security.settings()}
    return new_client(AdminClient, config | parse_settings(settings))


def _read_password(password_stdin: bool) -> str:
    if not password_stdin:
        fail("pass the password on standard input with --password-stdin (never on the command line)")
    password = sys.stdin.readline().rstrip("\n")
    if not password:
        fail("empty password on standard input")
    return password


def _store(data_dir: Path, *, create: bool = False) -> Any:
    """The credential store under `data_dir`. `create` makes the directory first: creating the first
    administrator before the broker's first start is how a secured broker is set up."""
    from sluice.security.acl import StoreDamaged
    from sluice.security.authn import CredentialStore

    if create and not data_dir.exists():
        try:
            data_dir.mkdir(parents=True)
        except OSError as exc:
            fail(f"cannot create the data directory {data_dir}: {exc.strerror or exc}")
    if not data_dir.is_dir():
        fail(f"{data_dir} is not a directory")
    try:
        return CredentialStore(data_dir / "security" / "credentials.json")
    except StoreDamaged as exc:
        fail(str(exc))
        raise  # unreachable: fail() exits


def _target(data_dir: Path | None, bootstrap: str | None) -> str | None:
    """The broker to ask, or None to work offline on `data_dir`: exactly one of them. A bootstrap that only
    comes from SLUICE_BOOTSTRAP gives way to an explicit --data-dir."""
    if data_dir is not None and bootstrap is not None and bootstrap == os.environ.get("SLUICE_BOOTSTRAP"):
        bootstrap = None
    if (data_dir is None) == (bootstrap is None):
        fail("give exactly one of --data-dir (offline) or --bootstrap/-b (online)")
    return bootstrap


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    from sluice.security.authn import SCRAM_MECHANISMS

    if name not in SCRAM_MECHANISMS:
        fail(f"--mechanism must be one of {', '.join(SCRAM_MECHANISMS)}")
    return getattr(ScramMechanism, name.replace("-", "_"))


@app.command("create")
@with_client_security
def create(
    name: str,
    mechanism: Mechanism = "SCRAM-SHA-256",
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
    iterations: Annotated[int, typer.Option(help="PBKDF2 iterations (4096-16384).")] = 8192,
    data_dir: DataDir = None,
    bootstrap: Bootstrap = None,
    security: ClientSecurity = ClientSecurity(),
    setting: Settings = None,
) -> None:
    """Create a user, or give an existing one a new password for MECHANISM."""
    from sluice.security.authn import CredentialError, credential_from_password

    bootstrap = _target(data_dir, bootstrap)
    password = _read_password(password_stdin)
    if data_dir is not None:
        store = _store(data_dir, create=True)
        try:
            store.upsert(name, mechanism, credential_from_password(mechanism, password, iterations))
        except CredentialError as exc:
            fail(str(exc))
        console.print(f"user {name} has a {mechanism} credential in {data_dir}")
        return
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    client = admin(bootstrap or "", security, setting)
    upsert = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(_mechanism(mechanism), iterations), password.encode()
    )
    _wait(client, client.alter_user_scram_credentials([upsert]))
    console.print(f"user {name} has a {mechanism} credential")


@app.command("delete")
@with_client_security
def delete(
    name: str,
    mechanism: Annotated[
        str | None, typer.Option("--mechanism", help="Only this mechanism (default: all).")
    ] = None,
    data_dir: DataDir = None,
    bootstrap: Bootstrap = None,
    security: ClientSecurity = ClientSecurity(),
    setting: Settings = None,
) -> None:
    """Delete a user's credentials (one mechanism or all)."""
    from sluice.security.authn import SCRAM_MECHANISMS

    bootstrap = _target(data_dir, bootstrap)
    if data_dir is not None:
        store = _store(data_dir)
        mechs = [mechanism] if mechanism else list(store.users.get(name, {}))
        if not any(store.delete(name, m, save=False) for m in mechs):
            fail(f"user {name} has no such credential")
        store.save()
        console.print(f"deleted {name}")
        return
    from confluent_kafka.admin import UserScramCredentialDeletion

    client = admin(bootstrap or "", security, setting)
    if mechanism is None:
        described = _wait(client, client.describe_user_scram_credentials([name]))
        mechs = [info.mechanism for info in described[name].scram_credential_infos]
    else:
        mechs = [_mechanism(mechanism)]
    if not mechs:
        fail(f"user {name} has no credential among {', '.join(SCRAM_MECHANISMS)}")
    _wait(client, client.alter_user_scram_credentials([UserScramCredentialDeletion(name, m) for m in mechs]))
    console.print(f"deleted {name}")


@app.command("list")
@with_client_security
def list_users(
    data_dir: DataDir = None,
    bootstrap: Bootstrap = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    security: ClientSecurity = ClientSecurity(),
    setting: Settings = None,
) -> None:
    """Users and their mechanisms with iterations (never any secret)."""
    bootstrap = _target(data_dir, bootstrap)
    users: dict[str, dict[str, int]] = {}
    if data_dir is not None:
        store = _store(data_dir)
        users = {u: {m: c.iterations for m, c in ms.items()} for u, ms in store.users.items()}
    else:
        client = admin(bootstrap or "", security, setting)
        described = serving(client, client.describe_user_scram_credentials().result, TIMEOUT_S)
        for user, desc in described.items():
            users[user] = {
                info.mechanism.name.replace("_", "-"): info.iterations for info in desc.scram_credential_infos
            }
    if as_json:
        console.print_json(json.dumps(users))
        return
    for user in sorted(users):
        mechs = ", ".join(f"{m} (iterations {i})" for m, i in sorted(users[user].items()))
        console.print(f"{user}\t{mechs}")


def _wait(client: Any, futures: dict[str, Any]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for key, future in futures.items():
        try:
            results[key] = serving(client, future.result, TIMEOUT_S)
        except Exception as exc:  # KafkaException carries the broker's message
            fail(f"{key}: {exc}")
    return results
