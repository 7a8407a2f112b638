"""The console's aiohttp shell: settings, login, the background sampler, and the running server.

Routes live in :mod:`sluice.console.routes`; cluster calls in :mod:`sluice.console.cluster` (blocking,
run here in a thread executor).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from aiohttp import web

from sluice.console import groups, render
from sluice.console.cluster import Cluster, ClusterError, as_cluster_error
from sluice.console.messages import ScanJob
from sluice.console.schemas import SchemaBrowser
from sluice.console.wire import WireFacts

log = logging.getLogger("sluice.console")
T = TypeVar("T")
HISTORY_S = 3600.0
MAX_SCAN_JOBS = 4
TOKEN_COOKIE = "sluice_console_token"
# A search is posted (it starts a job) but only reads: a read-only console still offers it.
READS_BY_POST = {"/topics/{name}/scan"}


@dataclass
class ConsoleConfig:
    settings: dict[str, str]
    host: str = "127.0.0.1"
    port: int = 8080
    read_only: bool = False
    basic_auth: tuple[str, str] | None = None
    token: str | None = None
    sample_interval_s: float = 10.0
    timeout_s: float = 10.0
    # The broker's data directory when it is on this machine (`sluice serve`): sizes on disk come from it
    # when the cluster does not answer DescribeLogDirs (which confluent-kafka's AdminClient cannot send).
    log_dir: Path | None = None
    # A sluice gateway's HTTP address (http://host:port): its consumers and in-flight messages get a page.
    gateway_url: str | None = None
    # A sluice broker's admin API (http://host:port): resets of running groups (live rewind) go through it,
    # since Kafka's protocol cannot move a running group's offsets.
    admin_url: str | None = None
    # A Schema Registry's URL: a Schemas page, and framed keys and values decoded in the message browser.
    schema_registry_url: str | None = None
    # Its client settings (confluent-kafka's: basic.auth.user.info, ssl.ca.location, ...); secrets never shown.
    schema_registry_settings: tuple[tuple[str, str], ...] = ()

    def check(self) -> None:
        """Refuse to serve beyond loopback without a login."""
        if self.basic_auth is None and self.token is None and not is_loopback(self.host):
            raise ValueError(
                f"the console listens on {self.host}, beyond loopback: configure a login "
                "(--basic-auth USER:PASSWORD or --token TOKEN)"
            )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Samples:
    """What the console saw while it ran: totals for the rates, per-group lag for the charts."""

    totals: collections.deque[tuple[float, int, int]] = field(
        default_factory=lambda: collections.deque(maxlen=8)
    )
    lag: dict[str, collections.deque[tuple[float, int]]] = field(default_factory=dict)

    def rates(self) -> tuple[float | None, float | None]:
        if len(self.totals) < 2:
            return None, None
        (t0, in0, out0), (t1, in1, out1) = self.totals[-2], self.totals[-1]
        dt = t1 - t0
        if dt <= 0:
            return None, None
        return max(in1 - in0, 0) / dt, max(out1 - out0, 0) / dt


class Console:
    def __init__(self, config: ConsoleConfig) -> None:
        config.check()
        self.config = config
        self.cluster = Cluster(config.settings, timeout_s=config.timeout_s)
        self.wire = WireFacts(config.settings, config.timeout_s)
        self.executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="console")
        self.samples = Samples()
        self.jobs: dict[str, ScanJob] = {}
        self.schemas = (
            SchemaBrowser(config.schema_registry_url, config.timeout_s, config.schema_registry_settings)
            if config.schema_registry_url
            else None
        )
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("sluice.console", "templates"),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            number=render.number, bytes=render.human_bytes, ts=render.timestamp, short=render.short_bytes
        )
        self.env.globals.update(
            read_only=config.read_only,
            bootstrap=self.cluster.bootstrap,
            render=render,
            gateway_url=config.gateway_url,
            admin_url=config.admin_url,
            schema_registry_url=config.schema_registry_url,
        )
        self._sampler: asyncio.Task[None] | None = None

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking cluster call on the executor; any failure comes back as a ClusterError."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))
        except ClusterError as error:
            raise self.cluster.explain(error) from None
        except Exception as exc:
            raise self.cluster.explain(as_cluster_error(exc)) from None

    def log_sizes(self, metadata: Any = None) -> dict[tuple[str, int], int] | None:
        """Bytes on disk per partition: the cluster's DescribeLogDirs where it serves it, else the broker's
        data directory when it is on this machine (`sluice serve`, --log-dir), else None (not shown)."""
        if self.wire.enabled:
            if metadata is None:
                metadata = self.cluster.metadata()
            brokers = [(b.id, b.host, b.port) for b in metadata.brokers.values()]
            found = self.wire.log_dirs(brokers)
            if found is not None:
                return found.sizes
        return self.local_sizes()

    def local_sizes(self) -> dict[tuple[str, int], int] | None:
        root = self.config.log_dir
        if root is None or not root.is_dir():
            return None
        sizes: dict[tuple[str, int], int] = {}
        with os.scandir(root) as entries:
            for entry in entries:
                topic, sep, partition = entry.name.rpartition("-")
                if not sep or not partition.isdigit() or not entry.is_dir():
                    continue
                total = 0
                with os.scandir(entry.path) as files:
                    for f in files:
                        with contextlib.suppress(OSError):
                            total += f.stat().st_size
                sizes[(topic, int(partition))] = total
        return sizes

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)

    # ----- sampler -----

    def sample_once(self) -> None:
        now = time.time()
        metadata = self.cluster.metadata()
        keys = [(n, p) for n, t in metadata.topics.items() if t.error is None for p in t.partitions]
        marks = self.cluster.watermarks(keys)
        total_in = sum(end for _, end in marks.values())
        total_out = 0
        for gid in groups.group_ids(self.cluster):
            committed = groups.committed_offsets(self.cluster, gid)
            total_out += sum(committed.values())
            missing = [k for k in committed if k not in marks]
            if missing:
                marks.update(self.cluster.watermarks(missing))
            lag = sum(max(marks[k][1] - off, 0) for k, off in committed.items() if k in marks)
            history = self.samples.lag.setdefault(gid, collections.deque())
            history.append((now, lag))
            while history and history[0][0] < now - HISTORY_S:
                history.popleft()
        self.samples.totals.append((now, total_in, total_out))

    async def _sample_forever(self) -> None:
        while True:
            try:
                await self.run(self.sample_once)
            except ClusterError as exc:
                log.debug("sample failed: %s", exc)
            except Exception:
                log.exception("sample failed")
            await asyncio.sleep(self.config.sample_interval_s)

    def start_sampler(self) -> None:
        self._sampler = asyncio.get_running_loop().create_task(self._sample_forever())

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        for job in self.jobs.values():
            job.stop.set()
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown_clients)

    def _shutdown_clients(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.cluster.close()


CONSOLE = web.AppKey("console", Console)


# ----- middlewares -----


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _authorized(config: ConsoleConfig, request: web.Request) -> bool:
    header = request.headers.get("Authorization", "")
    if config.token is not None:
        given = request.cookies.get(TOKEN_COOKIE) or request.query.get("token")
        if header.startswith("Bearer "):
            given = header[7:]
        if given is not None and hmac.compare_digest(given.encode(), config.token.encode()):
            return True
    if config.basic_auth is not None and header.startswith("Basic "):
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        want_user, want_password = config.basic_auth
        return hmac.compare_digest(user.encode(), want_user.encode()) & hmac.compare_digest(
            password.encode(), want_password.encode()
        )
    return False


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    console: Console = request.app[CONSOLE]
    config = console.config
    if config.token is None and config.basic_auth is None:
        return await handler(request)
    if request.path.startswith("/static/"):
        return await handler(request)
    if not _authorized(config, request):
        headers = {"WWW-Authenticate": 'Basic realm="sluice console"'} if config.basic_auth else {}
        return web.Response(status=401, text="login required", headers=headers)
    response = await handler(request)
    if config.token is not None and request.query.get("token") == config.token:
        # A link with ?token= logs the browser in for the session, so later links need not carry it.
        response.set_cookie(TOKEN_COOKIE, config.token, httponly=True, samesite="Strict")
    return response


@web.middleware
async def write_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Writes come only from the console's own pages: read-only consoles refuse them all, and a POST must
    carry htmx's header (which another site's form cannot set) and, if the browser sends one, our Origin."""
    if request.method in ("GET", "HEAD"):
        return await handler(request)
    console: Console = request.app[CONSOLE]
    resource = request.match_info.route.resource
    reads = resource is not None and resource.canonical in READS_BY_POST
    if console.config.read_only and not reads:
        return web.Response(status=403, text="this console is read-only")
    origin = request.headers.get("Origin")
    if origin is not None and origin not in (f"http://{request.host}", f"https://{request.host}"):
        return web.Response(status=403, text="cross-origin write refused")
    if request.headers.get("HX-Request") != "true":
        return web.Response(status=403, text="writes are accepted from the console's pages only")
    return await handler(request)


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A cluster failure becomes a page (or, for htmx, a fragment) naming Kafka's error, never a trace."""
    console: Console = request.app[CONSOLE]
    try:
        return await handler(request)
    except ClusterError as error:
        if request.headers.get("HX-Request") == "true":
            # htmx swaps only 2xx answers; the fragment says what failed.
            return web.Response(text=console.render("_error.html", error=error), content_type="text/html")
        status = 503 if error.unreachable else _STATUS.get(error.name, 502)
        body = console.render("error_page.html", error=error, page="")
        return web.Response(status=status, text=body, content_type="text/html")


# Errors a request's own content causes are 4xx; any other error of the cluster's is 502 (it failed).
_STATUS = {
    "UNKNOWN_TOPIC_OR_PART": 404,
    "GROUP_ID_NOT_FOUND": 404,
    "NOT_FOUND": 404,
    "_NOENT": 404,  # a scan that is over and forgotten
    "INVALID_REQUEST": 400,
    "INVALID_TOPIC_EXCEPTION": 400,
    "INVALID_PARTITIONS": 400,
    "INVALID_REPLICATION_FACTOR": 400,
    "INVALID_CONFIG": 400,
    "INVALID_GROUP_ID": 400,
    "POLICY_VIOLATION": 400,
    "_INVALID_ARG": 400,
    "TOPIC_AUTHORIZATION_FAILED": 403,
    "GROUP_AUTHORIZATION_FAILED": 403,
    "CLUSTER_AUTHORIZATION_FAILED": 403,
    "TOPIC_ALREADY_EXISTS": 409,
    "NON_EMPTY_GROUP": 409,
    "REGISTRY_UNREACHABLE": 503,
}
