"""`sluice console`: the web console for any Kafka-compatible cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sluice.cli.app import app
from sluice.cli.common import DEFAULT_BOOTSTRAP, Bootstrap, Settings, fail, setup_logging, split_hostport

DEFAULT_CONSOLE_LISTEN = "127.0.0.1:8080"


def client_settings(bootstrap: str, properties: list[str] | None, config: Path | None) -> dict[str, str]:
    """librdkafka settings from a YAML mapping, then -X key=value pairs (which win), then --bootstrap."""
    import yaml

    settings: dict[str, str] = {}
    if config is not None:
        try:
            loaded: Any = yaml.safe_load(config.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise typer.BadParameter(f"cannot read {config}: {exc}", param_hint="--config") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise typer.BadParameter("expected a mapping of librdkafka settings", param_hint="--config")
        settings.update(
            {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in loaded.items()}
        )
    for item in properties or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected key=value, got {item!r}", param_hint="-X")
        settings[key.strip()] = value
    settings.setdefault("bootstrap.servers", bootstrap)
    return settings


def parse_basic_auth(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise typer.BadParameter("expected USER:PASSWORD", param_hint="--basic-auth")
    return user, password


def admin_url(admin: str | None) -> str | None:
    """The admin API's base URL; HOST:PORT as the other commands take it, or a URL."""
    if not admin:
        return None
    if admin.startswith(("http://", "https://")):
        return admin.rstrip("/")
    split_hostport(admin, "--admin")
    return f"http://{admin}"


def schema_registry_settings(
    basic_auth: str | None, ca: Path | None, cert: Path | None, key: Path | None
) -> tuple[tuple[str, str], ...]:
    """confluent-kafka SchemaRegistryClient settings from the console's --schema-registry-* flags."""
    settings: list[tuple[str, str]] = []
    if basic_auth is not None:
        user, sep, password = basic_auth.partition(":")
        if not sep or not user or not password:
            raise typer.BadParameter("expected USER:PASSWORD", param_hint="--schema-registry-basic-auth")
        settings.append(("basic.auth.user.info", basic_auth))
    if (cert is None) != (key is None):
        raise typer.BadParameter(
            "give both or neither", param_hint="--schema-registry-cert/--schema-registry-key"
        )
    files = (
        ("ssl.ca.location", ca, "ca"),
        ("ssl.certificate.location", cert, "cert"),
        ("ssl.key.location", key, "key"),
    )
    for name, path, flag in files:
        if path is not None:
            if not path.is_file():
                raise typer.BadParameter(f"no such file: {path}", param_hint=f"--schema-registry-{flag}")
            settings.append((name, str(path)))
    return tuple(settings)


@app.command("console")
def console_command(
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    listen: Annotated[str, typer.Option(help="Address of the web console.")] = DEFAULT_CONSOLE_LISTEN,
    properties: Settings = None,
    config: Annotated[Path | None, typer.Option(help="YAML file of librdkafka client settings.")] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Hide and refuse every write action.")
    ] = False,
    basic_auth: Annotated[
        str | None, typer.Option(help="USER:PASSWORD required of browsers (needed off loopback).")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(help="A token required of browsers, as Bearer or ?token= (needed off loopback)."),
    ] = None,
    log_dir: Annotated[
        Path | None, typer.Option(help="The broker's data directory, if on this machine: sizes on disk.")
    ] = None,
    gateway: Annotated[
        str | None, typer.Option(help="A sluice gateway's HTTP address: a page of its consumers and acks.")
    ] = None,
    admin: Annotated[
        str | None,
        typer.Option(
            envvar="SLUICE_ADMIN",
            help="A sluice broker's admin API, HOST:PORT or http://HOST:PORT: live rewind of running groups.",
        ),
    ] = None,
    schema_registry: Annotated[
        str | None,
        typer.Option(
            envvar="SLUICE_SCHEMA_REGISTRY",
            help="A Schema Registry's URL: a Schemas page, and registry-framed keys and values decoded.",
        ),
    ] = None,
    schema_registry_basic_auth: Annotated[
        str | None,
        typer.Option(
            envvar="SLUICE_SCHEMA_REGISTRY_BASIC_AUTH",
            help="USER:PASSWORD for the Schema Registry (or put them in its URL); never shown.",
        ),
    ] = None,
    schema_registry_ca: Annotated[
        Path | None,
        typer.Option(help="CA file (PEM) the Schema Registry's TLS certificate is checked against."),
    ] = None,
    schema_registry_cert: Annotated[
        Path | None, typer.Option(help="Client certificate (PEM) for a Schema Registry that asks for one.")
    ] = None,
    schema_registry_key: Annotated[
        Path | None, typer.Option(help="The client certificate's private key (PEM).")
    ] = None,
    sample_interval: Annotated[float, typer.Option(help="Seconds between lag and rate samples.")] = 10.0,
    verbose: bool = False,
) -> None:
    """Serve the web console (topics, messages, consumer groups) for any Kafka-compatible cluster."""
    from sluice.console.app import ConsoleConfig
    from sluice.console.server import serve_console
    from sluice.eventloop import run_event_loop

    setup_logging(verbose)
    host, port = split_hostport(listen, "--listen")
    console_config = ConsoleConfig(
        settings=client_settings(bootstrap, properties, config),
        host=host,
        port=port,
        read_only=read_only,
        basic_auth=parse_basic_auth(basic_auth),
        token=token,
        sample_interval_s=sample_interval,
        log_dir=log_dir,
        gateway_url=gateway,
        admin_url=admin_url(admin),
        schema_registry_url=schema_registry,
        schema_registry_settings=schema_registry_settings(
            schema_registry_basic_auth, schema_registry_ca, schema_registry_cert, schema_registry_key
        ),
    )
    try:
        console_config.check()
        run_event_loop(serve_console(console_config))
    except (ValueError, OSError) as exc:
        fail(str(exc))
