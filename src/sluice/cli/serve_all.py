"""`sluice serve`: the embedded broker, the gateway, the Schema Registry and the console in one process, stopped
together. The launcher sits with the CLI, above every room it starts (server/ is only the socket shell)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sluice.broker.config import BrokerConfig
from sluice.eventloop import freeze_startup_objects, install_stop_signals
from sluice.server.app import announce, start_broker

log = logging.getLogger("sluice")


async def serve_all(
    broker_config: BrokerConfig,
    *,
    grpc_listen: str,
    http_listen: str,
    rest_listen: str = "",
    schema_registry_url: str = "",
    console_listen: tuple[str, int] | None = None,
    console_login: tuple[str | None, tuple[str, str] | None] = (None, None),
    registry_listen: tuple[str, int] | None = None,
) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    running = await start_broker(broker_config)
    announce(running)
    from sluice.gateway.config_file import single_cluster_config
    from sluice.gateway.server import Gateway

    gateway = Gateway(
        single_cluster_config(f"{running.host}:{running.port}", admin_url=running.admin_url),
        grpc_listen=grpc_listen,
        http_listen=http_listen,
        rest_listen=rest_listen,
        rest_optional=True,
        schema_registry_url=schema_registry_url,
    )
    await gateway.start()
    print(f"sluice gateway listening on gRPC {gateway.grpc_address}, HTTP {gateway.http_url}", flush=True)
    if gateway.rest is not None:
        print(f"sluice REST Proxy API on {gateway.rest.url}", flush=True)
    # Before the console, which shows the registry's schemas and decodes messages framed with them.
    registry = await _start_registry(f"{running.host}:{running.port}", registry_listen)
    if registry is not None and gateway.rest is not None and not schema_registry_url:
        gateway.rest.use_schema_registry(registry.url)  # the REST API's schema formats
    console = None
    if console_listen is not None:
        from sluice.console.app import ConsoleConfig
        from sluice.console.server import start_console

        # The console is a client like any other: it reaches the broker over its Kafka listener.
        try:
            console = await start_console(
                ConsoleConfig(
                    settings={"bootstrap.servers": f"{running.host}:{running.port}"},
                    host=console_listen[0],
                    port=console_listen[1],
                    log_dir=broker_config.data_dir,
                    gateway_url=gateway.http_url,
                    # The broker's admin API, where it runs one: live rewind of running groups.
                    admin_url=running.admin_url,
                    token=console_login[0],
                    basic_auth=console_login[1],
                    schema_registry_url=registry.url if registry is not None else None,
                )
            )
        except (OSError, ValueError) as exc:
            # A web page is not worth a broker: a taken port leaves the broker and gateway serving.
            print(f"sluice console not started: {exc}", flush=True)
        else:
            print(f"sluice console on {console.url}", flush=True)
    freeze_startup_objects()
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        if registry is not None:
            await registry.stop()
        if console is not None:
            await console.stop()
        await gateway.stop()
        await running.stop()


async def _start_registry(bootstrap: str, listen: tuple[str, int] | None) -> Any:
    """The Schema Registry, a Kafka client of the broker like the console; a taken port leaves the rest serving."""
    if listen is None:
        return None
    from sluice.registry.server import start_registry
    from sluice.registry.service import RegistrySettings
    from sluice.state_topic.kafka import StoreUnavailable

    try:
        registry = await start_registry(
            RegistrySettings(kafka={"bootstrap.servers": bootstrap}, replication_factor=1), *listen
        )
    except (OSError, StoreUnavailable) as exc:
        print(f"sluice registry not started: {exc}", flush=True)
        return None
    print(f"sluice registry listening on {registry.url}", flush=True)
    return registry
