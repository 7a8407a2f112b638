"""The ACL authorizer of the request pipeline (`authorizer: acl`), plugged into sluice.broker.dispatch.

`authorize` looks up the API's rule (`broker.authz_rules`, keyed by API name and resolved per API key the
first time a key is seen, so an API whose handler registers later is covered the moment it registers),
answers whole-request denials itself, and takes denied items out of the request; the finish it returns puts
the denied items back into the handler's response (the dispatcher applies it however the response comes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.broker.api import NoResponse, RequestContext
from sluice.broker.authz_model import (
    CLUSTER,
    CONFIG_RESOURCES,
    DENIED,
    TOPIC,
    Access,
    Finish,
    Items,
    Rule,
    Whole,
    blank_response,
    set_error,
)
from sluice.broker.authz_rules import DEFAULT_RULE, NO_CHECK, RULES
from sluice.errors import ErrorCode
from sluice.protocol.messages import APIS_BY_KEY, response_codecs
from sluice.security.acl import CLUSTER_NAME, Authorizer, ResourceType

if TYPE_CHECKING:
    from sluice.broker.broker import Broker

# Access objects kept for (principal, host) pairs seen; cleared when this many pile up.
MAX_CACHED_ACCESSES = 10_000


class AclRequestAuthorizer:
    """Kafka's Authorizer as the dispatcher sees it: the ACLs, super users, and one Access per (principal,
    client host), made at its first request (it holds no per-request state)."""

    def __init__(self, authorizer: Authorizer, topic_name_by_id: Any = lambda topic_id: None) -> None:
        self.authorizer = authorizer
        self._topic_name_by_id = topic_name_by_id
        self._accesses: dict[tuple[str, str], Access] = {}

    @classmethod
    def for_broker(cls, broker: Broker) -> AclRequestAuthorizer:
        config = broker.config
        authorizer = Authorizer(broker.acls, config.super_users, config.allow_everyone_if_no_acl_found)

        def topic_name_by_id(topic_id: Any) -> str | None:
            meta = broker.storage.topic_by_id(topic_id)
            return meta.name if meta is not None else None

        return cls(authorizer, topic_name_by_id)

    def authorize(self, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
        principal = ctx.principal
        # Super users may do everything, so their requests skip the rule table (every check would pass).
        if principal in self.authorizer.super_users:
            return None, None
        access = self._accesses.get((principal, ctx.client_host))
        if access is None:
            if len(self._accesses) >= MAX_CACHED_ACCESSES:
                self._accesses.clear()
            access = Access(self.authorizer, principal, ctx.client_host, self._topic_name_by_id)
            self._accesses[(principal, ctx.client_host)] = access
        return authorize(access, ctx, request)


def _item_name(access: Access, item: Any, attr: str | None) -> str | None:
    if attr is None:
        return item
    name = getattr(item, attr, None)
    if not name and hasattr(item, "topic_id"):
        name = access.topic_names_by_id(item.topic_id)
    return name


def _mirror(api_key: int, spec: Items, item: Any, code: ErrorCode) -> Any:
    """The response entry that answers request item `item` with `code`."""
    cls = response_codecs(api_key).cls
    out_cls = getattr(cls, spec.resp_item)
    if spec.req_name is None:
        out = out_cls(**{spec.resp_name: item})
    else:
        out = out_cls(**{spec.resp_name: getattr(item, spec.req_name)})
        if hasattr(item, "topic_id") and hasattr(out, "topic_id"):
            out.topic_id = item.topic_id
        if spec.config_resource:
            out.resource_type = item.resource_type
    if spec.req_parts is None:
        set_error(out, code, spec.resp_error)
        return out
    part_cls = getattr(cls, spec.resp_part or "")
    parts = []
    for part in getattr(item, spec.req_parts):
        index = part if spec.req_index is None else getattr(part, spec.req_index)
        entry = part_cls(**{spec.resp_index or "": index})
        set_error(entry, code, spec.resp_error)
        if getattr(entry, "records", b"") is None:
            entry.records = b""  # as Kafka answers a denied Fetch: empty records, which clients parse, not null
        parts.append(entry)
    setattr(out, spec.resp_parts or "", parts)
    return out


def _item_allowed(access: Access, spec: Items, item: Any) -> tuple[bool, ResourceType]:
    if spec.config_resource:
        resource = CONFIG_RESOURCES.get(item.resource_type)
        if resource is None:
            return True, CLUSTER  # broker loggers and the like: the handler answers them
        name = item.resource_name if resource is TOPIC else CLUSTER_NAME
        return access.allows(spec.op, resource, name), resource
    name = _item_name(access, item, spec.req_name)
    if name is None:
        return True, spec.resource  # an unknown topic id: the handler says so
    if spec.or_cluster and access.allows(spec.op, CLUSTER, CLUSTER_NAME):
        return True, spec.resource
    return access.allows(spec.op, spec.resource, name), spec.resource


def _whole_allowed(access: Access, check: Whole, request: Any) -> bool | None:
    """None when the check does not apply to this request."""
    if check.unless_set is not None and getattr(request, check.unless_set, None) is not None:
        return None
    if check.resource is CLUSTER:
        name = CLUSTER_NAME
    else:
        name = getattr(request, check.attr or "", None)
        if name is None and check.when_set:
            return None
    if check.or_any is not None and access.allows_any(check.or_any[1], check.or_any[0]):
        return True
    return access.allows(check.op, check.resource, name or "")


def _has_top_level_error(api_key: int, version: int) -> bool:
    """Does this response version carry a top-level error_code? (AddPartitionsToTxn's arrived in v4.)"""
    root = response_codecs(api_key).message.root
    return any(f.attr == "error_code" and version in f.versions for f in root.fields)


def _deny_whole(api_key: int, version: int, rule: Rule, request: Any, code: ErrorCode) -> Any:
    response = blank_response(api_key)
    if _has_top_level_error(api_key, version):
        set_error(response, code)
        return response
    # No top-level error at this version: every item of the request carries the code (OffsetCommit,
    # TxnOffsetCommit, AddPartitionsToTxn v0-3...).
    for spec in rule.checks:
        if isinstance(spec, Items) and (spec.versions is None or version in spec.versions):
            items = getattr(request, spec.req_list, None) or []
            setattr(response, spec.resp_list, [_mirror(api_key, spec, item, code) for item in items])
    return response


def _plan(api_key: int, version: int) -> tuple[Rule | None, tuple[Whole, ...], tuple[Items, ...]]:
    """The API's rule and the checks that apply at this version, worked out once per (key, version): this
    runs for every request."""
    plan = _PLANS.get((api_key, version))
    if plan is None:
        rule = _RULES_BY_KEY.get(api_key, _UNSEEN)
        if rule is _UNSEEN:
            name = APIS_BY_KEY[api_key].name
            rule = _RULES_BY_KEY[api_key] = None if name in NO_CHECK else RULES.get(name, DEFAULT_RULE)
        checks = rule.checks if rule is not None else ()
        applies = [c for c in checks if c.versions is None or version in c.versions]
        plan = (
            rule,
            tuple(c for c in applies if isinstance(c, Whole)),
            tuple(c for c in applies if isinstance(c, Items)),
        )
        _PLANS[(api_key, version)] = plan
    return plan


def authorize(access: Access, ctx: RequestContext, request: Any) -> tuple[Any, Finish | None]:
    """(response to send instead of running the handler, or None; how to complete the handler's response)."""
    rule, wholes, item_checks = _plan(ctx.api_key, ctx.api_version)
    if rule is None:
        return None, None
    for whole in wholes:
        if _whole_allowed(access, whole, request) is False:
            return _deny_whole(ctx.api_key, ctx.api_version, rule, request, DENIED[whole.resource]), None
    denied: list[tuple[Items, Any, ErrorCode]] = []
    for check in item_checks:
        items = getattr(request, check.req_list, None)
        if not items:
            continue
        for item in items:
            if not _item_allowed(access, check, item)[0]:
                break
        else:
            continue  # the common case: nothing to take out
        keep = []
        for item in items:
            ok, resource = _item_allowed(
                access, check, item
            )  # cached by the authorizer: cheap the second time
            if ok:
                keep.append(item)
            else:
                denied.append((check, item, DENIED[resource]))
        setattr(request, check.req_list, keep)
    custom_finish = None
    if rule.custom is not None:
        immediate, custom_finish = rule.custom(access, ctx, request)
        if immediate is not None:
            return immediate, None
    if not denied:
        return None, custom_finish

    def finish(response: Any) -> Any:
        for spec, item, code in denied:
            getattr(response, spec.resp_list).append(_mirror(ctx.api_key, spec, item, code))
        return custom_finish(response) if custom_finish is not None else response

    if rule.answer_denied_alone and all(not getattr(request, spec.req_list) for spec, _, _ in denied):
        # Nothing left for the handler: answer the denied items alone.
        if ctx.api_key == 0 and request.acks == 0:
            return NoResponse(), None
        return finish(blank_response(ctx.api_key)), None
    return None, finish


# API key -> its rule (None: no check), filled as keys are first seen (handlers may register late).
_RULES_BY_KEY: dict[int, Rule | None] = {}
_UNSEEN = Rule()
_PLANS: dict[tuple[int, int], tuple[Rule | None, tuple[Whole, ...], tuple[Items, ...]]] = {}
