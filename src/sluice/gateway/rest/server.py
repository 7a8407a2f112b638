"""Serving the REST Proxy on its own listener, with the gateway's TLS and client credentials."""

from __future__ import annotations

import logging

from aiohttp import web

from ..auth import http_middleware
from ..config import GatewayConfig
from ..service import GatewayService
from .admin import RestAdmin
from .app import create_rest_app
from .context import RestContext
from .instances import DEFAULT_INSTANCE_TIMEOUT_MS, ConsumerInstances
from .schemas import SchemaFormats

log = logging.getLogger(__name__)


class RestProxy:
    def __init__(
        self,
        service: GatewayService,
        config: GatewayConfig,
        host: str,
        port: int,
        *,
        instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS,
        schema_registry_url: str = "",
    ) -> None:
        self.service = service
        self.config = config
        self.host = host
        self.requested_port = port
        self.instance_timeout_ms = instance_timeout_ms
        self.schema_registry_url = schema_registry_url
        self.port: int | None = None
        self.instances: ConsumerInstances | None = None
        self._runner: web.AppRunner | None = None
        self._context: RestContext | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.config.http_tls is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        client = self.service.cluster_client()
        cluster = self.config.cluster("")
        self.instances = ConsumerInstances(cluster, client.client_id, self.instance_timeout_ms)
        self.instances.start()
        schemas = SchemaFormats(self.schema_registry_url) if self.schema_registry_url else None
        self._context = context = RestContext(
            client, RestAdmin(cluster, client.client_id), self.instances, schemas
        )
        app = create_rest_app(context, self.config.max_http_body_bytes)
        if self.config.client_auth is not None:
            app.middlewares.insert(0, http_middleware(self.config.client_auth))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        tls = self.config.http_tls
        ssl_context = tls.server_ssl_context() if tls is not None else None
        await web.TCPSite(self._runner, self.host, self.requested_port, ssl_context=ssl_context).start()
        self.port = self._runner.addresses[0][1]
        log.info("REST Proxy API listening on %s", self.url)

    def use_schema_registry(self, url: str) -> None:
        """Serve the avro and jsonschema formats through the registry at `url` from now on (`sluice serve`
        starts its registry after the gateway)."""
        self.schema_registry_url = url
        if self._context is not None:
            self._context.schemas = SchemaFormats(url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.instances is not None:
            await self.instances.close()
            self.instances = None
