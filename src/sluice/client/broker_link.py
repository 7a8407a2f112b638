"""One pipelined asyncio connection to one broker, for clients that write their own requests.

Requests go out in the order they are sent and a broker answers a connection's requests in that order;
answers are matched to requests by correlation id all the same, and one that matches nothing ends the link
(the stream is then not what it claims to be). A request left unanswered for `request_timeout` seconds ends
it too, as the Java client and librdkafka close a connection whose request timed out. When the link ends,
every request still waiting fails with `LinkLost`: the broker may or may not have acted on it, and only the
caller knows whether that can be retried safely.

Connections are plaintext, or SASL (PLAIN, SCRAM) over plaintext through `secure.connect_secure`: a TLS
connection made there is an `ssl.SSLSocket`, which asyncio cannot adopt, so callers check `unsupported` first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
from collections.abc import Mapping

from sluice.client.secure import connect_secure, security_protocol, unsupported_reason

log = logging.getLogger(__name__)

_FRAME = struct.Struct(">i")
# Request header v1 (every version of an API before its flexible ones): api key, version, correlation id,
# then the client id as a string (its int16 length first).
_HEADER = struct.Struct(">hhih")
# Sends wait for the socket once this much is waiting to be written.
_WRITE_BUFFER_HIGH = 4 * 1024 * 1024
# How often waiting requests are checked against the request timeout.
_WATCH_SECONDS = 0.5
# The largest answer read (Kafka's socket.request.max.bytes is 100 MiB on the broker's side).
MAX_ANSWER_BYTES = 100 * 1024 * 1024


class LinkLost(Exception):
    """The connection ended before this request's answer came: the broker may have acted on it or not."""


def unsupported(settings: Mapping[str, str]) -> str | None:
    """Why a link cannot be made with these client settings, or None."""
    reason = unsupported_reason(settings)
    if reason is None and security_protocol(settings).endswith("ssl"):
        reason = "TLS connections (security.protocol ssl, sasl_ssl) are made by librdkafka only"
    return reason


class BrokerLink:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_id: str,
        request_timeout: float = 30.0,
    ) -> None:
        self._reader, self._writer = reader, writer
        self._client_id = client_id.encode()
        self._correlations = itertools.count(1)
        # Correlation id -> (the answer's future, when it was sent), oldest first.
        self._waiting: dict[int, tuple[asyncio.Future[bytes], float]] = {}
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._read_task = self._loop.create_task(self._read_answers())
        self._request_timeout = request_timeout
        self._watch = self._loop.call_later(_WATCH_SECONDS, self._check_timeouts)

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        settings: Mapping[str, str],
        timeout: float,
        client_id: str,
        request_timeout: float = 30.0,
    ) -> BrokerLink:
        """Connect (and authenticate, with SASL settings) within `timeout` seconds."""
        reason = unsupported(settings)
        if reason is not None:
            raise ValueError(reason)
        if security_protocol(settings) == "plaintext":
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        else:
            # The SASL exchange is a few blocking round trips, done once per connection off the loop.
            wire = await asyncio.to_thread(connect_secure, host, port, settings, timeout, client_id=client_id)
            wire.sock.settimeout(None)
            reader, writer = await asyncio.open_connection(sock=wire.sock)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer, client_id, request_timeout)

    def send(self, api_key: int, version: int, body: bytes) -> asyncio.Future[bytes]:
        """Write one request (`body` follows its header); the future resolves to the answer after its
        correlation id, or fails with `LinkLost`."""
        if self.closed:
            raise LinkLost("the connection is closed")
        correlation = next(self._correlations)
        header = _HEADER.pack(api_key, version, correlation, len(self._client_id)) + self._client_id
        self._writer.write(_FRAME.pack(len(header) + len(body)) + header + body)
        answer: asyncio.Future[bytes] = self._loop.create_future()
        self._waiting[correlation] = (answer, self._loop.time())
        return answer

    def congested(self) -> bool:
        """Whether much is still waiting to be written: senders then `await drain()` (a slow broker slows
        them down)."""
        return self._writer.transport.get_write_buffer_size() > _WRITE_BUFFER_HIGH

    async def drain(self) -> None:
        await self._writer.drain()

    def _check_timeouts(self) -> None:
        if self.closed:
            return
        oldest = next(iter(self._waiting.values()), None)
        if oldest is not None and self._loop.time() - oldest[1] > self._request_timeout:
            self._end(f"no answer in {self._request_timeout:g} s")
            return
        self._watch = self._loop.call_later(_WATCH_SECONDS, self._check_timeouts)

    async def _read_answers(self) -> None:
        reason = "the broker closed the connection"
        try:
            while True:
                (size,) = _FRAME.unpack(await self._reader.readexactly(4))
                if not 4 <= size <= MAX_ANSWER_BYTES:
                    reason = f"an answer of {size} bytes"
                    break
                body = await self._reader.readexactly(size)
                (correlation,) = _FRAME.unpack_from(body)
                waiting = self._waiting.pop(correlation, None)
                if waiting is None:
                    reason = f"an answer to correlation id {correlation}, which no request had"
                    break
                if not waiting[0].done():
                    waiting[0].set_result(body[4:])
        except (OSError, asyncio.IncompleteReadError) as exc:
            reason = f"the connection broke: {exc}"
        except Exception as exc:  # whatever it is, no request may be left waiting for an answer
            reason = f"reading answers failed: {exc!r}"
        self._end(reason)

    def _end(self, reason: str) -> None:
        self.closed = True
        self._watch.cancel()
        waiting, self._waiting = self._waiting, {}
        for answer, _ in waiting.values():
            if not answer.done():
                answer.set_exception(LinkLost(reason))
        self._writer.close()

    async def close(self) -> None:
        if not self.closed:
            self._read_task.cancel()
            self._end("the link was closed")
        try:
            await self._read_task
        except asyncio.CancelledError:
            pass
