"""The Schemas pages: a registry's subjects, one subject's versions and texts, and a diff of two versions.

The handlers get the console and the page renderer from :mod:`sluice.console.routes` when it adds them,
so this module needs neither the app nor the routes module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from sluice.console.cluster import ClusterError
from sluice.console.schemas import SchemaBrowser, unified_diff

ConsoleOf = Callable[[web.Request], Any]
Page = Callable[..., web.Response]


def _version(raw: str | None, versions: list[int], what: str) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or int(raw) not in versions:
        raise ClusterError("NOT_FOUND", f"{what} {raw!r} is not one of the subject's versions {versions}")
    return int(raw)


def add_routes(app: web.Application, console_of: ConsoleOf, page: Page) -> None:
    def browser(request: web.Request) -> SchemaBrowser | None:
        return console_of(request).schemas

    async def subjects(request: web.Request) -> web.Response:
        started = time.perf_counter()
        schemas = browser(request)
        if schemas is None:
            return page(request, "schemas.html", page="schemas", rows=None)
        rows = await console_of(request).run(schemas.subjects)
        elapsed = (time.perf_counter() - started) * 1000
        return page(
            request, "schemas.html", page="schemas", rows=rows, registry=schemas.url, elapsed_ms=elapsed
        )

    async def subject(request: web.Request) -> web.Response:
        started = time.perf_counter()
        schemas = browser(request)
        if schemas is None:
            return page(request, "schemas.html", page="schemas", rows=None)
        console = console_of(request)
        name = request.match_info["name"]
        versions = await console.run(schemas.versions, name)
        chosen = _version(request.query.get("version"), versions, "version") or versions[-1]
        shown = await console.run(schemas.version, name, chosen)
        against = _version(request.query.get("diff"), versions, "diff version")
        diff = None
        if against is not None and against != chosen:
            other = await console.run(schemas.version, name, against)
            old, new = (other, shown) if against < chosen else (shown, other)
            diff = {"old": old.version, "new": new.version, "lines": unified_diff(old, new)}
        return page(
            request,
            "schema.html",
            page="schemas",
            name=name,
            versions=versions,
            shown=shown,
            against=against,
            diff=diff,
            registry=schemas.url,
            elapsed_ms=(time.perf_counter() - started) * 1000,
        )

    app.router.add_get("/schemas", subjects)
    app.router.add_get("/schemas/{name}", subject)
