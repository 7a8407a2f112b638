"""A TLS-terminating relay for security_bench.py --terminator: TLS from clients, plain TCP to a broker listener.

    python bench/tls_terminator.py LISTEN_PORT TARGET_PORT CERTFILE KEYFILE

It answers whether moving the TLS record layer out of the broker's process (onto the other core) buys
throughput here: the relay decrypts and forwards bytes both ways, and the broker serves them on a
SASL_PLAINTEXT listener whose advertised address is the relay's, so SASL still runs in the broker.
Not a feature: a measuring device.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
from typing import Any


class _Pipe(asyncio.Protocol):
    def __init__(self) -> None:
        self.peer: _Pipe | None = None
        self.transport: Any = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.peer.transport is None:
            self.early.append(data)
        else:
            self.peer.transport.write(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Front(_Pipe):
    target_port = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        transport.pause_reading()  # type: ignore[attr-defined]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        back = _Pipe()
        back.peer = self
        await asyncio.get_running_loop().create_connection(lambda: back, "127.0.0.1", self.target_port)
        self.peer = back
        for data in self.early:
            back.transport.write(data)
        self.transport.resume_reading()


async def serve(listen_port: int, context: ssl.SSLContext) -> None:
    await asyncio.get_running_loop().create_server(_Front, "127.0.0.1", listen_port, ssl=context)
    print("ready", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    listen_port, target_port, certfile, keyfile = sys.argv[1:5]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    _Front.target_port = int(target_port)
    import uvloop

    uvloop.install()
    asyncio.run(serve(int(listen_port), context))


if __name__ == "__main__":
    main()
