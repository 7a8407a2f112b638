"""`sluice registry`: a Confluent-compatible Schema Registry whose state lives in Kafka (`_schemas`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.cli.app import app
from sluice.cli.common import DEFAULT_BOOTSTRAP, Bootstrap, Settings, fail, setup_logging, split_hostport

DEFAULT_REGISTRY_LISTEN = "127.0.0.1:8081"


@app.command("registry")
def registry_command(
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    listen: Annotated[
        str, typer.Option(help="HOST:PORT of the registry's REST API.")
    ] = DEFAULT_REGISTRY_LISTEN,
    properties: Settings = None,
    config: Annotated[Path | None, typer.Option(help="YAML file of librdkafka client settings.")] = None,
    topic: Annotated[
        str, typer.Option(help="The compacted topic holding the registry's state.")
    ] = "_schemas",
    group: Annotated[
        str, typer.Option(help="Kafka group the registries elect their primary in.")
    ] = "schema-registry",
    advertise: Annotated[
        str | None,
        typer.Option(help="URL other registries forward writes to, if not http(s)://LISTEN."),
    ] = None,
    store_timeout: Annotated[
        float, typer.Option(help="Seconds a write waits for Kafka before answering 503 (error 50003).")
    ] = 5.0,
    session_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds after which a registry that stopped heartbeating (killed) loses the primary seat; "
            "at least the cluster's group.min.session.timeout.ms (6 s by default)."
        ),
    ] = 6.0,
    basic_auth: Annotated[
        list[str] | None, typer.Option(help="USER:PASSWORD a client may present (repeatable).")
    ] = None,
    token: Annotated[
        list[str] | None, typer.Option(help="A bearer token a client may present (repeatable).")
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="PEM certificate: serve HTTPS.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    security_config: Annotated[
        Path | None,
        typer.Option(
            help="YAML with the gateway's `auth: {basic: {user: password}, bearer_tokens: [...]}` and "
            "`tls: {certificate_path, key_path, client_ca_path}` sections (keeps secrets off the command line)."
        ),
    ] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option(
            help="PEM CA: clients need a certificate it signed (mutual TLS); trusted when forwarding."
        ),
    ] = None,
    verbose: bool = False,
) -> None:
    """Serve the Schema Registry REST API (Confluent's), its state in a compacted Kafka topic."""
    from sluice.cli.console import client_settings, parse_basic_auth
    from sluice.eventloop import run_event_loop
    from sluice.registry.server import ListenerSecurity, serve_registry
    from sluice.registry.service import RegistrySettings
    from sluice.security.http_auth import ClientAuth
    from sluice.state_topic.kafka import StoreUnavailable

    setup_logging(verbose)
    if session_timeout <= 0:
        raise typer.BadParameter("must be above 0", param_hint="--session-timeout")
    host, port = split_hostport(listen, "--listen")
    if bool(tls_cert) != bool(tls_key):
        raise typer.BadParameter("give both --tls-cert and --tls-key", param_hint="--tls-cert")
    users = dict(parse_basic_auth(item) for item in basic_auth or [])  # type: ignore[misc]
    security = ListenerSecurity(
        certificate_path=str(tls_cert) if tls_cert else None,
        key_path=str(tls_key) if tls_key else None,
        client_ca_path=str(tls_client_ca) if tls_client_ca else None,
        auth=ClientAuth(users, tuple(token or ())),
    )
    if security_config is not None:
        try:
            security = security.merged_with_file(security_config)
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--security-config") from None
    settings = RegistrySettings(
        kafka=client_settings(bootstrap, properties, config),
        topic=topic,
        group=group,
        store_timeout_s=store_timeout,
        session_timeout_ms=int(session_timeout * 1000),
    )
    try:
        run_event_loop(serve_registry(settings, host, port, security, advertise))
    except StoreUnavailable as exc:
        fail(f"cannot open {topic}: {exc}")
    except OSError as exc:  # a taken port, an unreadable certificate
        fail(str(exc))
