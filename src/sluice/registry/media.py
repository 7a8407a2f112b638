"""Content negotiation as Confluent's Schema Registry does it (its resources' @Produces and @Consumes, chosen
by Jersey).

Answers are application/vnd.schemaregistry.v1+json (qs 1), application/vnd.schemaregistry+json (qs 0.9) or
application/json (qs 0.5): the client's most preferred Accept entry (by q, then the more specific) that any of
them matches picks, among those, the one of highest qs; a wildcard type (`*`, `*/*`, `*/x`) matches all; no
match is 406. A request body is one of those three types or application/octet-stream (what a body without a
Content-Type is taken as), else 415. Both errors are Jersey's, as rest-utils words them.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from aiohttp import web

V1_JSON = "application/vnd.schemaregistry.v1+json"
DEFAULT_JSON = "application/vnd.schemaregistry+json"
JSON = "application/json"
# What the registry answers in, with Jersey's server-side quality (qs), most preferred first.
PRODUCES = ((V1_JSON, 1.0), (DEFAULT_JSON, 0.9), (JSON, 0.5))
CONSUMES = frozenset({V1_JSON, DEFAULT_JSON, JSON, "application/octet-stream"})
NOT_ACCEPTABLE = (406, 406, "HTTP 406 Not Acceptable")
UNSUPPORTED_MEDIA_TYPE = (415, 415, "HTTP 415 Unsupported Media Type")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ErrorReply = Callable[[int, int, str], web.Response]


def _entries(header: str) -> list[tuple[str, str, float]]:
    """(type, subtype, q) of each Accept entry, most preferred first: by q, then the more specific."""
    found: list[tuple[str, str, float]] = []
    for part in header.split(","):
        fields = part.split(";")
        media = fields[0].strip().lower()
        if not media:
            continue
        quality = 1.0
        for param in fields[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value.strip())
                except ValueError:
                    quality = 0.0
        kind, _, subtype = ("*/*" if media == "*" else media).partition("/")
        found.append((kind, subtype or "*", quality))
    # Specificity: type/subtype 2, type/* 1, */* 0 (sorted() is stable: equal entries keep their order).
    return sorted((e for e in found if e[2] > 0), key=lambda e: (-e[2], -((e[0] != "*") + (e[1] != "*"))))


@functools.lru_cache(maxsize=256)  # a client sends the same Accept header with every request
def answer_type(header: str | None) -> str | None:
    """The content type to answer in for an Accept header (None or blank: the default), None for 406."""
    if header is None or not header.strip():
        return V1_JSON
    for kind, subtype, _ in _entries(header):
        for produced, _qs in PRODUCES:  # most preferred first, so the first match has the highest qs
            produced_kind, produced_subtype = produced.split("/")
            if kind == "*" or (kind == produced_kind and subtype in ("*", produced_subtype)):
                return produced
    return None


def negotiation(error_reply: ErrorReply) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The middleware: 415 for a body of another type, 406 for an Accept nothing matches, else the handler's
    answer in the negotiated type."""

    @web.middleware
    async def negotiate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists and request.content_type not in CONSUMES:
            return error_reply(*UNSUPPORTED_MEDIA_TYPE)
        chosen = answer_type(request.headers.get("Accept"))
        if chosen is None:
            return error_reply(*NOT_ACCEPTABLE)
        response = await handler(request)
        if chosen != V1_JSON and response.content_type == V1_JSON:
            response.content_type = chosen
        return response

    return negotiate
