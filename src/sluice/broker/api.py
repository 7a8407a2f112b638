"""What a handler is and what it may answer: the contract between handlers and the asyncio shell.

A handler is a plain function `(broker, ctx, request) -> Outcome` (broker: sluice.broker.broker.Broker; this
module names no broker type, so the contract sits below everything that implements it). It never waits itself: when an answer
depends on durability, new data or other group members, it returns an outcome that tells the shell what to
wait for. The versions a handler serves are declared where it is registered; ApiVersions is derived from
those declarations.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.errors import KafkaError
from sluice.protocol.messages import APIS_BY_KEY
from sluice.protocol.schema import Versions

if TYPE_CHECKING:
    from sluice.broker.quotas import ClientQuotas
    from sluice.security.acl import Authorizer


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    now_ms: int
    # Identifies this request to the shell when its answer comes later (parked group requests).
    reply_token: Hashable = None
    # The security protocol of the listener the request came through (Metadata advertises that one).
    listener: str = "PLAINTEXT"
    # The connection's `sluice.security.session.Session` (None for requests made without a connection).
    session: Any = None
    # The broker's client quotas, as the dispatcher hands them to handlers (None: no quotas apply).
    quotas: ClientQuotas | None = None
    # The ACL authorizer's decisions (None: no authorizer, everything allowed), for KIP-430 answers.
    acl: Authorizer | None = None

    @property
    def principal(self) -> str:
        return self.session.principal if self.session is not None else "User:ANONYMOUS"


@dataclass(slots=True)
class Respond:
    """Send this response now."""

    response: Any


class RespondEncoded:
    """Send this response body now, already encoded at the request's version (the shell adds the header).
    Only for answers a fast path wrote without building the response (sluice.broker.handlers.produce)."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body


@dataclass(slots=True)
class RespondWhenDurable:
    """Send this response once every append made so far is fsynced (group commit covers many at once)."""

    response: Any


@dataclass(slots=True)
class RespondWhenData:
    """Long poll: call `retry(now_ms, final)` whenever one of `watch` gets data, and at `deadline_ms` with
    final=True. It returns the response, or None to keep waiting (never None when final)."""

    deadline_ms: int
    watch: list[tuple[str, int]]
    retry: Callable[[int, bool], Any]


@dataclass(slots=True)
class Parked:
    """The answer comes later, through `Dispatcher.take_ready_replies()`, keyed by the request's reply token."""


@dataclass(slots=True)
class NoResponse:
    """Produce with acks=0: the client expects nothing back."""


Outcome = Respond | RespondEncoded | RespondWhenDurable | RespondWhenData | Parked | NoResponse
Handler = Callable[[Any, RequestContext, Any], Outcome]


@dataclass(slots=True)
class HandlerSpec:
    api_key: int
    versions: Versions
    handle: Handler


@dataclass
class HandlerRegistry:
    handlers: dict[int, HandlerSpec] = field(default_factory=dict)

    def register(self, api_name: str, versions: str | None = None) -> Callable[[Handler], Handler]:
        """Declare `fn` as the handler of `api_name` for `versions` (default: every defined version)."""
        api = next(a for a in APIS_BY_KEY.values() if a.name == api_name)
        served = Versions.parse(versions) if versions else api.versions
        if served.low < api.versions.low or served.high > api.versions.high:
            raise ValueError(f"{api_name} handler serves {served}, outside the defined {api.versions}")

        def decorate(fn: Handler) -> Handler:
            if api.key in self.handlers:
                raise ValueError(f"{api_name} has two handlers")
            self.handlers[api.key] = HandlerSpec(api.key, served, fn)
            return fn

        return decorate

    def supported(self) -> list[tuple[int, int, int]]:
        return sorted((key, spec.versions.low, spec.versions.high) for key, spec in self.handlers.items())


HANDLERS = HandlerRegistry()
handles = HANDLERS.register


def response_class(api_name: str) -> Any:
    """The generated response class of an API, e.g. `response_class("Metadata").MetadataResponseTopic`."""
    from sluice.protocol.messages import APIS_BY_NAME, response_codecs

    return response_codecs(APIS_BY_NAME[api_name].key).cls


@contextmanager
def errors_into(result: Any) -> Iterator[None]:
    """A KafkaError raised in the block becomes `result`'s error_code and error_message (per-item errors)."""
    try:
        yield
    except KafkaError as exc:
        result.error_code, result.error_message = exc.code, exc.message
