"""Serving the registry: the aiohttp listener (TLS and basic/bearer credentials as the gateway takes them),
started after `_schemas` is replayed, stopped cleanly."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from sluice.registry.api import SERVICE, SESSION, error_middleware, error_reply, forwarding_session, routes
from sluice.registry.media import negotiation
from sluice.registry.service import RegistryService, RegistrySettings
from sluice.security.http_auth import ClientAuth, client_auth_from

log = logging.getLogger("sluice.registry")

DEFAULT_LISTEN = "127.0.0.1:8081"


@dataclass
class ListenerSecurity:
    """TLS on the registry's own listener (mutual TLS when `client_ca_path` is set) and the credentials every
    request must carry."""

    certificate_path: str | None = None
    key_path: str | None = None
    client_ca_path: str | None = None
    auth: ClientAuth | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.certificate_path:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certificate_path, self.key_path)
        if self.client_ca_path:
            context.load_verify_locations(self.client_ca_path)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def merged_with_file(self, path: Path) -> ListenerSecurity:
        """These settings plus a YAML file's `auth:` and `tls:` sections (the gateway's shapes); the file's
        credentials join the command line's, its TLS paths fill the ones not given. ValueError names the fault."""
        import yaml

        try:
            document = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not YAML: {exc}") from None
        if not isinstance(document, dict) or set(document) - {"auth", "tls"}:
            raise ValueError(f"{path}: expected a mapping with `auth` and/or `tls`")
        from_file = client_auth_from(document.get("auth"))
        tls = document.get("tls") or {}
        if not isinstance(tls, dict) or set(tls) - {"certificate_path", "key_path", "client_ca_path"}:
            raise ValueError(f"{path}: tls takes certificate_path, key_path and client_ca_path")
        auth = self.auth or ClientAuth()
        if from_file is not None:
            auth = ClientAuth(
                {**auth.basic, **from_file.basic}, (*auth.bearer_tokens, *from_file.bearer_tokens)
            )
        return ListenerSecurity(
            certificate_path=self.certificate_path or tls.get("certificate_path"),
            key_path=self.key_path or tls.get("key_path"),
            client_ca_path=self.client_ca_path or tls.get("client_ca_path"),
            auth=auth,
        )

    def forwarding_context(self) -> ssl.SSLContext | None:
        """How a secondary calls the primary over HTTPS: trusting `client_ca_path` (the registries' own CA)
        when given, else the system's; presenting this registry's certificate, for mutual TLS."""
        if not self.certificate_path:
            return None
        context = ssl.create_default_context(cafile=self.client_ca_path)
        context.load_cert_chain(self.certificate_path, self.key_path)
        return context


def auth_middleware(auth: ClientAuth) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if auth.accepts(request.headers.get("Authorization")):
            return await handler(request)
        response = error_reply(
            401, 40101, "Unauthorized: this registry needs HTTP basic or bearer credentials"
        )
        response.headers["WWW-Authenticate"] = 'Basic realm="sluice-registry", Bearer'
        return response

    return authenticate


class RunningRegistry:
    def __init__(self, service: RegistryService, runner: web.AppRunner, url: str) -> None:
        self.service = service
        self.runner = runner
        self.url = url

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.service.stop()


def _bound_port(site: web.TCPSite) -> int:
    server = site._server  # aiohttp keeps the listening sockets there
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else 0


async def start_registry(
    settings: RegistrySettings,
    host: str,
    port: int,
    security: ListenerSecurity | None = None,
    advertised_url: str | None = None,
) -> RunningRegistry:
    """Replay `_schemas`, listen, and stand for primary. StoreUnavailable when Kafka cannot be reached;
    OSError when the address is taken."""
    security = security or ListenerSecurity()
    tls = security.ssl_context()
    service = RegistryService(settings)
    middlewares = [error_middleware]
    authenticated = security.auth is not None and security.auth.enabled
    if authenticated:
        middlewares.append(auth_middleware(security.auth))
    middlewares.append(negotiation(error_reply))
    app = web.Application(client_max_size=settings.max_request_bytes, middlewares=middlewares)
    app.add_routes(routes)
    app[SERVICE] = service
    app[SESSION] = forwarding_session(settings.store_timeout_s * 2 + 5, security.forwarding_context())

    async def close_session(app: web.Application) -> None:
        await app[SESSION].close()

    app.on_cleanup.append(close_session)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = _bound_port(site) or port
    if host not in ("127.0.0.1", "::1", "localhost") and not authenticated:
        log.warning(
            "the registry listens on %s without credentials: anyone who reaches it can change schemas", host
        )
    public_host = host if host not in ("0.0.0.0", "::", "") else socket.getfqdn()
    url = advertised_url or f"{'https' if tls else 'http'}://{public_host}:{bound}"
    try:
        await service.start(url)
    except BaseException:
        await runner.cleanup()
        await service.stop()
        raise
    log.info("schema registry on %s (store %s)", url, settings.topic)
    return RunningRegistry(service, runner, url)


async def serve_registry(
    settings: RegistrySettings,
    host: str,
    port: int,
    security: ListenerSecurity | None = None,
    advertised_url: str | None = None,
) -> None:
    """`sluice registry`: serve until SIGTERM/SIGINT."""
    from sluice.eventloop import install_stop_signals

    stop = asyncio.Event()
    install_stop_signals(stop)
    running = await start_registry(settings, host, port, security, advertised_url)
    print(f"sluice registry listening on {running.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await running.stop()
