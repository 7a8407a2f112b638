"""The request pipeline (sluice.broker.dispatch) driven without sockets, on a real broker: a connection as the
pipeline sees it, request frames as a client writes them, and answers as a client reads them."""

from __future__ import annotations

from typing import Any

from sluice.broker.dispatch import Close, Dispatched, Dispatcher, Reply
from sluice.protocol.headers import request_header
from sluice.protocol.messages import APIS_BY_NAME, request_codecs, response_codec
from sluice.security.session import Session


class Connection:
    """One client connection as the pipeline sees it (sluice.broker.dispatch.RequestOrigin), recording the
    answers that came later (`Reply.fill`)."""

    def __init__(
        self, principal: str = "User:ANONYMOUS", *, gated: bool = False, authenticated: bool = True
    ) -> None:
        self.listener = "SASL_PLAINTEXT" if gated else "PLAINTEXT"
        self.peer_host = "10.0.0.7"
        self.session = Session.open("SASL_PLAINTEXT", self.peer_host)
        self.session.principal, self.session.authenticated = principal, authenticated
        self.gated = gated
        self.repeated_fetch: Any = None
        self.closed = False
        self.answered_later: list[tuple[Reply, int]] = []

    def answered(self, reply: Reply, throttle_ms: int) -> None:
        self.answered_later.append((reply, throttle_ms))


def request_frame(api: str, version: int, correlation_id: int = 7, client_id: str | None = "test", **fields: Any) -> memoryview:
    """A request of `api` at `version` with the given fields, header included, as a client sends it."""
    key = APIS_BY_NAME[api].key
    codec = request_codecs(key)[version]
    header = request_header(key, version, correlation_id, client_id, codec.flexible)
    return memoryview(header + codec.encode(codec.cls(**fields)))


def dispatch(
    dispatcher: Dispatcher, frame: bytes | memoryview, connection: Connection | None = None, now_ms: int = 0
) -> tuple[Dispatched | Close, Reply]:
    """One request through the pipeline: what it made of it, and the request's reply token."""
    connection = connection or Connection()
    reply = Reply(connection)
    return dispatcher.dispatch(memoryview(frame), connection, reply, now_ms), reply


def read_answer(answer: list[Any], api: str, version: int) -> tuple[int, Any]:
    """(correlation id, response) of an answer framed by the pipeline, read as a client reads it."""
    codec = response_codec(APIS_BY_NAME[api].key, version)
    data = b"".join(answer)
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    response, end = codec.decode(data, 9 if codec.tagged_header else 8)
    assert end == len(data)
    return int.from_bytes(data[4:8], "big"), response
