"""Run the broker: open storage, listen, retention, clean shutdown on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from sluice.broker.broker import Broker
from sluice.broker.config import BrokerConfig
from sluice.eventloop import freeze_startup_objects, install_stop_signals
from sluice.server.admin import AdminApp
from sluice.server.kafka import KafkaServer, now_ms
from sluice.storage.api import Storage

log = logging.getLogger("sluice")


def open_storage(config: BrokerConfig) -> Storage:
    if config.data_dir is None:
        from sluice.storage.memory import MemoryStorage

        return MemoryStorage()
    from sluice.storage.disk import DiskStorage

    config.data_dir.mkdir(parents=True, exist_ok=True)
    return DiskStorage(config.data_dir)


def build_broker(config: BrokerConfig) -> Broker:
    import sluice.broker.handlers  # noqa: F401  (registers every handler)

    broker = Broker(config, open_storage(config))
    try:
        from sluice.broker.groups import attach_group_coordinator
    except ImportError:
        return broker
    attach_group_coordinator(broker, now_ms())
    return broker


@dataclass
class RunningBroker:
    broker: Broker
    server: KafkaServer
    host: str
    port: int
    retention_task: asyncio.Task[None]
    admin: AdminApp | None = None

    @property
    def admin_url(self) -> str | None:
        if self.admin is None or self.admin.address is None:
            return None
        host, port = self.admin.address
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        if self.admin is not None:
            await self.admin.stop()
        self.retention_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.retention_task
        await self.server.stop()
        self.broker.close()


async def _retention_loop(broker: Broker) -> None:
    while True:
        await asyncio.sleep(broker.config.retention_check_interval_ms / 1000)
        for (topic, _), state in list(broker.partitions.items()):
            meta = broker.storage.topic(topic)
            if meta is None or not meta.config.deletes_old_segments:
                continue
            try:
                state.log.apply_retention(now_ms(), meta.config.retention_ms, meta.config.retention_bytes)
            except Exception:
                log.exception("retention failed for %s", topic)


async def start_broker(config: BrokerConfig) -> RunningBroker:
    broker = build_broker(config)
    server = KafkaServer(broker)
    host, port = await server.start()
    retention = asyncio.get_running_loop().create_task(_retention_loop(broker))
    log.info("sluice broker listening on %s:%d (data: %s)", host, port, config.data_dir or "memory")
    running = RunningBroker(broker, server, host, port, retention)
    if config.admin_listen:
        admin_host, _, admin_port = config.admin_listen.rpartition(":")
        running.admin = AdminApp(server)
        try:
            await running.admin.start(admin_host.strip("[]"), int(admin_port))
        except BaseException:
            await running.stop()
            raise
    return running


def announce(running: RunningBroker) -> None:
    """The lines BrokerProcess and scripts wait for."""
    print(f"sluice broker listening on {running.host}:{running.port}", flush=True)
    if running.admin_url is not None:
        print(f"sluice admin listening on {running.admin_url}", flush=True)


async def serve_broker(config: BrokerConfig, ready: asyncio.Event | None = None) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    running = await start_broker(config)
    freeze_startup_objects()
    announce(running)
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("shutting down")
    await running.stop()
