"""The Schema Registry REST API (Confluent's paths, bodies and error codes) over a RegistryService.

Reads are answered from this process's replayed state. Writes run on the primary: a secondary forwards
them, unchanged (Authorization header included), to the primary's URL and relays the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientConnectionError, ClientError, ClientSession, ClientTimeout, web

from sluice.registry import commands, errors, records
from sluice.registry.commands import RegisterRequest
from sluice.registry.formats import supported_types
from sluice.registry.records import Reference, SchemaValue
from sluice.registry.service import RegistryService, unavailable
from sluice.registry.state import DEFAULT_LEVEL, DEFAULT_MODE
from sluice.state_topic.kafka import StoreUnavailable

log = logging.getLogger("sluice.registry.api")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
FORWARDED_HEADER = "X-Sluice-Registry-Forwarded"
SERVICE = web.AppKey("registry", RegistryService)
SESSION = web.AppKey("registry-forwarding", ClientSession)
MAX_SUBJECT_CHARS = 10_000

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
routes = web.RouteTableDef()


def reply(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(obj).encode(), status=status, content_type=CONTENT_TYPE)


def error_reply(status: int, code: int, message: str) -> web.Response:
    return reply({"error_code": code, "message": message}, status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as Confluent's `{"error_code", "message"}` body; never a traceback."""
    try:
        if not request.app[SERVICE].ready:
            raise errors.RegistryError(
                503, 50003, "the registry is still reading its store (_schemas); try again"
            )
        return await handler(request)
    except errors.RegistryError as exc:
        return error_reply(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            return error_reply(404, 404, f"HTTP 404 Not Found: no such resource {request.path[:200]}")
        return error_reply(
            exc.status, exc.status, exc.reason if exc.status != 413 else exc.text or exc.reason
        )
    except Exception:
        log.exception("registry: %s %s failed", request.method, request.path)
        return error_reply(500, 50001, "internal error while handling the request (logged on the server)")


def _service(request: web.Request) -> RegistryService:
    return request.app[SERVICE]


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").strip().lower() == "true"


def _subject(request: web.Request) -> str:
    subject = request.match_info["subject"]
    if not subject.strip() or len(subject) > MAX_SUBJECT_CHARS or any(ord(c) < 32 for c in subject):
        raise errors.RegistryError(422, 42208, f"'{subject[:200]}' is not a valid subject name")
    return subject


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        # In the charset the Content-Type names (utf-16, say); without one json finds UTF-8, -16 or -32 itself.
        text = raw.decode(request.charset) if request.charset else raw
        body = json.loads(text) if text.strip() else None
    except LookupError:
        raise errors.RegistryError(415, 415, f"unknown charset {request.charset!r}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return body


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.bad_request(f"{name} must be an integer")
    return value


def _references(raw: Any) -> tuple[Reference, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise errors.bad_request("references must be a list")
    found = []
    for ref in raw:
        if not isinstance(ref, dict):
            raise errors.bad_request("each reference must be an object with name, subject and version")
        name, subject, version = ref.get("name"), ref.get("subject"), ref.get("version")
        if not isinstance(name, str) or not isinstance(subject, str) or isinstance(version, bool):
            raise errors.bad_request("each reference needs a string name and subject and an integer version")
        if not isinstance(version, int):
            raise errors.bad_request("a reference's version must be an integer")
        found.append(Reference(name, subject, version))
    return tuple(found)


async def _schema_request(request: web.Request, *, with_ids: bool = False) -> RegisterRequest:
    body = await _body(request)
    schema = body.get("schema")
    if schema is None or (isinstance(schema, str) and not schema.strip()):
        raise errors.empty_schema()
    if not isinstance(schema, str):
        raise errors.invalid_schema("'schema' must be a string")
    schema_type = body.get("schemaType") or records.DEFAULT_SCHEMA_TYPE
    if not isinstance(schema_type, str):
        raise errors.bad_request("schemaType must be a string")
    schema_type = schema_type.upper()
    if schema_type not in supported_types():
        # Confluent's words (AbstractSchemaRegistry.loadSchema), with the types this registry knows.
        raise errors.RegistryError(
            422, 42201, f"Invalid schema type {schema_type}: expected one of {', '.join(supported_types())}"
        )
    schema_id = _int_field(body, "id") if with_ids else None
    version = _int_field(body, "version") if with_ids else None
    if schema_id is not None and schema_id < 0:
        schema_id = None  # Confluent's clients send -1 for "no id"
    if version is not None and version <= 0:
        version = None
    if version is not None and version > commands.MAX_VERSION:
        raise errors.invalid_version(str(version))
    return RegisterRequest(
        schema=schema,
        schema_type=schema_type,
        references=_references(body.get("references")),
        schema_id=schema_id,
        version=version,
        normalize=_flag(request, "normalize"),
    )


def _schema_id(request: web.Request) -> int:
    # As Java's Integer.valueOf, which Jersey converts the path parameter with: digits, an optional sign, an
    # int32 (Python's int() would also take "1_0" and " 1").
    text = request.match_info["id"]
    if not re.fullmatch(r"[+-]?[0-9]{1,10}", text) or not -(2**31) <= int(text) < 2**31:
        raise errors.no_such_resource()
    return int(text)


def _stored_or_404(request: web.Request) -> tuple[int, Any]:
    """The schema the path's id names. `?subject=` picks the context it is looked up in, as Confluent's
    does: a subject of the default context finds any id; one qualified with another context finds none."""
    schema_id = _schema_id(request)
    stored = _service(request).state.schemas.get(schema_id)
    if stored is None or commands.in_other_context(request.query.get("subject")):
        raise errors.schema_not_found(schema_id)
    return schema_id, stored


def _count(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f"{name} must be an integer, got {raw[:50]!r}") from None


# -- forwarding writes to the primary --------------------------------------------------------------------------


def write_route(handler: Handler) -> Handler:
    """Run on the primary; on a secondary, relay the request to the primary (once: never forwarded twice).
    A primary that cannot be reached (stopping, hand-over under way) is looked up again until the store
    timeout."""

    async def run(request: web.Request) -> web.StreamResponse:
        service = _service(request)
        if service.is_primary or request.headers.get(FORWARDED_HEADER):
            return await handler(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + service.settings.store_timeout_s
        while True:
            primary = await service.primary_url()
            if primary is None:
                problem = service.election.problem if service.election else None
                raise errors.unknown_primary(
                    "no primary registry is elected yet; try again shortly"
                    + (f" (the election group reports: {problem})" if problem else "")
                )
            if service.is_primary or primary == (service.election.my_url if service.election else None):
                return await handler(request)
            try:
                answer = await _forward(request, primary)
            except ClientConnectionError as exc:
                if service.election is not None:
                    service.election.forget_primary()
                if loop.time() >= deadline:
                    raise errors.forwarding_failed(f"cannot reach the primary {primary}: {exc}") from None
                await asyncio.sleep(0.2)
                continue
            if answer.status == 200:
                # Read-your-writes here too: answer once this registry has read the primary's write.
                with contextlib.suppress(StoreUnavailable):
                    await service.store.sync()
            return answer

    return run


async def _forward(request: web.Request, primary: str) -> web.StreamResponse:
    headers = {FORWARDED_HEADER: "1", "Content-Type": request.headers.get("Content-Type", CONTENT_TYPE)}
    if "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    body = await request.read()
    url = primary.rstrip("/") + request.rel_url.path_qs
    try:
        async with request.app[SESSION].request(request.method, url, data=body, headers=headers) as answer:
            payload = await answer.read()
            return web.Response(body=payload, status=answer.status, content_type=CONTENT_TYPE)
    except ClientConnectionError:
        raise
    except (ClientError, TimeoutError) as exc:
        raise errors.forwarding_failed(f"forwarding to the primary {primary} failed: {exc}") from None


def forwarding_session(timeout_s: float, ssl_context: Any = None) -> ClientSession:
    from aiohttp import TCPConnector

    return ClientSession(timeout=ClientTimeout(total=timeout_s), connector=TCPConnector(ssl=ssl_context))


# -- root, types -----------------------------------------------------------------------------------------------


@routes.get("/")
async def root(request: web.Request) -> web.Response:
    return reply({})


@routes.get("/schemas/types")
async def schema_types(request: web.Request) -> web.Response:
    return reply(supported_types())


# -- subjects --------------------------------------------------------------------------------------------------


@routes.get("/subjects")
async def list_subjects(request: web.Request) -> web.Response:
    names = _service(request).state.subject_names(deleted=_flag(request, "deleted"))
    prefix = request.query.get("subjectPrefix")
    return reply([n for n in names if prefix is None or n.startswith(prefix)])


@routes.get("/subjects/{subject:[^/]+}/versions")
async def list_versions(request: web.Request) -> web.Response:
    subject = _subject(request)
    found = _service(request).state.versions(subject, deleted=_flag(request, "deleted"))
    if not found:
        raise errors.subject_not_found(subject)
    return reply([v.version for v in found])


@routes.post("/subjects/{subject:[^/]+}/versions")
@write_route
async def register(request: web.Request) -> web.Response:
    subject = _subject(request)
    wanted = await _schema_request(request, with_ids=True)
    service = _service(request)
    answer = await service.write(lambda: commands.register(service.state, service.catalog, subject, wanted))
    return reply(answer)


def _version(request: web.Request) -> SchemaValue:
    """The subject version the path names (?deleted=true: soft-deleted ones too)."""
    state, subject = _service(request).state, _subject(request)
    return commands.resolve(state, subject, request.match_info["version"], deleted=_flag(request, "deleted"))


@routes.get("/subjects/{subject:[^/]+}/versions/{version}")
async def get_version(request: web.Request) -> web.Response:
    return reply(commands.schema_answer(_version(request)))


@routes.get("/subjects/{subject:[^/]+}/versions/{version}/schema")
async def get_version_text(request: web.Request) -> web.Response:
    return web.Response(text=_version(request).schema, content_type=CONTENT_TYPE)


@routes.get("/subjects/{subject:[^/]+}/versions/{version}/referencedby")
async def referenced_by(request: web.Request) -> web.Response:
    state = _service(request).state
    value = commands.resolve(state, _subject(request), request.match_info["version"], deleted=True)
    return reply(state.referenced_by(value.subject, value.version))


@routes.delete("/subjects/{subject:[^/]+}/versions/{version}")
@write_route
async def delete_version(request: web.Request) -> web.Response:
    subject, version, permanent = (
        _subject(request),
        request.match_info["version"],
        _flag(request, "permanent"),
    )
    service = _service(request)
    answer = await service.write(
        lambda: commands.delete_version(service.state, subject, version, permanent=permanent)
    )
    return reply(answer)


@routes.post("/subjects/{subject:[^/]+}")
async def lookup(request: web.Request) -> web.Response:
    subject = _subject(request)
    wanted = await _schema_request(request)
    service = _service(request)
    found = commands.lookup(
        service.state, service.catalog, subject, wanted, deleted=_flag(request, "deleted")
    )
    return reply(commands.schema_answer(found))


@routes.delete("/subjects/{subject:[^/]+}")
@write_route
async def delete_subject(request: web.Request) -> web.Response:
    subject, permanent = _subject(request), _flag(request, "permanent")
    service = _service(request)
    answer = await service.write(lambda: commands.delete_subject(service.state, subject, permanent=permanent))
    return reply(answer)


# -- schemas by id ---------------------------------------------------------------------------------------------


@routes.get("/schemas")
async def list_schemas(request: web.Request) -> web.Response:
    offset = _count(request, "offset", 0)
    if offset < 0:
        raise errors.bad_request(f"offset must not be negative, got {offset}")
    listed = commands.list_schemas(
        _service(request).state,
        request.query.get("subjectPrefix", ""),
        deleted=_flag(request, "deleted"),
        latest_only=_flag(request, "latestOnly"),
        offset=offset,
        limit=_count(request, "limit", -1),
    )
    return reply(listed)


@routes.get("/v1/metadata/id")
async def metadata_id(request: web.Request) -> web.Response:
    service = _service(request)
    try:
        kafka_cluster = await service.kafka_cluster_id()
    except StoreUnavailable as exc:
        raise unavailable(str(exc)) from None
    clusters = {"kafka-cluster": kafka_cluster, "schema-registry-cluster": service.settings.group}
    return reply({"id": "", "scope": {"path": [], "clusters": clusters}})


@routes.get("/schemas/ids/{id}")
async def schema_by_id(request: web.Request) -> web.Response:
    _, stored = _stored_or_404(request)
    out: dict[str, Any] = {}
    if stored.schema_type != records.DEFAULT_SCHEMA_TYPE:
        out["schemaType"] = stored.schema_type
    if stored.references:
        out["references"] = [ref.to_json() for ref in stored.references]
    out["schema"] = stored.text
    return reply(out)


@routes.get("/schemas/ids/{id}/schema")
async def schema_text_by_id(request: web.Request) -> web.Response:
    _, stored = _stored_or_404(request)
    return web.Response(text=stored.text, content_type=CONTENT_TYPE)


@routes.get("/schemas/ids/{id}/versions")
async def schema_versions_by_id(request: web.Request) -> web.Response:
    schema_id, _ = _stored_or_404(request)
    deleted = _flag(request, "deleted")
    users = [u for u in _service(request).state.users_of(schema_id) if deleted or not u.deleted]
    return reply([{"subject": u.subject, "version": u.version} for u in users])


@routes.get("/schemas/ids/{id}/subjects")
async def schema_subjects_by_id(request: web.Request) -> web.Response:
    schema_id, _ = _stored_or_404(request)
    deleted = _flag(request, "deleted")
    users = [u for u in _service(request).state.users_of(schema_id) if deleted or not u.deleted]
    return reply(sorted({u.subject for u in users}))


# -- config ----------------------------------------------------------------------------------------------------


@routes.get("/config")
async def get_global_config(request: web.Request) -> web.Response:
    return reply({"compatibilityLevel": _service(request).state.level(None)})


def _subject_setting(
    request: web.Request, table: dict[str | None, str], default: str, name: str, missing: errors.RegistryError
) -> web.Response:
    """A subject's own config/mode; the global one with ?defaultToGlobal=true; else 40408/40409."""
    subject = _subject(request)
    if subject in table:
        return reply({name: table[subject]})
    if _flag(request, "defaultToGlobal"):
        return reply({name: table.get(None, default)})
    raise missing


@routes.get("/config/{subject:[^/]+}")
async def get_subject_config(request: web.Request) -> web.Response:
    state = _service(request).state
    missing = errors.no_subject_config(_subject(request))
    return _subject_setting(request, state.config, DEFAULT_LEVEL, "compatibilityLevel", missing)


async def _level_from(request: web.Request) -> object:
    body = await _body(request)
    return body.get("compatibility", body.get("compatibilityLevel"))


@routes.put("/config")
@write_route
async def put_global_config(request: web.Request) -> web.Response:
    level, service = await _level_from(request), _service(request)
    return reply(await service.write(lambda: commands.set_config(service.state, None, level)))


@routes.put("/config/{subject:[^/]+}")
@write_route
async def put_subject_config(request: web.Request) -> web.Response:
    subject, level, service = _subject(request), await _level_from(request), _service(request)
    return reply(await service.write(lambda: commands.set_config(service.state, subject, level)))


@routes.delete("/config")
@write_route
async def delete_global_config(request: web.Request) -> web.Response:
    service = _service(request)
    return reply(await service.write(lambda: commands.delete_config(service.state, None)))


@routes.delete("/config/{subject:[^/]+}")
@write_route
async def delete_subject_config(request: web.Request) -> web.Response:
    subject, service = _subject(request), _service(request)
    return reply(await service.write(lambda: commands.delete_config(service.state, subject)))


# -- mode ------------------------------------------------------------------------------------------------------


@routes.get("/mode")
async def get_global_mode(request: web.Request) -> web.Response:
    return reply({"mode": _service(request).state.mode_of(None)})


@routes.get("/mode/{subject:[^/]+}")
async def get_subject_mode(request: web.Request) -> web.Response:
    state = _service(request).state
    return _subject_setting(
        request, state.mode, DEFAULT_MODE, "mode", errors.no_subject_mode(_subject(request))
    )


@routes.put("/mode")
@write_route
async def put_global_mode(request: web.Request) -> web.Response:
    mode, force, service = (await _body(request)).get("mode"), _flag(request, "force"), _service(request)
    return reply(await service.write(lambda: commands.set_mode(service.state, None, mode, force=force)))


@routes.put("/mode/{subject:[^/]+}")
@write_route
async def put_subject_mode(request: web.Request) -> web.Response:
    subject, service = _subject(request), _service(request)
    mode, force = (await _body(request)).get("mode"), _flag(request, "force")
    return reply(await service.write(lambda: commands.set_mode(service.state, subject, mode, force=force)))


@routes.delete("/mode/{subject:[^/]+}")
@write_route
async def delete_subject_mode(request: web.Request) -> web.Response:
    subject, service = _subject(request), _service(request)
    return reply(await service.write(lambda: commands.delete_mode(service.state, subject)))


# -- compatibility ---------------------------------------------------------------------------------------------


async def _compatibility(request: web.Request, version: str | None) -> web.Response:
    subject = _subject(request)
    wanted = await _schema_request(request)
    service = _service(request)
    problems = commands.check(service.state, service.catalog, subject, version, wanted)
    answer: dict[str, Any] = {"is_compatible": not problems}
    if _flag(request, "verbose"):
        answer["messages"] = problems
    return reply(answer)


@routes.post("/compatibility/subjects/{subject:[^/]+}/versions/{version}")
async def compatibility_with_version(request: web.Request) -> web.Response:
    return await _compatibility(request, request.match_info["version"])


@routes.post("/compatibility/subjects/{subject:[^/]+}/versions")
async def compatibility_with_subject(request: web.Request) -> web.Response:
    return await _compatibility(request, None)
