"""`sluice serve`: the embedded broker and the gateway in one process, stopped together."""

from __future__ import annotations

import asyncio
import logging

from sluice.broker.config import BrokerConfig
from sluice.eventloop import freeze_startup_objects, install_stop_signals
from sluice.server.app import announce, start_broker

log = logging.getLogger("sluice")


async def serve_all(broker_config: BrokerConfig, *, grpc_listen: str, http_listen: str) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    running = await start_broker(broker_config)
    announce(running)
    from sluice.gateway.config import single_cluster_config
    from sluice.gateway.server import Gateway

    gateway = Gateway(
        single_cluster_config(f"{running.host}:{running.port}", admin_url=running.admin_url),
        grpc_listen=grpc_listen,
        http_listen=http_listen,
    )
    await gateway.start()
    freeze_startup_objects()
    print(f"sluice gateway listening on gRPC {gateway.grpc_address}, HTTP {gateway.http_url}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        await gateway.stop()
        await running.stop()
