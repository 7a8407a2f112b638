"""The client security options (`--security-protocol` ... `--ssl-keyfile`) are declared once, in
cli.common: every `sluice users` and `sluice acls` command offers all seven at the same place, and a
command receives them as one ClientSecurity that turns into librdkafka settings."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from sluice.cli import app
from sluice.cli.common import ClientSecurity, with_client_security

SECURITY_OPTIONS = [
    "--security-protocol",
    "--sasl-mechanism",
    "--sasl-username",
    "--sasl-password",
    "--ssl-cafile",
    "--ssl-certfile",
    "--ssl-keyfile",
]


@pytest.mark.parametrize(
    "family, command",
    [
        ("users", "create"),
        ("users", "delete"),
        ("users", "list"),
        ("acls", "add"),
        ("acls", "list"),
        ("acls", "remove"),
    ],
)
def test_users_and_acls_commands_offer_the_security_options_before_their_settings(
    family: str, command: str
) -> None:
    group = typer.main.get_command(app).commands[family]  # type: ignore[attr-defined]
    options = [param.opts[0] for param in group.commands[command].params if param.opts[0].startswith("--")]
    at = options.index("--security-protocol")
    assert options[at : at + len(SECURITY_OPTIONS) + 1] == [*SECURITY_OPTIONS, "--setting"]


def _echo_app() -> typer.Typer:
    echo = typer.Typer()

    @echo.command()
    @with_client_security
    def show(topic: str, security: ClientSecurity = ClientSecurity(), verbose: bool = False) -> None:
        print(json.dumps({"topic": topic, "verbose": verbose, "settings": security.settings()}))

    return echo


def test_the_options_reach_the_command_as_librdkafka_settings() -> None:
    result = CliRunner().invoke(
        _echo_app(),
        [
            "t",
            "--security-protocol",
            "SASL_SSL",
            "--sasl-mechanism",
            "PLAIN",
            "--sasl-username",
            "ann",
            "--ssl-cafile",
            "ca.pem",
            "--ssl-keyfile",
            "key.pem",
            "--verbose",
        ],
        env={"SLUICE_SASL_PASSWORD": "from-env"},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "topic": "t",
        "verbose": True,
        "settings": {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "ann",
            "sasl.password": "from-env",
            "ssl.ca.location": "ca.pem",
            "ssl.key.location": "key.pem",
        },
    }


def test_without_options_the_command_speaks_plaintext() -> None:
    result = CliRunner().invoke(_echo_app(), ["t"], env={"SLUICE_SASL_PASSWORD": None})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["settings"] == {"security.protocol": "PLAINTEXT"}


def test_sasl_without_a_user_is_refused_with_the_options_named() -> None:
    result = CliRunner().invoke(_echo_app(), ["t", "--security-protocol", "SASL_PLAINTEXT"])
    assert result.exit_code == 1
    assert "--sasl-username and --sasl-password" in " ".join(result.output.split())


def test_a_command_without_a_security_parameter_is_a_programming_error() -> None:
    def plain(topic: str) -> None:
        pass

    with pytest.raises(TypeError, match="security"):
        with_client_security(plain)
