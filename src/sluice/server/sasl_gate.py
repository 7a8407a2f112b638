"""The shell's side of authentication, per connection: what it may send, how big, and what a failed login costs.

The decisions are the `Session`'s (pure, sluice.security.session); this only applies them to the socket:
- before authentication only ApiVersions and the SASL APIs pass, and requests are capped at 512 KiB;
- after SaslHandshake v0 the SASL tokens come as bare frames (no Kafka header) and go back the same way;
- a failed login is answered after the throttle's delay, then the connection is closed;
- an expired session (KIP-368) may only re-authenticate.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any, Protocol

from sluice.broker.api import Respond
from sluice.broker.broker import Broker
from sluice.broker.handlers.security import sasl_step
from sluice.protocol.framing import FrameBuffer
from sluice.security.session import Session


class GatedConnection(Protocol):
    """The parts of a connection (sluice.server.connection.KafkaConnection) the gate works on."""

    frames: FrameBuffer
    transport: Any
    closed: bool
    reading_paused: bool

    def abort(self, reason: str) -> None: ...


class Reply(Protocol):
    """A place in the connection's response order (sluice.server.connection.ResponseSlot)."""

    def fill(self, response: Any, version: int | None = None) -> None: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class AuthGate:
    __slots__ = ("_usual_max_bytes", "broker", "closing", "connection", "session")

    def __init__(self, connection: GatedConnection, session: Session, broker: Broker) -> None:
        self.connection = connection
        self.session = session
        self.broker = broker
        self.closing = False  # a failed login is being answered: nothing more is read
        self._usual_max_bytes = connection.frames.max_frame_bytes
        self._apply_size_cap()

    def _apply_size_cap(self) -> None:
        cap = self.session.max_request_bytes
        self.connection.frames.max_frame_bytes = (
            min(cap, self._usual_max_bytes) if cap else self._usual_max_bytes
        )

    def admits(self, api_key: int) -> bool:
        """May this request be served now? If not, the connection is closed (as Kafka does)."""
        if self.closing:
            return False
        if self.session.may_send(api_key, _now_ms()):
            return True
        if self.session.authenticated:
            self.connection.abort("SASL session expired: the client must re-authenticate")
        else:
            self.connection.abort(f"API {api_key} before authentication finished")
        return False

    def raw_token(self, body: memoryview) -> bool:
        """Handle `body` as a bare SASL token if the connection is in SaslHandshake v0's raw mode."""
        session = self.session
        if self.closing:
            return True
        if not session.raw_tokens:
            return False
        error, _message, reply, _ = sasl_step(self.broker, session, bytes(body), _now_ms())
        if error:
            self._close_after_delay(None)
            return True
        transport = self.connection.transport
        if transport is not None and not self.connection.closed:
            transport.write(struct.pack(">i", len(reply)) + reply)
        self._apply_size_cap()
        return True

    def after_dispatch(self, slot: Reply, outcome: Any) -> bool:
        """True when this took care of the response (a failed login, answered late)."""
        self._apply_size_cap()
        if self.session.failure_delay_ms is None or not isinstance(outcome, Respond):
            return False
        self._close_after_delay((slot, outcome.response))
        return True

    def _close_after_delay(self, answer: tuple[Reply, Any] | None) -> None:
        connection = self.connection
        delay = (self.session.failure_delay_ms or 0) / 1000
        self.session.failure_delay_ms = None
        self.closing = True
        if connection.transport is not None:
            connection.transport.pause_reading()
            connection.reading_paused = True

        def answer_and_close() -> None:
            if connection.closed:
                return
            if answer is not None:
                answer[0].fill(answer[1])
            connection.closed = True
            if connection.transport is not None:
                connection.transport.close()  # after the answer is written

        asyncio.get_running_loop().call_later(delay, answer_and_close)
