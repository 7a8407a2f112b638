"""`sluice broker`, `sluice serve` and `sluice gateway`: the long-running servers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sluice.cli.app import app
from sluice.cli.common import DEFAULT_BOOTSTRAP, Settings, fail, parse_settings, setup_logging, split_hostport

if TYPE_CHECKING:
    # Imported where used: the broker's config (and yaml with it) would slow every client command's start.
    from sluice.broker.config import BrokerConfig


def _broker_config(
    listen: str,
    data_dir: str,
    advertise: str | None,
    config: Path | None,
    min_free_bytes: int | None = None,
    admin_listen: str | None = None,
) -> BrokerConfig:
    from sluice.broker.config import BrokerConfig

    host, port = split_hostport(listen, "--listen")
    adv_host, adv_port = split_hostport(advertise, "--advertise") if advertise else (None, None)
    overrides: dict[str, Any] = {
        "admin_listen": _admin_address(admin_listen),
        "listen_host": host,
        "listen_port": port,
        "data_dir": None if data_dir == ":memory:" else Path(data_dir),
        "advertised_host": adv_host,
        "advertised_port": adv_port,
        "min_free_bytes": min_free_bytes,
    }
    try:
        if config is not None:
            loaded = BrokerConfig.from_file(config, **overrides)
        else:
            loaded = BrokerConfig(**{k: v for k, v in overrides.items() if v is not None or k == "data_dir"})
        if admin_listen is None and loaded.admin_listen is None:
            loaded.admin_listen = DEFAULT_ADMIN_LISTEN  # neither the flag nor the file chose
        elif admin_listen is not None and _admin_address(admin_listen) is None:
            loaded.admin_listen = None  # --admin-listen off wins over the file
        loaded.validate()
    except (ValueError, TypeError, OSError) as exc:
        fail(f"{config or 'broker settings'}: {exc}")
        raise  # unreachable: fail() exits
    _check_tls_files(loaded, config)
    return loaded


def _check_tls_files(loaded: BrokerConfig, config: Path | None) -> None:
    """Load the certificate, key and CA once before serving, so a wrong path or key password is one
    line naming the settings, not a traceback from the listener."""
    from sluice.security.session import uses_tls
    from sluice.server.tls import TlsContext

    if not any(uses_tls(protocol) for protocol, _, _ in loaded.listener_specs()):
        return
    try:
        TlsContext.from_config(loaded)
    except OSError as exc:  # ssl.SSLError is an OSError
        fail(
            f"{config or 'broker settings'}: ssl_certfile/ssl_keyfile/ssl_key_password/ssl_cafile "
            f"cannot be loaded: {exc}"
        )


DEFAULT_ADMIN_LISTEN = "127.0.0.1:9644"

AdminListen = Annotated[
    str | None,
    typer.Option(
        "--admin-listen",
        "--metrics-listen",
        help="HOST:PORT of the admin HTTP listener: Prometheus /metrics and the /v1 admin API ('off' for none; "
        f"default {DEFAULT_ADMIN_LISTEN} unless the config file sets admin_listen).",
    ),
]


def _admin_address(admin_listen: str | None) -> str | None:
    """The admin listener's HOST:PORT as given on the command line, or None for 'off' or not given."""
    if admin_listen is None or admin_listen.strip().lower() in ("off", "none", ""):
        return None
    split_hostport(admin_listen, "--admin-listen")
    return admin_listen


@app.command()
def broker(
    listen: Annotated[str, typer.Option(help="Address for Kafka clients.")] = DEFAULT_BOOTSTRAP,
    data_dir: Annotated[
        str, typer.Option(help="Where logs live (':memory:' keeps nothing).")
    ] = "./sluice-data",
    advertise: Annotated[
        str | None, typer.Option(help="HOST:PORT told to clients, if not the listen address.")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file of broker settings.")] = None,
    min_free_bytes: Annotated[
        int | None,
        typer.Option(help="Refuse produce below this much free disk (default max(1 GiB, 5%); 0: never)."),
    ] = None,
    admin_listen: AdminListen = None,
    verbose: bool = False,
) -> None:
    """Run the embedded Kafka-compatible broker until SIGTERM/SIGINT."""
    from sluice.eventloop import run_event_loop
    from sluice.security.acl import StoreDamaged
    from sluice.server.app import serve_broker
    from sluice.storage.topic_journal import MetadataDamaged

    setup_logging(verbose)
    try:
        run_event_loop(
            serve_broker(_broker_config(listen, data_dir, advertise, config, min_free_bytes, admin_listen))
        )
    except (
        StoreDamaged,
        MetadataDamaged,
        OSError,
    ) as exc:  # OSError: a listener's address is taken or not ours
        fail(str(exc))


@app.command()
def serve(
    kafka_listen: Annotated[str, typer.Option(help="Kafka listener.")] = DEFAULT_BOOTSTRAP,
    grpc_listen: Annotated[str, typer.Option(help="kafka-pixy gRPC listener.")] = "127.0.0.1:19091",
    http_listen: Annotated[str, typer.Option(help="kafka-pixy HTTP listener.")] = "127.0.0.1:19092",
    data_dir: Annotated[str, typer.Option(help="Where logs live.")] = "./sluice-data",
    config: Annotated[Path | None, typer.Option(help="YAML file of broker settings.")] = None,
    console_listen: Annotated[
        str, typer.Option(help="Web console address ('off' for none); beyond loopback it needs a login.")
    ] = "127.0.0.1:8080",
    console_token: Annotated[
        str | None,
        typer.Option(envvar="SLUICE_CONSOLE_TOKEN", help="A token the console requires (Bearer or ?token=)."),
    ] = None,
    console_basic_auth: Annotated[
        str | None,
        typer.Option(envvar="SLUICE_CONSOLE_BASIC_AUTH", help="USER:PASSWORD the console requires."),
    ] = None,
    admin_listen: AdminListen = None,
    rest_listen: Annotated[str, typer.Option(help="Confluent REST Proxy API listener ('off' for none).")] = (
        "127.0.0.1:8082"
    ),
    registry_listen: Annotated[
        str, typer.Option(help="Schema Registry address ('off' for none); its state is the _schemas topic.")
    ] = "127.0.0.1:8081",
    verbose: bool = False,
) -> None:
    """Run the broker, the gateway, the Schema Registry and the web console beside it, on loopback by default."""
    from sluice.cli.console import parse_basic_auth
    from sluice.cli.serve_all import serve_all
    from sluice.eventloop import run_event_loop
    from sluice.security.acl import StoreDamaged

    setup_logging(verbose)
    broker_config = _broker_config(kafka_listen, data_dir, None, config, admin_listen=admin_listen)
    console_address = _optional_address(console_listen, "--console-listen")
    try:
        run_event_loop(
            serve_all(
                broker_config,
                grpc_listen=grpc_listen,
                http_listen=http_listen,
                rest_listen=listen_or_off(rest_listen, "--rest-listen"),
                console_listen=console_address,
                console_login=(console_token, parse_basic_auth(console_basic_auth)),
                registry_listen=_optional_address(registry_listen, "--registry-listen"),
            )
        )
    except (StoreDamaged, OSError) as exc:  # OSError: a listener's address is taken or not ours
        fail(str(exc))


def _optional_address(value: str, option: str) -> tuple[str, int] | None:
    """HOST:PORT, or None for 'off'."""
    return None if value.lower() in ("off", "none", "") else split_hostport(value, option)


@app.command()
def gateway(
    config: Annotated[
        Path | None, typer.Option(help="kafka-pixy-style YAML: named clusters (proxies) and a default.")
    ] = None,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap", "-b", help="Front this one cluster (HOST:PORT[,...]) instead of --config."
        ),
    ] = None,
    setting: Settings = None,
    grpc_listen: Annotated[str | None, typer.Option(help="Override the config's gRPC address.")] = None,
    http_listen: Annotated[str | None, typer.Option(help="Override the config's HTTP address.")] = None,
    rest_listen: Annotated[
        str, typer.Option(help="Confluent REST Proxy API listener HOST:PORT ('off' for none).")
    ] = "off",
    rest_instance_timeout_ms: Annotated[
        int,
        typer.Option(
            help="Idle v2 consumer instances are closed after this long (consumer.instance.timeout.ms)."
        ),
    ] = 300_000,
    schema_registry: Annotated[
        str, typer.Option(help="Schema registry URL behind the REST API's avro and jsonschema formats.")
    ] = "",
    verbose: bool = False,
) -> None:
    """Run the kafka-pixy-compatible gateway (and the REST Proxy API) in front of one or more Kafka clusters."""
    from sluice.gateway.config import ConfigError
    from sluice.gateway.config_file import config_from_dict, load_config
    from sluice.gateway.server import serve_forever

    setup_logging(verbose)
    if (config is None) == (bootstrap is None):
        fail("give exactly one of --config and --bootstrap")
    try:
        if config is not None:
            loaded = load_config(config)
        else:
            kafka = {"seed_peers": bootstrap, "librdkafka": parse_settings(setting)}
            loaded = config_from_dict({"proxies": {"default": {"kafka": kafka}}})
        serve_forever(
            loaded,
            grpc_listen=grpc_listen,
            http_listen=http_listen,
            rest_listen=listen_or_off(rest_listen, "--rest-listen"),
            rest_instance_timeout_ms=rest_instance_timeout_ms,
            schema_registry_url=schema_registry,
        )
    except (ConfigError, OSError) as exc:
        fail(str(exc))


def listen_or_off(value: str, option: str) -> str:
    """HOST:PORT checked, or "" for 'off' (the listen-string form the gateway takes)."""
    return "" if _optional_address(value, option) is None else value
