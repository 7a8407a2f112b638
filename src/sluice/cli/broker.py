"""`sluice broker`, `sluice serve` and `sluice gateway`: the long-running servers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sluice.broker.config import BrokerConfig
from sluice.cli.app import app
from sluice.cli.common import DEFAULT_BOOTSTRAP, fail, setup_logging, split_hostport


def _broker_config(
    listen: str, data_dir: str, advertise: str | None, config: Path | None, min_free_bytes: int | None = None
) -> BrokerConfig:
    host, port = split_hostport(listen, "--listen")
    adv_host, adv_port = split_hostport(advertise, "--advertise") if advertise else (None, None)
    overrides: dict[str, Any] = {
        "listen_host": host,
        "listen_port": port,
        "data_dir": None if data_dir == ":memory:" else Path(data_dir),
        "advertised_host": adv_host,
        "advertised_port": adv_port,
        "min_free_bytes": min_free_bytes,
    }
    if config is not None:
        return BrokerConfig.from_file(config, **overrides)
    return BrokerConfig(**{k: v for k, v in overrides.items() if v is not None or k == "data_dir"})


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
    verbose: bool = False,
) -> None:
    """Run the embedded Kafka-compatible broker until SIGTERM/SIGINT."""
    from sluice.eventloop import run_event_loop
    from sluice.server.app import serve_broker

    setup_logging(verbose)
    run_event_loop(serve_broker(_broker_config(listen, data_dir, advertise, config, min_free_bytes)))


@app.command()
def serve(
    kafka_listen: Annotated[str, typer.Option(help="Kafka listener.")] = DEFAULT_BOOTSTRAP,
    grpc_listen: Annotated[str, typer.Option(help="kafka-pixy gRPC listener.")] = "127.0.0.1:19091",
    http_listen: Annotated[str, typer.Option(help="kafka-pixy HTTP listener.")] = "127.0.0.1:19092",
    data_dir: Annotated[str, typer.Option(help="Where logs live.")] = "./sluice-data",
    config: Annotated[Path | None, typer.Option(help="YAML file of broker settings.")] = None,
    verbose: bool = False,
) -> None:
    """Run the broker and the gateway beside it, on loopback by default."""
    from sluice.eventloop import run_event_loop
    from sluice.server.serve import serve_all

    setup_logging(verbose)
    broker_config = _broker_config(kafka_listen, data_dir, None, config)
    run_event_loop(serve_all(broker_config, grpc_listen=grpc_listen, http_listen=http_listen))


@app.command()
def gateway(
    config: Annotated[
        Path, typer.Option(help="kafka-pixy-style YAML: named clusters (proxies) and a default.")
    ],
    grpc_listen: Annotated[str | None, typer.Option(help="Override the config's gRPC address.")] = None,
    http_listen: Annotated[str | None, typer.Option(help="Override the config's HTTP address.")] = None,
    verbose: bool = False,
) -> None:
    """Run the kafka-pixy-compatible gateway in front of one or more Kafka clusters."""
    from sluice.gateway.config import ConfigError
    from sluice.gateway.server import serve_forever

    setup_logging(verbose)
    try:
        serve_forever(config, grpc_listen=grpc_listen, http_listen=http_listen)
    except (ConfigError, OSError) as exc:
        fail(str(exc))
