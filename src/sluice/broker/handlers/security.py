"""SASL (SaslHandshake 17, SaslAuthenticate 36), ACL administration (DescribeAcls 29, CreateAcls 30,
DeleteAcls 31) and SCRAM user administration (DescribeUserScramCredentials 50, AlterUserScramCredentials 51).

The SASL handlers advance the connection's `Session` (`ctx.session`); the exchanges themselves are pure
(`sluice.security.authn`). Who may call the administrative APIs is the authorizer's business (`broker.authz`).
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.broker.api import RequestContext, Respond, handles, response_class
from sluice.broker.broker import Broker
from sluice.errors import ErrorCode
from sluice.security.acl import (
    ANONYMOUS,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from sluice.security.authn import (
    MECHANISM_CODES,
    MECHANISMS_BY_CODE,
    AuthenticationFailed,
    CredentialError,
    check_iterations,
    check_user_name,
    credential_from_salted_password,
    new_exchange,
)
from sluice.security.session import Session, uses_sasl

log = logging.getLogger("sluice.security")

SaslHandshakeResponse = response_class("SaslHandshake")
SaslAuthenticateResponse = response_class("SaslAuthenticate")
DescribeAclsResponse = response_class("DescribeAcls")
CreateAclsResponse = response_class("CreateAcls")
DeleteAclsResponse = response_class("DeleteAcls")
DescribeScramResponse = response_class("DescribeUserScramCredentials")
AlterScramResponse = response_class("AlterUserScramCredentials")

MAX_ACL_ITEMS = 10_000  # per request
MAX_SCRAM_ITEMS = 10_000


# ----- SASL -----


@handles("SaslHandshake")
def sasl_handshake(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    session: Session | None = ctx.session
    enabled = list(broker.config.sasl_enabled_mechanisms)
    if session is None or not uses_sasl(session.listener):
        return Respond(SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[]))
    if request.mechanism not in enabled:
        return Respond(
            SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
        )
    if session.authenticated:
        session.previous_principal = session.principal  # KIP-368 re-authentication
    session.mechanism = request.mechanism
    session.exchange = new_exchange(request.mechanism, broker.credentials)
    session.raw_tokens = ctx.api_version == 0
    return Respond(SaslHandshakeResponse(error_code=0, mechanisms=enabled))


def sasl_step(
    broker: Broker, session: Session, token: bytes, now_ms: int
) -> tuple[ErrorCode, str | None, bytes, int]:
    """One SASL token from the client: (error, message, token for the client, session lifetime ms)."""
    exchange = session.exchange
    if exchange is None:
        return (
            ErrorCode.ILLEGAL_SASL_STATE,
            "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake.",
            b"",
            0,
        )
    try:
        reply = exchange.step(token)
        if exchange.done and session.previous_principal not in (None, exchange.principal):
            before, after = (p.replace(":", ".", 1) for p in (session.previous_principal, exchange.principal))
            raise AuthenticationFailed(
                f"Cannot change principals during re-authentication from {before}: {after}"
            )
    except AuthenticationFailed as exc:
        session.exchange = None
        session.authenticated = False
        session.failure_delay_ms = broker.login_throttle.failed(session.client_host, now_ms)
        log.warning("failed %s login from %s: %s", exchange.mechanism, session.client_host, exc)
        return ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc), b"", 0
    lifetime = 0
    if exchange.done:
        broker.login_throttle.succeeded(session.client_host)
        session.exchange = None
        session.raw_tokens = False
        session.authenticated = True
        session.principal = exchange.principal or session.principal
        session.previous_principal = None
        lifetime = broker.config.connections_max_reauth_ms
        session.expires_ms = now_ms + lifetime if lifetime > 0 else None
    return ErrorCode.NONE, None, reply, lifetime


@handles("SaslAuthenticate")
def sasl_authenticate(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    session: Session | None = ctx.session
    if session is None or not uses_sasl(session.listener):
        return Respond(
            SaslAuthenticateResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE,
                error_message="SaslAuthenticate request received after successful authentication",
            )
        )
    error, message, reply, lifetime = sasl_step(broker, session, request.auth_bytes, ctx.now_ms)
    return Respond(
        SaslAuthenticateResponse(
            error_code=error, error_message=message, auth_bytes=reply, session_lifetime_ms=lifetime
        )
    )


# ----- ACLs -----


def _security_disabled(broker: Broker) -> str | None:
    return None if broker.config.authorizer is not None else "No Authorizer is configured."


def _binding(item: Any, pattern_attr: str) -> AclBinding:
    try:
        return AclBinding(
            ResourceType(item.resource_type),
            item.resource_name,
            PatternType(getattr(item, pattern_attr)),
            item.principal,
            item.host,
            Operation(item.operation),
            Permission(item.permission_type),
        )
    except ValueError as exc:
        raise AclError(str(exc)) from None


def _filter(item: Any) -> AclFilter:
    try:
        f = AclFilter(
            ResourceType(item.resource_type_filter),
            item.resource_name_filter,
            PatternType(item.pattern_type_filter),
            item.principal_filter,
            item.host_filter,
            Operation(item.operation),
            Permission(item.permission_type),
        )
    except ValueError as exc:
        raise AclError(str(exc)) from None
    f.check()
    return f


@handles("DescribeAcls", "1-3")
def describe_acls(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeAclsResponse
    if _security_disabled(broker) is not None:
        return Respond(
            R(
                error_code=ErrorCode.SECURITY_DISABLED,
                error_message="No Authorizer is configured on the broker",
            )
        )
    try:
        found = broker.acls.find(_filter(request))
    except AclError as exc:
        return Respond(R(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc)))
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in found:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return Respond(
        R(
            error_code=0,
            resources=[
                R.DescribeAclsResource(
                    resource_type=rt,
                    resource_name=name,
                    pattern_type=pt,
                    acls=[
                        R.AclDescription(
                            principal=b.principal,
                            host=b.host,
                            operation=b.operation,
                            permission_type=b.permission,
                        )
                        for b in bindings
                    ],
                )
                for (rt, name, pt), bindings in grouped.items()
            ],
        )
    )


@handles("CreateAcls", "1-3")
def create_acls(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = CreateAclsResponse
    problem = _security_disabled(broker)
    if problem is None and len(request.creations) > MAX_ACL_ITEMS:
        problem = f"at most {MAX_ACL_ITEMS} ACLs per request"
    if problem is not None:
        code = ErrorCode.SECURITY_DISABLED if broker.config.authorizer is None else ErrorCode.INVALID_REQUEST
        return Respond(
            R(
                results=[
                    R.AclCreationResult(error_code=code, error_message=problem) for _ in request.creations
                ]
            )
        )
    results: list[Any] = [None] * len(request.creations)
    valid: list[tuple[int, AclBinding]] = []
    for i, item in enumerate(request.creations):
        try:
            valid.append((i, _binding(item, "resource_pattern_type")))
        except AclError as exc:
            results[i] = R.AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
    for (i, _), refusal in zip(valid, broker.acls.add(b for _, b in valid), strict=True):
        results[i] = R.AclCreationResult(
            error_code=ErrorCode.INVALID_REQUEST if refusal else 0, error_message=refusal
        )
    if valid:
        log.info("%s created ACLs: %s", ctx.principal, [b.to_json() for _, b in valid])
    return Respond(R(results=results))


@handles("DeleteAcls", "1-3")
def delete_acls(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DeleteAclsResponse
    problem = _security_disabled(broker)
    if problem is None and len(request.filters) > MAX_ACL_ITEMS:
        problem = f"at most {MAX_ACL_ITEMS} filters per request"
    if problem is not None:
        code = ErrorCode.SECURITY_DISABLED if broker.config.authorizer is None else ErrorCode.INVALID_REQUEST
        return Respond(
            R(
                filter_results=[
                    R.DeleteAclsFilterResult(error_code=code, error_message=problem) for _ in request.filters
                ]
            )
        )
    filters: list[AclFilter | None] = []
    errors: list[str | None] = []
    for item in request.filters:
        try:
            filters.append(_filter(item))
            errors.append(None)
        except AclError as exc:
            filters.append(None)
            errors.append(str(exc))
    removed = iter(broker.acls.remove(f for f in filters if f is not None))
    results = []
    for f, error in zip(filters, errors, strict=True):
        if f is None:
            results.append(
                R.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=error)
            )
            continue
        results.append(
            R.DeleteAclsFilterResult(
                error_code=0,
                matching_acls=[
                    R.DeleteAclsMatchingAcl(
                        error_code=0,
                        resource_type=b.resource_type,
                        resource_name=b.resource_name,
                        pattern_type=b.pattern_type,
                        principal=b.principal,
                        host=b.host,
                        operation=b.operation,
                        permission_type=b.permission,
                    )
                    for b in next(removed)
                ],
            )
        )
    return Respond(R(filter_results=results))


# ----- SCRAM users (KIP-554) -----


@handles("DescribeUserScramCredentials")
def describe_user_scram_credentials(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = DescribeScramResponse
    store = broker.credentials
    if request.users is None or not request.users:
        names = sorted(store.users)
    else:
        names = [u.name for u in request.users][:MAX_SCRAM_ITEMS]
    results = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            results.append(
                R.DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                )
            )
            continue
        seen.add(name)
        mechs = store.users.get(name)
        if not mechs:
            results.append(
                R.DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=f"Attempt to describe a user credential that does not exist: {name}",
                )
            )
            continue
        results.append(
            R.DescribeUserScramCredentialsResult(
                user=name,
                error_code=0,
                credential_infos=[
                    R.CredentialInfo(mechanism=MECHANISM_CODES[m], iterations=c.iterations)
                    for m, c in sorted(mechs.items())
                ],
            )
        )
    return Respond(R(error_code=0, results=results))


@handles("AlterUserScramCredentials")
def alter_user_scram_credentials(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = AlterScramResponse
    store = broker.credentials
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: dict[tuple[str, int], int] = {}
    for item in [*request.deletions, *request.upsertions][: 2 * MAX_SCRAM_ITEMS]:
        seen[(item.name, item.mechanism)] = seen.get((item.name, item.mechanism), 0) + 1
    for (name, _mech), count in seen.items():
        if count > 1:
            errors.setdefault(
                name,
                (
                    ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                ),
            )
    order: list[str] = []
    changes: list[tuple[str, str, Any]] = []
    for item in request.deletions:
        order.append(item.name)
        mechanism = MECHANISMS_BY_CODE.get(item.mechanism)
        if mechanism is None:
            errors.setdefault(item.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
        elif store.get(item.name, mechanism) is None:
            errors.setdefault(
                item.name,
                (
                    ErrorCode.RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                ),
            )
        else:
            changes.append((item.name, mechanism, None))
    for item in request.upsertions:
        order.append(item.name)
        mechanism = MECHANISMS_BY_CODE.get(item.mechanism)
        if mechanism is None:
            errors.setdefault(item.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
            continue
        try:
            check_user_name(item.name)
            check_iterations(mechanism, item.iterations)
            if not item.salt or not item.salted_password:
                raise CredentialError("salt and salted password must not be empty")
        except CredentialError as exc:
            errors.setdefault(item.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)))
            continue
        cred = credential_from_salted_password(
            mechanism, bytes(item.salt), bytes(item.salted_password), item.iterations
        )
        changes.append((item.name, mechanism, cred))
    # A user whose any alteration is refused keeps all of its credentials (Kafka answers per user).
    applied = False
    for name, mechanism, cred in changes:
        if name in errors:
            continue
        if cred is None:
            store.delete(name, mechanism, save=False)
        else:
            store.upsert(name, mechanism, cred, save=False)
        applied = True
    if applied:
        store.save()
        log.info(
            "%s altered SCRAM credentials of %s",
            ctx.principal,
            sorted({n for n, _, _ in changes} - set(errors)),
        )
    results = []
    for name in dict.fromkeys(order):
        code, message = errors.get(name, (ErrorCode.NONE, None))
        results.append(R.AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message))
    return Respond(R(results=results))


# ----- delegation tokens (KIP-48) -----
# sluice issues no delegation tokens: it answers as a Kafka broker without delegation.token.secret.key does
# (KafkaApis: token requests over PLAINTEXT, or over SSL without a client certificate, are not allowed at all;
# the rest find token authentication disabled).


def _token_refusal(ctx: RequestContext) -> ErrorCode:
    if ctx.listener == "PLAINTEXT" or (ctx.listener == "SSL" and ctx.principal == ANONYMOUS):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


@handles("CreateDelegationToken")
def create_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = response_class("CreateDelegationToken")
    kind, _, name = ctx.principal.partition(":")
    return Respond(
        R(error_code=_token_refusal(ctx), principal_type=kind, principal_name=name, token_id="", hmac=b"")
    )


@handles("RenewDelegationToken")
def renew_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = response_class("RenewDelegationToken")
    return Respond(R(error_code=_token_refusal(ctx), expiry_timestamp_ms=-1))


@handles("ExpireDelegationToken")
def expire_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = response_class("ExpireDelegationToken")
    return Respond(R(error_code=_token_refusal(ctx), expiry_timestamp_ms=-1))


@handles("DescribeDelegationToken")
def describe_delegation_token(broker: Broker, ctx: RequestContext, request: Any) -> Respond:
    R = response_class("DescribeDelegationToken")
    return Respond(R(error_code=_token_refusal(ctx), tokens=[]))
