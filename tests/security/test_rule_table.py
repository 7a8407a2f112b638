"""Every API the broker serves, at every version it serves, passes through the authorizer for a principal
with no ACLs without crashing, and the answer encodes at that version. For APIs whose rule names a resource,
the answer carries the resource's *_AUTHORIZATION_FAILED code. This catches an API registered later (by the
transaction or compatibility work) whose rule names fields its message definition does not have."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.broker.api import HANDLERS, NoResponse, RequestContext, Respond
from sluice.broker.authz import NO_CHECK, RULES, Items, Whole
from sluice.broker.config import BrokerConfig
from sluice.errors import ErrorCode
from sluice.protocol.codec import Message
from sluice.protocol.messages import APIS_BY_KEY, request_codecs, response_codecs
from sluice.security.session import Session
from sluice.server.app import build_broker

AUTHZ_CODES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def served_versions() -> list[tuple[str, int]]:
    cases = []
    for key, spec in sorted(HANDLERS.handlers.items()):
        name = APIS_BY_KEY[key].name
        if name in NO_CHECK:
            continue
        high = min(spec.versions.high, APIS_BY_KEY[key].versions.high)
        cases += [(name, v) for v in range(spec.versions.low, high + 1)]
    return cases


def nested_class_with(cls: type, *attrs: str) -> type:
    for value in vars(cls).values():
        if isinstance(value, type) and issubclass(value, Message) and all(a in value._fields for a in attrs):
            return value
    raise AssertionError(f"{cls.__name__} has no nested struct with {attrs}")


def fill_request(cls: type, rule: Any) -> Any:
    request = cls()
    if "acks" in cls._fields:
        request.acks = -1
    for check in rule.checks:
        if isinstance(check, Whole) and check.attr is not None:
            assert check.attr in cls._fields, f"{cls.__name__} has no {check.attr}"
            setattr(request, check.attr, "x")
        elif isinstance(check, Items):
            assert check.req_list in cls._fields, f"{cls.__name__} has no {check.req_list}"
            if check.req_name is None:
                item: Any = "x"
            else:
                attrs = [check.req_name] + ([check.req_parts] if check.req_parts else [])
                item = nested_class_with(cls, *attrs)(**{check.req_name: "x"})
                if check.config_resource:
                    item.resource_type = 2
                if check.req_parts is not None:
                    if check.req_index is None:
                        parts: list[Any] = [0]
                    else:
                        part_cls = nested_class_with(cls, check.req_index)
                        parts = [part_cls(**{check.req_index: 0})]
                    setattr(item, check.req_parts, parts)
            setattr(request, check.req_list, [item])
    return request


def error_codes(obj: Any) -> set[int]:
    found: set[int] = set()
    if isinstance(obj, list):
        for item in obj:
            found |= error_codes(item)
    elif isinstance(obj, Message):
        for name in obj._fields:
            value = getattr(obj, name)
            if name.endswith("error_code") and isinstance(value, int):
                found.add(value)
            else:
                found |= error_codes(value)
    return found


@pytest.fixture(scope="module")
def broker():
    return build_broker(BrokerConfig(data_dir=None, authorizer="acl", auto_create_topics=False))


@pytest.mark.parametrize(("api", "version"), served_versions())
def test_a_principal_without_acls_gets_an_encodable_denial(broker, api: str, version: int) -> None:
    key = next(k for k, a in APIS_BY_KEY.items() if a.name == api)
    rule = RULES[api]
    request = fill_request(request_codecs(key).cls, rule)
    session = Session.open("SASL_PLAINTEXT", "10.0.0.9")
    session.principal, session.authenticated = "User:nobody", True
    ctx = RequestContext(key, version, 7, "rules", "10.0.0.9", 0, session=session)
    outcome = broker.dispatch(ctx, request)
    applies = [c for c in rule.checks if isinstance(c, Whole) or c.versions is None or version in c.versions]
    if isinstance(outcome, NoResponse):
        return
    if not isinstance(outcome, Respond):
        # The handler ran (ListGroups waits for the group log, then the authorizer filters its answer):
        # only right when the rule has nothing to deny up front.
        assert not applies, f"{api} v{version}: a denied request reached the handler: {outcome!r}"
        return
    response_codecs(key)[version].encode(outcome.response)  # must not raise
    if applies:
        assert error_codes(outcome.response) & AUTHZ_CODES, f"{api} v{version}: {outcome.response!r}"
