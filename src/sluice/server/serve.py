"""`sluice serve`: the embedded broker and the gateway in one process, stopped together."""

from __future__ import annotations

import asyncio
import logging

from sluice.broker.config import BrokerConfig
from sluice.server.app import install_stop_signals, start_broker

log = logging.getLogger("sluice")


async def serve_all(broker_config: BrokerConfig, *, grpc_listen: str, http_listen: str) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    running = await start_broker(broker_config)
    print(f"sluice broker listening on {running.host}:{running.port}", flush=True)
    gateway = None
    try:
        from sluice.gateway.server import start_embedded_gateway
    except ImportError:
        log.warning("gateway not available in this build; serving Kafka only")
    else:
        gateway = await start_embedded_gateway(
            f"{running.host}:{running.port}", grpc_listen=grpc_listen, http_listen=http_listen
        )
        print(f"sluice gateway: gRPC {grpc_listen}, HTTP {http_listen}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        if gateway is not None:
            await gateway.stop()
        await running.stop()
