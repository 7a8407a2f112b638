"""The console's pages (paths fixed by the issue, since bookmarks use them) and their htmx actions."""

from __future__ import annotations

import asyncio
import contextvars
import re
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from sluice.console import groups as groups_api
from sluice.console import messages as messages_api
from sluice.console import schema_pages, share_groups
from sluice.console.app import CONSOLE, MAX_SCAN_JOBS, Console
from sluice.console.cluster import ClusterError
from sluice.console.groups import ResetRow
from sluice.console.messages import MAX_PRODUCE_BYTES, ScanJob, format_cursor, parse_cursor
from sluice.security.http_auth import redact_url

STATIC = Path(__file__).parent / "static"
# When the page's handler began, for the footer's "rendered in"; each request runs in its own task.
STARTED: contextvars.ContextVar[float] = contextvars.ContextVar("started")
MAX_MATCHES = 100
MAX_HEADERS = 32
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def bad(message: str) -> ClusterError:
    return ClusterError("INVALID_REQUEST", message)


def _int(value: str | None, what: str, *, default: int | None = None, low: int | None = None) -> int | None:
    if value is None or value.strip() == "":
        return default
    try:
        n = int(value.strip())
    except ValueError:
        raise bad(f"{what} must be a whole number, got {value!r}") from None
    if low is not None and n < low:
        raise bad(f"{what} must be at least {low}, got {n}")
    return n


def parse_time_ms(text: str) -> int:
    """An ISO-8601 date-time (no zone = UTC), or epoch milliseconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise bad(f"expected a date-time like 2026-01-31T12:00:00Z or epoch ms, got {text!r}") from None
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_duration_s(text: str) -> int:
    match = _DURATION.match(text)
    if not match:
        raise bad(f"expected a duration like 30m, 2h or 1d, got {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _is_htmx(request: web.Request) -> bool:
    return request.headers.get("HX-Request") == "true"


def html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", headers=headers)


def redirect(request: web.Request, location: str) -> web.Response:
    if _is_htmx(request):
        return web.Response(status=200, headers={"HX-Redirect": location})
    raise web.HTTPSeeOther(location)


def console_of(request: web.Request) -> Console:
    return request.app[CONSOLE]


def page(request: web.Request, template: str, **context: Any) -> web.Response:
    console = console_of(request)
    started = STARTED.get(time.perf_counter())
    context.setdefault("elapsed_ms", (time.perf_counter() - started) * 1000)
    return html(console.render(template, **context))


# ----- overview -----


async def overview(request: web.Request) -> web.Response:
    STARTED.set(time.perf_counter())
    console = console_of(request)
    cluster = await console.run(console.cluster.describe_cluster)
    metadata = await console.run(console.cluster.metadata)
    topics = [t for t in metadata.topics.values() if t.error is None]
    sizes = await console.run(console.log_sizes, metadata)
    brokers = cluster["brokers"]
    first = next((b for b in brokers if b["id"] == cluster["controller"]), brokers[0] if brokers else None)
    protocol = await console.run(console.wire.protocol, first["host"], first["port"]) if first else None
    rate_in, rate_out = console.samples.rates()
    groups = await console.run(groups_api.group_ids, console.cluster)
    return page(
        request,
        "overview.html",
        page="overview",
        cluster=cluster,
        listeners=sorted({f"{b['host']}:{b['port']}" for b in cluster["brokers"]}),
        metadata_from=getattr(metadata, "orig_broker_name", None),
        topic_count=sum(1 for t in topics if not t.topic.startswith("__")),
        internal_count=sum(1 for t in topics if t.topic.startswith("__")),
        partition_count=sum(len(t.partitions) for t in topics),
        group_count=len(groups),
        disk=sum(sizes.values()) if sizes is not None else None,
        protocol=protocol.summary() if protocol is not None else None,
        rate_in=rate_in,
        rate_out=rate_out,
        sample_interval=console.config.sample_interval_s,
    )


# ----- topics -----


async def topics(request: web.Request) -> web.Response:
    STARTED.set(time.perf_counter())
    console = console_of(request)
    rows = await console.run(console.cluster.topics, console.log_sizes)
    q = request.query.get("q", "").strip()
    show_internal = request.query.get("internal") == "1"
    shown = [r for r in rows if (show_internal or not r.internal) and q.lower() in r.name.lower()]
    return page(
        request,
        "topics.html",
        page="topics",
        rows=shown,
        total=len(rows),
        q=q,
        show_internal=show_internal,
        has_sizes=any(r.size_bytes is not None for r in rows),
    )


async def create_topic(request: web.Request) -> web.Response:
    console = console_of(request)
    form = await request.post()
    name = str(form.get("name", "")).strip()
    if not TOPIC_NAME.match(name) or name in (".", ".."):
        raise bad("a topic name is 1 to 249 of letters, digits, '.', '_' and '-'")
    partitions = _int(str(form.get("partitions", "")), "partitions", default=1, low=1)
    replication = _int(str(form.get("replication", "")), "replication factor", default=1, low=1)
    config = {}
    policy = str(form.get("cleanup_policy", "")).strip()
    if policy:
        if policy not in ("delete", "compact", "compact,delete"):
            raise bad(f"unknown cleanup policy {policy!r}")
        config["cleanup.policy"] = policy
    retention = str(form.get("retention_ms", "")).strip()
    if retention:
        config["retention.ms"] = str(_int(retention, "retention.ms", low=-1))
    assert partitions is not None and replication is not None
    await console.run(console.cluster.create_topic, name, partitions, replication, config)
    return redirect(request, f"/topics/{name}")


async def delete_topic(request: web.Request) -> web.Response:
    console = console_of(request)
    await console.run(console.cluster.delete_topic, request.match_info["name"])
    return redirect(request, "/topics")


def _browse_params(request: web.Request) -> dict[str, Any]:
    q = request.query
    mode = q.get("mode", "newest")
    if mode not in ("newest", "beginning", "offset", "timestamp"):
        raise bad(f"unknown mode {mode!r}")
    value: int | None = None
    raw_value = q.get("value", "").strip()
    if mode == "offset":
        value = _int(raw_value, "offset", default=0, low=0)
    elif mode == "timestamp":
        if not raw_value:
            raise bad("give a date-time to browse from")
        value = parse_time_ms(raw_value)
    partition = _int(q.get("partition"), "partition", low=0)
    limit = _int(q.get("limit"), "page size", default=50, low=1) or 50
    try:
        cursor = parse_cursor(q.get("cursor"))
    except ValueError:
        raise bad("the paging cursor is malformed") from None
    return {
        "mode": mode,
        "value": value,
        "raw_value": raw_value,
        "partition": partition,
        "limit": limit,
        "cursor": cursor,
    }


async def _messages_context(request: web.Request, name: str) -> dict[str, Any]:
    console = console_of(request)
    params = _browse_params(request)
    result = await console.run(
        messages_api.browse,
        console.cluster,
        name,
        partition=params["partition"],
        mode=params["mode"],
        value=params["value"],
        limit=params["limit"],
        cursor=params["cursor"],
    )
    next_url = None
    if result.next_cursor is not None:
        query = {k: v for k, v in request.query.items() if k != "cursor"}
        query["cursor"] = format_cursor(result.next_cursor)
        next_url = f"/topics/{name}/messages?{urlencode(query)}"
    decoded = None
    if console.schemas is not None and result.messages:
        decoded = await console.run(console.schemas.decode_messages, result.messages)
    return {"messages": result.messages, "params": params, "next_url": next_url, "topic": name, "decoded": decoded}


async def topic(request: web.Request) -> web.Response:
    STARTED.set(time.perf_counter())
    console = console_of(request)
    name = request.match_info["name"]
    sizes = await console.run(console.log_sizes)
    partitions = await console.run(console.cluster.topic, name, sizes)
    configs = (await console.run(console.cluster.topic_configs, [name])).get(name)
    messages = await _messages_context(request, name)
    return page(
        request,
        "topic.html",
        page="topics",
        name=name,
        partitions=partitions,
        configs=configs,
        has_sizes=sizes is not None,
        **messages,
    )


async def messages(request: web.Request) -> web.Response:
    # A reload, a bookmark or htmx restoring history gets the whole page; only the browse form gets the part.
    if not _is_htmx(request) or request.headers.get("HX-History-Restore-Request") == "true":
        return await topic(request)
    STARTED.set(time.perf_counter())
    context = await _messages_context(request, request.match_info["name"])
    return page(request, "_messages.html", **context)


async def alter_config(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["name"]
    form = await request.post()
    key = str(form.get("key", "")).strip()
    if not key:
        raise bad("name the setting to change")
    value: str | None = None if form.get("reset") else str(form.get("value", ""))
    await console.run(console.cluster.alter_topic_config, name, key, value)
    configs = (await console.run(console.cluster.topic_configs, [name])).get(name)
    done = f"{key} restored to its default" if value is None else f"{key} set to {value}"
    return page(request, "_configs.html", name=name, configs=configs, notice=done)


async def produce(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["name"]
    form = await request.post()
    key = str(form.get("key", ""))
    value = str(form.get("value", ""))
    if len(key.encode()) + len(value.encode()) > MAX_PRODUCE_BYTES:
        raise bad(f"key and value together may be at most {MAX_PRODUCE_BYTES} bytes")
    headers = []
    for line in str(form.get("headers", "")).splitlines():
        if not line.strip():
            continue
        hkey, sep, hvalue = line.partition("=")
        if not sep or not hkey.strip():
            raise bad(f"a header is NAME=VALUE, one a line; got {line!r}")
        headers.append((hkey.strip(), hvalue.encode()))
    if len(headers) > MAX_HEADERS:
        raise bad(f"at most {MAX_HEADERS} headers")
    partition = _int(str(form.get("partition", "")), "partition", low=0)
    where = await console.run(
        messages_api.produce,
        console.cluster,
        name,
        key.encode() if form.get("key_null") is None and key != "" else None,
        value.encode() if form.get("value_null") is None else None,
        headers,
        partition,
    )
    return html(
        console.render("_produced.html", partition=where[0], offset=where[1], topic=name),
        headers={"HX-Trigger": "produced"},
    )


async def start_scan(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["name"]
    form = await request.post()
    needle = str(form.get("needle", ""))
    if not needle:
        raise bad("type the text to look for")
    if len(needle) > 1024:
        raise bad("the filter text may be at most 1024 characters")
    running = [j for j in console.jobs.values() if not j.done]
    if len(running) >= MAX_SCAN_JOBS:
        raise ClusterError("_CONFLICT", f"{len(running)} scans are running already; wait for one to finish")
    for job_id, job in list(console.jobs.items()):
        if job.done and job.finished is not None and time.monotonic() - job.finished > 600:
            del console.jobs[job_id]
    # The scan starts where the browser is pointed (from its query string) and runs to the end.
    mode = str(form.get("mode", "newest"))
    partition = _int(str(form.get("partition", "")), "partition", low=0)
    raw_value = str(form.get("value", "")).strip()
    value = (
        parse_time_ms(raw_value) if mode == "timestamp" and raw_value else _int(raw_value, "offset", low=0)
    )
    ranges = await console.run(messages_api.scan_ranges, console.cluster, name, partition, mode, value)
    job = ScanJob(
        uuid.uuid4().hex[:12], name, needle, total=sum(stop - start for start, stop in ranges.values())
    )
    console.jobs[job.id] = job
    loop = asyncio.get_running_loop()
    loop.run_in_executor(console.executor, messages_api.scan, console.cluster, job, ranges, MAX_MATCHES)
    return page(request, "_scan.html", job=job, max_matches=MAX_MATCHES)


async def scan_status(request: web.Request) -> web.Response:
    console = console_of(request)
    job = console.jobs.get(request.match_info["job"])
    if job is None:
        raise ClusterError("_NOENT", "this scan is over and forgotten; start it again")
    job.polled = time.monotonic()
    if request.query.get("cancel"):
        job.stop.set()
    return page(request, "_scan.html", job=job, max_matches=MAX_MATCHES)


# ----- groups -----


async def groups(request: web.Request) -> web.Response:
    STARTED.set(time.perf_counter())
    console = console_of(request)
    rows = await console.run(groups_api.group_rows, console.cluster)
    rows += await console.run(share_groups.share_group_rows, console.cluster)
    rows.sort(key=lambda row: row.group_id)
    q = request.query.get("q", "").strip()
    shown = [r for r in rows if q.lower() in r.group_id.lower()]
    return page(request, "groups.html", page="groups", rows=shown, total=len(rows), q=q)


async def group(request: web.Request) -> web.Response:
    STARTED.set(time.perf_counter())
    console = console_of(request)
    name = request.match_info["name"]
    shared = await console.run(share_groups.share_group_detail, console.cluster, name)
    if shared is not None:
        await share_groups.add_counts(shared, console.config.admin_url, console.config.timeout_s)
        return page(request, "share_group.html", page="groups", group=shared)
    detail = await console.run(groups_api.group_detail, console.cluster, name)
    history = list(console.samples.lag.get(name, []))
    from sluice.console.render import lag_chart

    topics = sorted({row.topic for row in detail.offsets})
    return page(
        request,
        "group.html",
        page="groups",
        group=detail,
        chart=lag_chart(history, time.time()),
        samples=len(history),
        topics=topics,
        sample_interval=console.config.sample_interval_s,
    )


async def reset_group(request: web.Request) -> web.Response:
    console = console_of(request)
    name = request.match_info["name"]
    form = await request.post()
    kind = str(form.get("kind", ""))
    if kind not in ("earliest", "latest", "offset", "timestamp", "duration"):
        raise bad("choose earliest, latest, offset, timestamp or duration")
    topic = str(form.get("topic", "")).strip() or None
    value = ts_ms = None
    if kind == "offset":
        value = _int(str(form.get("offset", "")), "offset", low=0)
        if value is None:
            raise bad("give the offset to reset to")
    elif kind == "timestamp":
        ts_ms = parse_time_ms(str(form.get("timestamp", "")))
    elif kind == "duration":
        ts_ms = int((time.time() - parse_duration_s(str(form.get("duration", "")))) * 1000)
    rows: list[ResetRow] = await console.run(
        groups_api.plan_reset, console.cluster, name, topic, kind, value, ts_ms
    )
    executed = form.get("action") == "execute"
    live = form.get("live") == "1"
    if live and console.config.admin_url is None:
        raise bad("a live rewind needs the sluice broker's admin API (--admin URL)")
    if executed and live:
        await live_rewind(console, name, rows)
    elif executed:
        await console.run(groups_api.execute_reset, console.cluster, name, rows)
    return page(request, "_reset.html", group=name, rows=rows, executed=executed, form=dict(form))


async def live_rewind(console: Console, group: str, rows: list[ResetRow]) -> None:
    """Move a running group's offsets through sluice's admin API: its members re-read from the new ones."""
    from urllib.parse import quote

    from aiohttp import ClientError, ClientSession, ClientTimeout

    assert console.config.admin_url is not None
    url = f"{console.config.admin_url.rstrip('/')}/v1/groups/{quote(group, safe='')}/rewind"
    body = {
        "live": True,
        "offsets": [{"topic": r.topic, "partition": r.partition, "offset": r.new} for r in rows],
    }
    try:
        async with (
            ClientSession(timeout=ClientTimeout(total=console.config.timeout_s + 20)) as session,
            session.post(url, json=body) as reply,
        ):
            answer = await reply.json(content_type=None)
            status = reply.status
    except (ClientError, TimeoutError, ValueError) as exc:
        raise ClusterError(
            "ADMIN_API_UNREACHABLE", f"cannot reach {redact_url(url)}: {exc or type(exc).__name__}"
        ) from None
    if status != 200:
        error = answer if isinstance(answer, dict) else {}
        raise ClusterError(str(error.get("error", f"HTTP_{status}")), str(error.get("message", answer)))


async def delete_group(request: web.Request) -> web.Response:
    console = console_of(request)
    await console.run(groups_api.delete_group, console.cluster, request.match_info["name"])
    return redirect(request, "/groups")


async def gateway(request: web.Request) -> web.Response:
    STARTED.set(time.perf_counter())
    console = console_of(request)
    url = console.config.gateway_url
    if url is None:
        return page(request, "gateway.html", page="gateway", rows=None, active=None)
    from aiohttp import ClientError, ClientSession, ClientTimeout

    from sluice.console.gateway import gateway_consumers

    try:
        async with (
            ClientSession(timeout=ClientTimeout(total=console.config.timeout_s)) as session,
            session.get(url.rstrip("/") + "/metrics") as reply,
        ):
            if reply.status != 200:
                raise ClusterError("GATEWAY_ERROR", f"{url}/metrics answered HTTP {reply.status}")
            text = await reply.text()
    except (ClientError, TimeoutError) as exc:
        raise ClusterError(
            "GATEWAY_UNREACHABLE", f"cannot read {url}/metrics: {exc or type(exc).__name__}"
        ) from None
    rows, active = gateway_consumers(text)
    return page(request, "gateway.html", page="gateway", rows=rows, active=active)


async def security_page(request: web.Request) -> web.Response:
    STARTED.set(time.perf_counter())
    console = console_of(request)
    from sluice.console import security

    found: dict[str, Any] = {}
    for part, call in (("users", security.users), ("acls", security.acls)):
        try:
            found[part] = await console.run(call, console.cluster)
            found[f"{part}_error"] = None
        except ClusterError as error:
            if error.unreachable:
                raise
            # One part the cluster does not serve (or this login may not see) leaves the other shown.
            found[part], found[f"{part}_error"] = [], error
    return page(
        request,
        "security.html",
        page="security",
        mechanisms=security.MECHANISMS,
        resource_types=security.RESOURCE_TYPES,
        operations=security.OPERATIONS,
        **found,
    )


def _acl_row(form: Any) -> Any:
    from sluice.console.security import AclRow

    return AclRow(
        principal=str(form.get("principal", "")).strip(),
        host=str(form.get("host", "*")).strip() or "*",
        resource_type=str(form.get("resource_type", "")),
        pattern_type=str(form.get("pattern_type", "LITERAL")),
        resource_name=str(form.get("resource_name", "")).strip(),
        operation=str(form.get("operation", "")),
        permission=str(form.get("permission", "ALLOW")),
    )


async def security_action(request: web.Request) -> web.Response:
    console = console_of(request)
    from sluice.console import security

    form = await request.post()
    action = request.match_info["action"]
    name = str(form.get("name", "")).strip()
    mechanism = str(form.get("mechanism", ""))
    if action == "user":
        password = str(form.get("password", ""))
        if not name or not password:
            raise bad("a user needs a name and a password")
        iterations = _int(str(form.get("iterations", "")), "iterations", default=8192) or 8192
        await console.run(security.upsert_user, console.cluster, name, mechanism, password, iterations)
    elif action == "user-delete":
        await console.run(security.delete_user, console.cluster, name, mechanism)
    elif action == "acl":
        row = _acl_row(form)
        if not row.resource_name:
            raise bad("name the resource (a topic, group, transactional id, or kafka-cluster)")
        await console.run(security.create_acl, console.cluster, row)
    elif action == "acl-delete":
        await console.run(security.delete_acl, console.cluster, _acl_row(form))
    else:
        raise web.HTTPNotFound()
    return redirect(request, "/security")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", overview)
    app.router.add_get("/topics", topics)
    app.router.add_post("/topics", create_topic)
    app.router.add_get("/topics/{name}", topic)
    app.router.add_get("/topics/{name}/messages", messages)
    app.router.add_post("/topics/{name}/delete", delete_topic)
    app.router.add_post("/topics/{name}/config", alter_config)
    app.router.add_post("/topics/{name}/produce", produce)
    app.router.add_post("/topics/{name}/scan", start_scan)
    app.router.add_get("/scans/{job}", scan_status)
    app.router.add_get("/groups", groups)
    app.router.add_get("/groups/{name}", group)
    app.router.add_post("/groups/{name}/reset", reset_group)
    app.router.add_post("/groups/{name}/delete", delete_group)
    app.router.add_get("/gateway", gateway)
    app.router.add_get("/security", security_page)
    app.router.add_post("/security/{action}", security_action)
    schema_pages.add_routes(app, console_of, page)
    app.router.add_static("/static/", STATIC, append_version=True)
