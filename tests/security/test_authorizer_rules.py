"""The pure cores: Kafka's authorizer rules (acl.py), the SASL exchanges and the login throttle (authn.py),
and the per-API rule table in the request path (broker/authz.py) driven without sockets."""

from __future__ import annotations

from pathlib import Path

import pytest
from scramp import ScramClient
from tests.broker.without_sockets import Connection, dispatch, request_frame

from sluice.broker.config import BrokerConfig
from sluice.broker.dispatch import Dispatched, build_dispatcher
from sluice.errors import ErrorCode
from sluice.protocol.messages import request_codecs
from sluice.security.acl import (
    AclBinding,
    AclFilter,
    AclStore,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from sluice.security.authn import (
    AuthenticationFailed,
    CredentialStore,
    FailedLoginThrottle,
    PlainExchange,
    ScramExchange,
    credential_from_password,
)
from sluice.server.app import build_broker

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def b(
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    *,
    principal: str = "User:alice",
    host: str = "*",
    rtype: ResourceType = TOPIC,
    pattern: PatternType = LIT,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*bindings: AclBinding, **kwargs) -> Authorizer:
    store = AclStore()
    assert store.add(bindings) == [None] * len(bindings)
    return Authorizer(store, **kwargs)


def ok(
    az: Authorizer,
    op: Operation,
    name: str = "orders",
    principal: str = "User:alice",
    host: str = "10.0.0.1",
    rtype: ResourceType = TOPIC,
) -> bool:
    return az.authorize(principal, host, op, rtype, name)


@pytest.mark.parametrize("granted", [Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER])
def test_describe_is_implied_by_read_write_delete_alter(granted: Operation) -> None:
    az = authorizer(b("orders", granted))
    assert ok(az, Operation.DESCRIBE) and ok(az, granted)
    assert not ok(az, Operation.CREATE)


def test_describe_configs_is_implied_by_alter_configs_and_all_allows_everything() -> None:
    assert ok(authorizer(b("orders", Operation.ALTER_CONFIGS)), Operation.DESCRIBE_CONFIGS)
    assert not ok(authorizer(b("orders", Operation.DESCRIBE_CONFIGS)), Operation.ALTER_CONFIGS)
    az = authorizer(b("orders", Operation.ALL))
    assert all(
        ok(az, op) for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER_CONFIGS)
    )


def test_deny_wins_and_a_denied_describe_does_not_deny_read() -> None:
    az = authorizer(b("orders", Operation.ALL), b("orders", Operation.WRITE, DENY))
    assert ok(az, Operation.READ) and not ok(az, Operation.WRITE)
    az = authorizer(b("orders", Operation.READ), b("orders", Operation.DESCRIBE, DENY))
    assert ok(az, Operation.READ) and not ok(az, Operation.DESCRIBE)
    az = authorizer(b("ord", Operation.READ, pattern=PRE), b("*", Operation.ALL, DENY, principal="User:*"))
    assert not ok(az, Operation.READ)


def test_patterns_principals_hosts_and_super_users() -> None:
    az = authorizer(
        b("ord", Operation.READ, pattern=PRE),
        b("*", Operation.WRITE, principal="User:*"),
        b("pay", Operation.READ, host="10.0.0.9"),
        super_users=["User:root"],
    )
    assert ok(az, Operation.READ, "orders") and not ok(az, Operation.READ, "prod")
    assert ok(az, Operation.WRITE, "anything", principal="User:bob")
    assert ok(az, Operation.READ, "pay", host="10.0.0.9") and not ok(az, Operation.READ, "pay")
    assert ok(az, Operation.DELETE, "whatever", principal="User:root")
    assert not ok(az, Operation.READ, "orders", rtype=GROUP)


def test_no_acl_found_follows_the_setting() -> None:
    assert not ok(authorizer(), Operation.READ)
    assert ok(authorizer(allow_everyone_if_no_acl_found=True), Operation.READ)
    # Once any binding covers the resource, the setting no longer applies.
    assert not ok(
        authorizer(b("orders", Operation.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True),
        Operation.READ,
    )


def test_decisions_change_when_bindings_change(tmp_path: Path) -> None:
    store = AclStore(tmp_path / "acls.json")
    az = Authorizer(store)
    assert not ok(az, Operation.READ)
    store.add([b("orders", Operation.READ)])
    assert ok(az, Operation.READ)
    assert AclStore(tmp_path / "acls.json").bindings() == store.bindings()  # durable
    store.remove([AclFilter(principal="User:alice")])
    assert not ok(az, Operation.READ) and len(AclStore(tmp_path / "acls.json")) == 0


def test_invalid_bindings_are_refused_with_reasons() -> None:
    store = AclStore()
    refusals = store.add(
        [
            b("orders", Operation.ANY),
            b("x", Operation.READ, rtype=CLUSTER),
            b("*", Operation.READ, pattern=PRE),
            b("orders", Operation.READ, principal="alice"),
            b("orders", Operation.READ, Permission.ANY),
        ]
    )
    assert all(refusals) and len(store) == 0


def test_match_filter_finds_every_binding_that_applies() -> None:
    store = AclStore()
    store.add(
        [
            b("orders", Operation.READ),
            b("ord", Operation.READ, pattern=PRE),
            b("*", Operation.READ),
            b("other", Operation.READ),
        ]
    )
    found = store.find(AclFilter(resource_type=TOPIC, resource_name="orders", pattern_type=PatternType.MATCH))
    assert {x.resource_name for x in found} == {"orders", "ord", "*"}


def scram_login(store: CredentialStore, user: str, password: str, mechanism: str) -> ScramExchange:
    exchange = ScramExchange(store, mechanism)
    client = ScramClient([mechanism], user, password)
    server_first = exchange.step(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    final = exchange.step(client.get_client_final().encode())
    client.set_server_final(final.decode())
    return exchange


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_and_plain_check_the_same_salted_credential(mechanism: str) -> None:
    store = CredentialStore()
    store.upsert("alice", mechanism, credential_from_password(mechanism, "pw", 4096))
    assert scram_login(store, "alice", "pw", mechanism).principal == "User:alice"
    with pytest.raises(AuthenticationFailed):
        scram_login(store, "alice", "wrong", mechanism)
    with pytest.raises(AuthenticationFailed, match="invalid credentials with SASL mechanism"):
        scram_login(store, "bob", "pw", mechanism)
    assert PlainExchange(store).step(b"\0alice\0pw") == b""
    for bad in (b"\0alice\0wrong", b"alice", b"bob\0alice\0pw", b"\0alice\0\xff"):
        with pytest.raises(AuthenticationFailed):
            PlainExchange(store).step(bad)


def test_failed_logins_from_one_host_are_throttled_more_and_more() -> None:
    throttle = FailedLoginThrottle(base_delay_ms=100, max_delay_ms=1000, window_ms=60_000)
    delays = [throttle.failed("10.0.0.1", 1000 + i) for i in range(6)]
    assert delays == [100, 200, 400, 800, 1000, 1000]
    assert throttle.failed("10.0.0.2", 2000) == 100  # other hosts are not affected
    assert throttle.failed("10.0.0.1", 200_000) == 100  # the window passed
    throttle.succeeded("10.0.0.2")
    assert throttle.failed("10.0.0.2", 2001) == 100


# ----- the rule table, in the request path, without sockets -----


def call(broker, principal: str, api: str, version: int, **fields):
    result, _ = dispatch(build_dispatcher(broker), request_frame(api, version, **fields), Connection(principal))
    assert isinstance(result, Dispatched), result
    return result.outcome


@pytest.fixture
def secured():
    broker = build_broker(BrokerConfig(data_dir=None, authorizer="acl", super_users=["User:admin"]))
    for name in ("orders", "payments"):
        broker.create_topic(name, 2, {})
    broker.acls.add([b("orders", Operation.WRITE, principal="User:alice")])
    return broker


def test_produce_denies_per_topic_and_keeps_the_allowed_part(secured) -> None:
    R = request_codecs(0).cls
    topics = [
        R.TopicProduceData(name=n, partition_data=[R.PartitionProduceData(index=0, records=None)])
        for n in ("orders", "payments")
    ]
    outcome = call(secured, "User:alice", "Produce", 9, acks=-1, timeout_ms=1000, topic_data=topics)
    errors = {t.name: t.partition_responses[0].error_code for t in outcome.response.responses}
    assert errors["payments"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert errors["orders"] == ErrorCode.CORRUPT_MESSAGE  # it reached the broker: the empty batch is refused


def test_whole_request_denials_use_the_api_error_code(secured) -> None:
    joined = call(
        secured,
        "User:alice",
        "JoinGroup",
        5,
        group_id="g",
        session_timeout_ms=6000,
        member_id="",
        protocol_type="consumer",
    )
    assert joined.response.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    init = call(
        secured, "User:alice", "InitProducerId", 4, transactional_id="tx", transaction_timeout_ms=1000
    )
    assert init.response.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Idempotence needs IdempotentWrite on the cluster, or Write on some topic (alice has one).
    assert (
        call(
            secured, "User:alice", "InitProducerId", 4, transactional_id=None, transaction_timeout_ms=1000
        ).response.error_code
        == 0
    )
    assert (
        call(
            secured, "User:bob", "InitProducerId", 4, transactional_id=None, transaction_timeout_ms=1000
        ).response.error_code
        == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    listed = call(
        secured,
        "User:alice",
        "DescribeAcls",
        2,
        resource_type_filter=1,
        pattern_type_filter=1,
        operation=1,
        permission_type=1,
    )
    assert listed.response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_metadata_lists_only_describable_topics(secured) -> None:
    everything = call(secured, "User:alice", "Metadata", 12, topics=None)
    assert [t.name for t in everything.response.topics] == ["orders"]
    R = request_codecs(3).cls
    named = call(
        secured,
        "User:alice",
        "Metadata",
        12,
        topics=[R.MetadataRequestTopic(name="payments")],
        allow_auto_topic_creation=True,
    )
    assert [(t.name, t.error_code) for t in named.response.topics] == [
        ("payments", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]
    assert named.response.brokers and named.response.controller_id == 1  # clients keep their connections
    old = call(secured, "User:alice", "Metadata", 0, topics=[R.MetadataRequestTopic(name="payments")])
    assert [(t.name, t.error_code) for t in old.response.topics] == [
        ("payments", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]
    created = call(
        secured,
        "User:alice",
        "Metadata",
        12,
        topics=[R.MetadataRequestTopic(name="brand-new")],
        allow_auto_topic_creation=True,
    )
    assert created.response.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert secured.storage.topic("brand-new") is None  # no Describe, no Create: nothing was created
    admin_view = call(secured, "User:admin", "Metadata", 12, topics=None).response.topics
    assert {"orders", "payments"} <= {t.name for t in admin_view}


def test_config_resources_map_to_topic_and_cluster(secured) -> None:
    R = request_codecs(32).cls
    outcome = call(
        secured,
        "User:alice",
        "DescribeConfigs",
        4,
        resources=[
            R.DescribeConfigsResource(resource_type=2, resource_name="orders", configuration_keys=None),
            R.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None),
        ],
    )
    codes = {r.resource_type: r.error_code for r in outcome.response.results}
    assert codes == {2: ErrorCode.TOPIC_AUTHORIZATION_FAILED, 4: ErrorCode.CLUSTER_AUTHORIZATION_FAILED}


def test_an_api_without_a_rule_needs_alter_on_the_cluster() -> None:
    from sluice.broker.api import HANDLERS
    from sluice.broker.authz_rules import DEFAULT_RULE, NO_CHECK, RULES
    from sluice.protocol.messages import APIS_BY_KEY

    served = {APIS_BY_KEY[key].name for key in HANDLERS.handlers}
    assert served - set(RULES) - NO_CHECK == set(), "every served API has an explicit rule"
    assert DEFAULT_RULE.checks[0].op == Operation.ALTER
