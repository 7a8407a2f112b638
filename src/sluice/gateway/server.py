"""Running the gateway: both APIs over one `GatewayService`.

Entry points for the CLI:

* ``Gateway(config, grpc_listen=..., http_listen=..., unix_listen=...)`` with
  ``await start()`` / ``await stop()`` (or ``async with``), exposing the bound ports;
* ``await run_gateway(config, grpc_listen=..., http_listen=..., stop=event)``
  which serves until ``stop`` is set;
* ``serve_forever(config_path, grpc_listen=None, http_listen=None)``, a blocking
  call that stops on SIGINT/SIGTERM (what ``sluice gateway --config`` needs).

An empty listen address disables that API; port 0 picks a free port. The
config's ``tls`` section puts gRPC and/or HTTP on TLS; ``unix_addr`` (or
``unix_listen``) also serves HTTP, always plain, on a unix domain socket whose
file `stop` removes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from types import TracebackType

import grpc
from aiohttp import web
from grpc import aio

from sluice.eventloop import freeze_startup_objects, install_stop_signals, run_event_loop

from .auth import GrpcAuthInterceptor, http_middleware
from .config import GatewayConfig
from .config_file import load_config
from .grpc import create_grpc_server
from .http import create_http_app
from .rest import RestProxy
from .rest.instances import DEFAULT_INSTANCE_TIMEOUT_MS
from .service import GatewayService

log = logging.getLogger(__name__)

GATEWAY_YOUNG_GC_THRESHOLD = 20_000


def split_host_port(address: str) -> tuple[str, int]:
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit():
        raise ValueError(f"listen address must be host:port, got {address!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        grpc_listen: str | None = None,
        http_listen: str | None = None,
        unix_listen: str | None = None,
        rest_listen: str = "",
        rest_instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS,
        rest_optional: bool = False,
        schema_registry_url: str = "",
        shutdown_grace: float = 5.0,
    ) -> None:
        self.config = config
        self.grpc_listen = config.grpc_addr if grpc_listen is None else grpc_listen
        self.http_listen = config.http_addr if http_listen is None else http_listen
        self.unix_listen = config.unix_addr if unix_listen is None else unix_listen
        self.shutdown_grace = shutdown_grace
        self.service = GatewayService(config)
        # Confluent's REST Proxy API, on its own listener (port 8082 by convention); empty for none.
        self.rest = (
            RestProxy(
                self.service,
                config,
                *split_host_port(rest_listen),
                instance_timeout_ms=rest_instance_timeout_ms,
                schema_registry_url=schema_registry_url,
            )
            if rest_listen
            else None
        )
        # `sluice serve` binds a default port: one already taken costs the REST API, not the broker.
        self._rest_optional = rest_optional
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self._grpc_server: aio.Server | None = None
        self._http_runner: web.AppRunner | None = None
        # Set only once our site is bound there, so that a failed start never removes a file not ours.
        self._unix_socket_path: Path | None = None

    @property
    def grpc_address(self) -> str:
        host, _ = split_host_port(self.grpc_listen)
        return f"{host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        host, _ = split_host_port(self.http_listen)
        scheme = "https" if self.config.http_tls is not None else "http"
        return f"{scheme}://{host}:{self.http_port}"

    async def start(self) -> None:
        await self.service.start()
        try:
            if self.grpc_listen:
                await self._start_grpc()
            if self.http_listen or self.unix_listen:
                await self._start_http()
            if self.rest is not None:
                await self._start_rest(rest_optional=self._rest_optional)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "gateway listening: grpc=%s%s http=%s%s unix=%s",
            self.grpc_port,
            " (TLS)" if self.config.grpc_tls is not None else "",
            self.http_port,
            " (TLS)" if self.config.http_tls is not None else "",
            self._unix_socket_path,
        )

    async def _start_rest(self, *, rest_optional: bool) -> None:
        assert self.rest is not None
        try:
            await self.rest.start()
        except OSError as exc:
            if not rest_optional:
                raise
            print(f"sluice REST Proxy API not started: {exc}", flush=True)
            await self.rest.stop()
            self.rest = None

    async def _start_grpc(self) -> None:
        auth = self.config.client_auth
        interceptors = [GrpcAuthInterceptor(auth)] if auth is not None else []
        self._grpc_server = create_grpc_server(self.service, self.config.max_grpc_message_bytes, interceptors)
        tls = self.config.grpc_tls
        if tls is None:
            self.grpc_port = self._grpc_server.add_insecure_port(self.grpc_listen)
        else:
            client_ca = tls.client_ca_pem()
            credentials = grpc.ssl_server_credentials(
                [(tls.private_key_pem(), tls.certificate_chain_pem())],
                root_certificates=client_ca,
                require_client_auth=client_ca is not None,
            )
            self.grpc_port = self._grpc_server.add_secure_port(self.grpc_listen, credentials)
        if not self.grpc_port:
            raise OSError(f"cannot listen for gRPC on {self.grpc_listen}")
        await self._grpc_server.start()

    async def _start_http(self) -> None:
        app = create_http_app(self.service, self.config.max_http_body_bytes)
        if self.config.client_auth is not None:
            app.middlewares.append(http_middleware(self.config.client_auth))
        self._http_runner = web.AppRunner(app, access_log=None)
        await self._http_runner.setup()
        if self.http_listen:
            host, port = split_host_port(self.http_listen)
            tls = self.config.http_tls
            ssl_context = tls.server_ssl_context() if tls is not None else None
            await web.TCPSite(self._http_runner, host, port, ssl_context=ssl_context).start()
            self.http_port = self._http_runner.addresses[0][1]
        if self.unix_listen:
            await web.UnixSite(self._http_runner, self.unix_listen).start()
            self._unix_socket_path = Path(self.unix_listen)

    async def stop(self) -> None:
        self.service.begin_close()
        if self.rest is not None:
            await self.rest.stop()
        if self._grpc_server is not None:
            await self._grpc_server.stop(self.shutdown_grace)
            self._grpc_server = None
        if self._http_runner is not None:
            await self._http_runner.cleanup()
            self._http_runner = None
        if self._unix_socket_path is not None:
            self._unix_socket_path.unlink(missing_ok=True)
            self._unix_socket_path = None
        await self.service.close()

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()


async def run_gateway(
    config: GatewayConfig, *, grpc_listen: str | None, http_listen: str | None, stop: asyncio.Event
) -> None:
    """Serve until `stop` is set, then shut down cleanly (offsets committed, producer flushed)."""
    async with Gateway(config, grpc_listen=grpc_listen, http_listen=http_listen):
        await stop.wait()


def serve_forever(
    config: str | Path | GatewayConfig,
    *,
    grpc_listen: str | None = None,
    http_listen: str | None = None,
    rest_listen: str = "",
    rest_instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS,
    schema_registry_url: str = "",
) -> None:
    """Blocking entry point for a command line: runs until SIGINT or SIGTERM."""
    if not isinstance(config, GatewayConfig):
        config = load_config(config)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        async with Gateway(
            config,
            grpc_listen=grpc_listen,
            http_listen=http_listen,
            rest_listen=rest_listen,
            rest_instance_timeout_ms=rest_instance_timeout_ms,
            schema_registry_url=schema_registry_url,
        ):
            freeze_startup_objects()
            # Each REST record leaves a few short-lived containers (its JSON object, tuple, delivery callback):
            # young collections every 20,000 rather than 700 allocations cut the event loop's CPU per produced
            # record by about a tenth (bench/rest_bench.py), for a few MB of garbage held a little longer.
            gc.set_threshold(GATEWAY_YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
            await stop.wait()

    run_event_loop(main())
