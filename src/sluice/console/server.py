"""The console's asyncio shell: the aiohttp application (middlewares from sluice.console.app, pages from
sluice.console.routes), started on a port and stopped on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from sluice.console import routes
from sluice.console.app import CONSOLE, Console, ConsoleConfig, auth_middleware, error_pages, write_guard


def create_app(config: ConsoleConfig) -> web.Application:
    app = web.Application(
        middlewares=[auth_middleware, write_guard, error_pages], client_max_size=2 * 1024 * 1024
    )
    console = Console(config)
    app[CONSOLE] = console
    routes.add_routes(app)

    async def on_startup(_: web.Application) -> None:
        console.start_sampler()

    async def on_cleanup(_: web.Application) -> None:
        await console.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


@dataclass
class RunningConsole:
    runner: web.AppRunner
    url: str

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_console(config: ConsoleConfig) -> RunningConsole:
    app = create_app(config)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    server = site._server
    port = config.port
    if server is not None and getattr(server, "sockets", None):
        port = server.sockets[0].getsockname()[1]
    host = f"[{config.host}]" if ":" in config.host else config.host
    return RunningConsole(runner, f"http://{host}:{port}/")


async def serve_console(config: ConsoleConfig) -> None:
    from sluice.eventloop import install_stop_signals

    stop = asyncio.Event()
    install_stop_signals(stop)
    running = await start_console(config)
    print(f"sluice console on {running.url} (cluster {config.settings.get('bootstrap.servers')})", flush=True)
    try:
        await stop.wait()
    finally:
        await running.stop()
