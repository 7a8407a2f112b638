"""Serving the REST Proxy on its own listener, with the gateway's TLS and client credentials."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from aiohttp import web

from ..auth import http_middleware
from ..batch_writer import BatchWriter
from ..config import ClusterConfig, GatewayConfig
from ..kafka import ClusterClient
from ..service import GatewayService
from .admin import RestAdmin
from .app import create_rest_app
from .context import RestContext
from .instances import DEFAULT_INSTANCE_TIMEOUT_MS, ConsumerInstances
from .produce_front import ProduceFront, front_factory
from .schemas import SchemaFormats

log = logging.getLogger(__name__)


# Records wait this long for others to share their produce request, unless the cluster's producer settings
# (flush_frequency, or linger.ms in -X / librdkafka:) say otherwise. Measured with bench/rest_bench.py (16
# requests of 100 records in flight): 1 ms doubles the records/s of 5 ms (the requests no longer wait out
# the linger in turn) for 7-11% more CPU per record, and a lone one-record POST answers in 2.5 ms, not 6.8;
# 0 ms answers it in 1.4 ms but costs 15-30% more CPU per record under load.
REST_LINGER_SECONDS = 0.001
# aiohttp's TCPSite default.
_BACKLOG = 128
# How long a stopping gateway lets the produce front finish the produce calls under way.
_FRONT_DRAIN_SECONDS = 10.0


def rest_producer_cluster(cluster: ClusterConfig) -> ClusterConfig:
    """The cluster's settings for the REST API's own producer (kafka-pixy's keeps linger.ms 0 for latency)."""
    producer = cluster.producer
    if producer.flush_frequency is None:
        producer = dataclasses.replace(producer, flush_frequency=REST_LINGER_SECONDS)
    client_id = f"{cluster.client_id}-rest" if cluster.client_id else ""
    return dataclasses.replace(cluster, producer=producer, client_id=client_id)


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
        # The default cluster's context first, then the other clusters' (v3 only).
        self._contexts: list[RestContext] = []
        # The listener when the produce front reads it first, and its connections not handed to aiohttp.
        self._front_server: asyncio.AbstractServer | None = None
        self._fronts: set[ProduceFront] = set()

    @property
    def url(self) -> str:
        scheme = "https" if self.config.http_tls is not None else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}"

    async def start(self) -> None:
        default = self.config.cluster("")
        self.instances = ConsumerInstances(default, default.client_id, self.instance_timeout_ms)
        self.instances.start()
        schemas = SchemaFormats(self.schema_registry_url) if self.schema_registry_url else None
        others = [c for name, c in self.config.clusters.items() if name != self.config.default_cluster]
        # Every cluster gets its own producer and admin client (v3); consumer instances (v2) are the default's.
        for cluster in (default, *others):
            rest_cluster = rest_producer_cluster(cluster)
            producer = ClusterClient(rest_cluster, self.service.metrics, deliveries_on_loop=True)
            writer = BatchWriter.for_cluster(rest_cluster, producer.client_id, self.service.metrics)
            admin = RestAdmin(cluster, cluster.client_id)
            self._contexts.append(RestContext(producer, admin, self.instances, schemas, writer))
        app = create_rest_app(self._contexts[0], self.config.max_http_body_bytes, self._contexts[1:])
        if self.config.client_auth is not None:
            app.middlewares.insert(0, http_middleware(self.config.client_auth))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        tls = self.config.http_tls
        if tls is None and self.config.client_auth is None and self._contexts[0].writer is not None:
            # Plain v2 binary produce is read by the produce front, everything else by aiohttp.
            assert self._runner.server is not None
            factory = front_factory(
                self._runner.server, self._contexts[0], self.config.max_http_body_bytes, self._fronts
            )
            self._front_server = await asyncio.get_running_loop().create_server(
                factory, self.host, self.requested_port, reuse_address=True, backlog=_BACKLOG
            )
            self.port = self._front_server.sockets[0].getsockname()[1]
        else:
            ssl_context = tls.server_ssl_context() if tls is not None else None
            await web.TCPSite(self._runner, self.host, self.requested_port, ssl_context=ssl_context).start()
            self.port = self._runner.addresses[0][1]
        log.info("REST Proxy API listening on %s", self.url)

    def use_schema_registry(self, url: str) -> None:
        """Serve the avro and jsonschema formats through the registry at `url` from now on (`sluice serve`
        starts its registry after the gateway)."""
        self.schema_registry_url = url
        schemas = SchemaFormats(url)
        for context in self._contexts:
            context.use_schemas(schemas)

    async def stop(self) -> None:
        if self._front_server is not None:
            self._front_server.close()
            self._front_server = None
            # Idle connections close now; one answering a produce gets until its records are answered.
            deadline = time.monotonic() + _FRONT_DRAIN_SECONDS
            while self._fronts and time.monotonic() < deadline:
                for front in [front for front in self._fronts if front.idle]:
                    front.close()
                await asyncio.sleep(0.05)
            for front in list(self._fronts):
                front.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.instances is not None:
            await self.instances.close()
            self.instances = None
        contexts, self._contexts = self._contexts, []
        for context in contexts:
            if context.writer is not None:
                await context.writer.close()
            await context.producer.close()
            await asyncio.to_thread(context.producer.close_admin)
