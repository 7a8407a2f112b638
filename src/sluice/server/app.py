"""Run the broker: open storage, listen, retention, clean shutdown on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from sluice.broker.broker import Broker
from sluice.broker.cleaner_view import compacted_logs, txn_facts
from sluice.broker.config import BrokerConfig
from sluice.eventloop import freeze_startup_objects, install_stop_signals
from sluice.server.clock import now_ms
from sluice.server.kafka import KafkaServer
from sluice.storage.api import Storage
from sluice.storage.compaction.manager import CleanerSettings, LogCleanerManager

if TYPE_CHECKING:
    from sluice.server.admin import AdminApp

log = logging.getLogger("sluice")
T = TypeVar("T")
# The background warm-up loads partitions for this long, then lets the loop serve requests.
WARM_UP_SLICE_S = 0.01


def open_storage(config: BrokerConfig) -> Storage:
    if config.data_dir is None:
        from sluice.storage.memory import MemoryStorage

        return MemoryStorage()
    from sluice.storage.disk import DiskStorage
    from sluice.storage.file_cache import SEGMENT_FILES, default_capacity, raise_open_file_limit

    soft_limit, _ = raise_open_file_limit()
    SEGMENT_FILES.resize(config.open_segment_files or default_capacity(soft_limit, config.reserved_descriptors))
    config.data_dir.mkdir(parents=True, exist_ok=True)
    return DiskStorage(config.data_dir)


def build_broker(config: BrokerConfig) -> Broker:
    import sluice.broker.handlers  # noqa: F401  (registers every handler)

    broker = Broker(config, open_storage(config))
    try:
        from sluice.broker.group_service import attach_group_coordinator
    except ImportError:
        return broker
    attach_group_coordinator(broker, now_ms())
    from sluice.broker.transaction_service import attach_transaction_coordinator

    attach_transaction_coordinator(broker, now_ms())
    from sluice.broker.share_service import attach_share_service

    attach_share_service(broker, now_ms())
    return broker


@dataclass
class RunningBroker:
    broker: Broker
    server: KafkaServer
    host: str
    port: int
    retention_task: asyncio.Task[None]
    cleaner: LogCleanerManager | None = None
    admin: AdminApp | None = None

    @property
    def admin_url(self) -> str | None:
        if self.admin is None or self.admin.address is None:
            return None
        host, port = self.admin.address
        return f"{'https' if self.admin.tls else 'http'}://{host}:{port}"

    async def stop(self) -> None:
        if self.admin is not None:
            await self.admin.stop()
        self.retention_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.retention_task
        if self.cleaner is not None:
            # Joined off the loop: a cleaner thread may be waiting for the loop to run its swap.
            await asyncio.get_running_loop().run_in_executor(None, self.cleaner.stop)
        await self.server.stop()
        self.broker.close()


def _crash_point_from_environment() -> Callable[[str], None]:
    """Fault injection for the kill -9 tests: SLUICE_CLEANER_CRASH_AT=<swap step> ends the process there."""
    step = os.environ.get("SLUICE_CLEANER_CRASH_AT")
    if not step:
        return lambda at: None

    def crash(at: str) -> None:
        if at == step:
            log.warning("SLUICE_CLEANER_CRASH_AT=%s: exiting without cleanup", at)
            os._exit(137)

    return crash


def start_cleaner(broker: Broker, loop: asyncio.AbstractEventLoop) -> LogCleanerManager | None:
    config = broker.config
    if not config.log_cleaner_enable or broker.storage.data_dir is None:
        return None  # nothing on disk, nothing to compact (the memory engine has no compactable logs)

    def run_on_loop(fn: Callable[[], T]) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                future.set_result(fn())
            except BaseException as error:
                future.set_exception(error)

        loop.call_soon_threadsafe(call)
        return future.result()

    settings = CleanerSettings(
        enable=True,
        threads=config.log_cleaner_threads,
        io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
        dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
        backoff_ms=config.log_cleaner_backoff_ms,
    )
    cleaner = LogCleanerManager(
        settings,
        lambda: compacted_logs(broker, now_ms()),
        run_on_loop,
        now_ms,
        crash_point=_crash_point_from_environment(),
        facts=lambda topic, index: txn_facts(broker, topic, index),
    )
    broker.cleaner = cleaner
    cleaner.start()
    return cleaner


async def _warm_up(broker: Broker) -> None:
    """Load the partitions no client asked for yet, in slices of about WARM_UP_SLICE_S between which the
    loop serves requests: the port opened before any partition was read (broker/partition_table.py)."""
    unloaded = broker.partitions.unloaded()
    if not unloaded:
        return
    started = time.monotonic()
    slice_end = started + WARM_UP_SLICE_S
    for key in unloaded:
        try:
            broker.partitions.get(key)
        except Exception:
            log.exception("loading partition %s-%d failed", *key)
        if time.monotonic() >= slice_end:
            await asyncio.sleep(0)
            slice_end = time.monotonic() + WARM_UP_SLICE_S
    log.info("loaded %d partitions in the background in %.1f s", len(unloaded), time.monotonic() - started)
    if gc.get_freeze_count():
        freeze_startup_objects()  # the process froze what start-up made: these belong with it


async def _retention_loop(broker: Broker) -> None:
    await _warm_up(broker)
    while True:
        await asyncio.sleep(broker.config.retention_check_interval_ms / 1000)
        for (topic, index), state in broker.partitions.loaded_items():
            meta = broker.storage.topic(topic)
            if meta is None or not meta.config.deletes_old_segments:
                continue
            try:
                state.log.apply_retention(now_ms(), meta.config.retention_ms, meta.config.retention_bytes)
            except Exception:
                log.exception("retention failed for %s-%d", topic, index)


async def start_broker(config: BrokerConfig) -> RunningBroker:
    broker = build_broker(config)
    server = KafkaServer(broker)
    host, port = await server.start()
    loop = asyncio.get_running_loop()
    retention = loop.create_task(_retention_loop(broker))
    cleaner = start_cleaner(broker, loop)
    log.info("sluice broker listening on %s:%d (data: %s)", host, port, config.data_dir or "memory")
    running = RunningBroker(broker, server, host, port, retention, cleaner)
    if config.admin_listen:
        admin_host, _, admin_port = config.admin_listen.rpartition(":")
        off_loopback = admin_host.strip("[]") not in ("127.0.0.1", "::1", "localhost")
        if config.authorizer is not None and off_loopback and not config.admin_auth:
            # The admin HTTP API (group delete/rewind) speaks neither SASL nor ACLs: admin_auth guards it.
            log.warning(
                "admin_listen %s is not loopback and has no admin_auth: anyone who reaches it can delete "
                "and rewind groups",
                config.admin_listen,
            )
        # Imported here: the admin app's HTTP stack (aiohttp, prometheus-client) is a quarter of a second of
        # every broker's start, and a broker started with --admin-listen off never uses it.
        from sluice.server.admin import AdminApp

        running.admin = AdminApp(server)
        try:
            await running.admin.start(admin_host.strip("[]"), int(admin_port))
        except OSError as exc:
            await running.stop()
            raise OSError(
                exc.errno,
                f"the admin listener cannot bind {config.admin_listen}: {exc.strerror or exc} (choose another "
                "address with --admin-listen HOST:PORT, or --admin-listen off)",
            ) from exc
        except BaseException:
            await running.stop()
            raise
    return running


def announce(running: RunningBroker) -> None:
    """The lines BrokerProcess and scripts wait for."""
    config = running.broker.config
    print(f"sluice broker listening on {running.host}:{running.port}", flush=True)
    for protocol, _, _ in config.listener_specs()[1:]:
        host, port = config.advertised_for(protocol)
        print(f"sluice listener {protocol}://{host}:{port}", flush=True)
    if running.admin_url is not None:
        print(f"sluice admin listening on {running.admin_url}", flush=True)
    print("sluice broker ready", flush=True)  # the last start-up line: every listener above is serving


async def serve_broker(config: BrokerConfig, ready: asyncio.Event | None = None) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    running = await start_broker(config)
    with contextlib.suppress(NotImplementedError, AttributeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, running.server.reload_tls)
    freeze_startup_objects()
    announce(running)
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("shutting down")
    await running.stop()
