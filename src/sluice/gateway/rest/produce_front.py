"""The REST listener's first reader: v2 binary produce of values alone served without aiohttp's request machinery,
everything else handed to aiohttp.

Why: once its records are written as batches, such a produce costs the gateway about 1.1 us per record, and
aiohttp's per-request work (request and response objects, routing, middleware) is about a quarter of it
(bench/rest_ceiling_bench.py: a bare asyncio front answers in 0.1 us per record where a minimal aiohttp handler
takes 0.34). The REST Proxy's most common call should not pay that.

Every connection starts here. A request is served here only when all of it is the plain case: `POST
/topics/{topic}` or `/topics/{topic}/partitions/{p}`, HTTP/1.1, a Content-Length within the body limit, the
binary v2 Content-Type, an Accept a v2 answer satisfies (or none), no Expect, Transfer-Encoding or
`Connection: close`, a body whose records are each a value alone, and a topic that exists. At the first request
that is anything else (any other route, a malformed or unusual request, one aiohttp would answer with an
error), the connection is handed to aiohttp for good, with every byte not yet answered, and aiohttp reads it
as if it had had the connection from the start. So every answer other than the plain produce's, errors
included, is aiohttp's, and nothing is written before a request is known to be served here.

Requests on a connection are answered in order, one at a time (reading pauses while one is produced). Used
only where the listener has no TLS and no client credentials to check (`RestProxy` decides).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import re
import time
from collections.abc import Callable
from typing import cast

from aiohttp import web

from .context import RestContext
from .errors import V2_JSON, RestError, acceptable, error_body
from .v2_produce import binary_values, write_values

log = logging.getLogger(__name__)

# aiohttp's keepalive_timeout: an idle keep-alive connection is closed after this long.
KEEPALIVE_SECONDS = 75.0
# Far more than any plain request's head (a client's headers); a longer one is aiohttp's to judge.
MAX_HEAD_BYTES = 16 * 1024
_BINARY = "application/vnd.kafka.binary.v2+json"
# The routes served here; names as Kafka allows them (anything else, %-escapes included, goes to aiohttp).
_TARGET = re.compile(rb"/topics/([a-zA-Z0-9._-]{1,249})(?:/partitions/([0-9]{1,9}))?")
_UNSERVED_HEADERS = frozenset({b"transfer-encoding", b"expect", b"content-encoding"})


class ProduceFront(asyncio.Protocol):
    def __init__(
        self, aiohttp_server: web.Server, context: RestContext, max_body: int, fronts: set[ProduceFront]
    ) -> None:
        self._aiohttp_server = aiohttp_server
        self._context = context
        self._max_body = max_body
        self._fronts = fronts
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._busy = False
        self._handed_over = False
        self._task: asyncio.Task[None] | None = None
        self._last_data = 0.0
        self._idle_check: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._fronts.add(self)
        # Kept: asyncio.get_running_loop() costs a getpid() per call.
        self._loop = loop = asyncio.get_running_loop()
        self._last_data = loop.time()
        self._idle_check = loop.call_later(KEEPALIVE_SECONDS, self._close_if_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fronts.discard(self)
        self._buffer.clear()
        if self._idle_check is not None:
            self._idle_check.cancel()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._last_data = self._loop.time()
        if not self._busy:
            self._serve_next()

    def _close_if_idle(self) -> None:
        """Closes a connection that has sent nothing for `KEEPALIVE_SECONDS` and waits for no answer, as
        aiohttp closes its idle keep-alive connections (checked lazily: no timer is reset per request)."""
        loop = self._loop
        quiet = loop.time() - self._last_data
        if quiet >= KEEPALIVE_SECONDS and not self._busy and self._transport is not None:
            self._idle_check = None
            self._transport.close()
            return
        self._idle_check = loop.call_later(max(KEEPALIVE_SECONDS - quiet, 1.0), self._close_if_idle)

    @property
    def idle(self) -> bool:
        return not self._busy

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _serve_next(self) -> None:
        """Start on the first whole request in the buffer, or hand the connection over."""
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                self._hand_over()
            return
        plain = _plain_produce(bytes(self._buffer[:end]), self._max_body)
        if plain is None:
            self._hand_over()
            return
        topic, partition, length = plain
        total = end + 4 + length
        if len(self._buffer) < total:
            return  # the body is still coming
        assert self._transport is not None
        self._busy = True
        self._transport.pause_reading()
        body = bytes(self._buffer[end + 4 : total])
        self._task = self._loop.create_task(self._serve(topic, partition, body, total))

    async def _serve(self, topic: str, partition: int | None, body: bytes, total: int) -> None:
        try:
            await self._produce(topic, partition, body, total)
        except BaseException:  # a bug here must not leave the connection waiting forever
            log.exception("REST produce to %s failed", topic)
            self.close()
            raise

    async def _produce(self, topic: str, partition: int | None, body: bytes, total: int) -> None:
        transport, context = self._transport, self._context
        assert transport is not None and context.writer is not None
        values = binary_values(body)
        try:
            if values is None:
                raise _NotPlain
            try:
                count = len((await context.admin.topic(topic)).partitions)
            except Exception:  # unknown topic, or the cluster's metadata unreachable
                raise _NotPlain from None
            if partition is not None and partition >= count:
                raise _NotPlain
        except _NotPlain:
            self._busy = False
            self._hand_over()  # aiohttp reads the request again and answers it (422, 404, ...)
            return
        try:
            status, answer = 200, await write_values(context, topic, partition, values, count)
        except RestError as error:  # as the REST middleware answers it
            status, answer = error.status, error_body(error)
        self._busy = False
        if transport.is_closing():
            return
        del self._buffer[:total]
        transport.write(_answer_head(status, len(answer)) + answer)
        transport.resume_reading()
        if self._buffer:
            self._serve_next()

    def _hand_over(self) -> None:
        """aiohttp serves this connection from now on, starting with every byte not answered here."""
        transport = self._transport
        if self._handed_over or transport is None or transport.is_closing():
            return
        self._handed_over = True
        self._fronts.discard(self)
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None
        handler = self._aiohttp_server()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        pending, self._buffer = bytes(self._buffer), bytearray()
        transport.resume_reading()
        if pending:
            handler.data_received(pending)


class _NotPlain(Exception):
    """The request is not one this front serves (after all): aiohttp's to answer."""


def _plain_produce(head: bytes, max_body: int) -> tuple[str, int | None, int] | None:
    """(topic, partition or None, body length) of a plain binary produce request's head, else None."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"POST" or parts[2] != b"HTTP/1.1":
        return None
    target = _TARGET.fullmatch(parts[1])
    if target is None:
        return None
    length = content_type = accept = None
    for line in lines[1:]:
        raw_name, colon, value = line.partition(b":")
        name, value = raw_name.lower(), value.strip()
        # (whitespace around a header's name, a folded line, a line without a colon: aiohttp refuses them)
        if not colon or not name or name != name.strip() or name in _UNSERVED_HEADERS:
            return None
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return None
            length = int(value)
        elif name == b"content-type":
            content_type = value.decode("latin-1").lower()
        elif name == b"accept":
            accept = value.decode("latin-1")
        elif name == b"connection" and value.lower() != b"keep-alive":
            return None
    if length is None or length > max_body or content_type != _BINARY:
        return None
    if accept is not None and accept and not acceptable(accept):
        return None
    partition = target.group(2)
    return target.group(1).decode(), None if partition is None else int(partition), length


_date: tuple[int, bytes] = (0, b"")


def _answer_head(status: int, length: int) -> bytes:
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True).encode())
    reason = _REASONS.get(status, b"Error")
    return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nDate: %s\r\n\r\n" % (
        status,
        reason,
        V2_JSON.encode(),
        length,
        _date[1],
    )


_REASONS = {
    200: b"OK",
    404: b"Not Found",
    413: b"Request Entity Too Large",
    422: b"Unprocessable Entity",
    429: b"Too Many Requests",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}


def front_factory(
    aiohttp_server: web.Server, context: RestContext, max_body: int, fronts: set[ProduceFront]
) -> Callable[[], ProduceFront]:
    return lambda: ProduceFront(aiohttp_server, context, max_body, fronts)
