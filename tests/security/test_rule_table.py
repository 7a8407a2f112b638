"""Every API the broker serves, at every version it serves, passes through the authorizer for a principal
with no ACLs without crashing, and the answer encodes at that version. For APIs whose rule names a resource,
the answer carries the resource's *_AUTHORIZATION_FAILED code. This catches an API registered later (by the
transaction or compatibility work) whose rule names fields its message definition does not have."""

from __future__ import annotations

from typing import Any

import pytest
from tests.broker.without_sockets import Connection, dispatch

from sluice.broker.api import HANDLERS, NoResponse, Respond
from sluice.broker.authz_rules import NO_CHECK, RULES, Items, Whole
from sluice.broker.config import BrokerConfig
from sluice.broker.dispatch import Dispatched, build_dispatcher
from sluice.errors import ErrorCode
from sluice.protocol.codec import Message
from sluice.protocol.headers import request_header
from sluice.protocol.messages import APIS_BY_KEY, request_codecs, response_codecs
from sluice.server.app import build_broker

AUTHZ_CODES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}

# Versions without any error field, which Kafka answers with nothing when the principal may not see it.
ANSWERED_EMPTY = {("DescribeLogDirs", v) for v in range(3)}


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


def fill_request(cls: type, rule: Any, topic_id: Any = None) -> Any:
    """A request naming "x" wherever the rule looks for a resource; by `topic_id` too where the request can
    name topics by id (a request over the wire names a topic by one or the other, by version)."""
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
                if topic_id is not None and "topic_id" in item._fields:
                    item.topic_id = topic_id
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
    broker = build_broker(BrokerConfig(data_dir=None, authorizer="acl", auto_create_topics=False))
    broker.create_topic("x", 1, {})
    return broker


@pytest.mark.parametrize(("api", "version"), served_versions())
def test_a_principal_without_acls_gets_an_encodable_denial(broker, api: str, version: int) -> None:
    key = next(k for k, a in APIS_BY_KEY.items() if a.name == api)
    rule = RULES[api]
    topic = broker.storage.topic("x")
    request = fill_request(request_codecs(key).cls, rule, topic.topic_id)
    outcome = through_the_pipeline(broker, "User:nobody", key, version, request)
    applies = [c for c in rule.checks if c.versions is None or version in c.versions]
    if isinstance(outcome, NoResponse):
        return
    if not isinstance(outcome, Respond):
        # The handler ran (ListGroups waits for the group log, then the authorizer filters its answer):
        # only right when the rule has nothing to deny up front.
        assert not applies, f"{api} v{version}: a denied request reached the handler: {outcome!r}"
        return
    codec = response_codecs(key)[version]
    # What the client reads: fields this version lacks come back as defaults.
    sent, _ = codec.decode(codec.encode(outcome.response))
    if applies and (api, version) not in ANSWERED_EMPTY:
        assert error_codes(sent) & AUTHZ_CODES, f"{api} v{version}: the client reads {sent!r}"


def through_the_pipeline(broker, principal: str, key: int, version: int, request: Any) -> Any:
    """What the handler answered `request` (sent at `version`) for `principal`, past the authorizer."""
    codec = request_codecs(key)[version]
    frame = request_header(key, version, 7, "rules", codec.flexible) + codec.encode(request)
    result, _ = dispatch(build_dispatcher(broker), frame, Connection(principal))
    assert isinstance(result, Dispatched), result
    return result.outcome


def call(broker, principal: str, api: str, version: int, request: Any) -> Any:
    key = next(k for k, a in APIS_BY_KEY.items() if a.name == api)
    outcome = through_the_pipeline(broker, principal, key, version, request)
    codec = response_codecs(key)[version]
    return codec.decode(codec.encode(outcome.response))[0]


def test_transactional_apis_need_the_transactional_id_or_the_cluster(broker) -> None:
    Q = request_codecs(24).cls  # AddPartitionsToTxn
    old = Q(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[Q.AddPartitionsToTxnTopic(name="t", partitions=[0, 1])],
    )
    answer = call(broker, "User:nobody", "AddPartitionsToTxn", 3, old)
    [topic] = answer.results_by_topic_v3_and_below
    assert [p.partition_error_code for p in topic.results_by_partition] == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ] * 2
    # v4+ is for brokers verifying each other's transactions (KIP-890): ClusterAction on the cluster.
    batched = call(broker, "User:nobody", "AddPartitionsToTxn", 4, Q(transactions=[]))
    assert batched.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    M = request_codecs(27).cls  # WriteTxnMarkers
    markers = M(
        markers=[
            M.WritableTxnMarker(
                producer_id=5,
                producer_epoch=0,
                transaction_result=True,
                topics=[M.WritableTxnMarkerTopic(name="t", partition_indexes=[0, 2])],
                coordinator_epoch=0,
            )
        ]
    )
    written = call(broker, "User:nobody", "WriteTxnMarkers", 1, markers)
    [marker] = written.markers
    assert marker.producer_id == 5
    assert [(p.partition_index, p.error_code) for p in marker.topics[0].partitions] == [
        (0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        (2, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    ]


def test_cluster_administration_answers_every_item_denied(broker) -> None:
    Q = request_codecs(49).cls  # AlterClientQuotas
    quotas = Q(
        entries=[
            Q.EntryData(
                entity=[Q.EntityData(entity_type="client-id", entity_name="app")],
                ops=[Q.OpData(key="producer_byte_rate", value=1024.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    [entry] = call(broker, "User:nobody", "AlterClientQuotas", 1, quotas).entries
    assert entry.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("client-id", "app")]
    L = request_codecs(34).cls  # AlterReplicaLogDirs
    moves = L(
        dirs=[
            L.AlterReplicaLogDir(path="/d", topics=[L.AlterReplicaLogDirTopic(name="t", partitions=[0, 1])])
        ]
    )
    [result] = call(broker, "User:nobody", "AlterReplicaLogDirs", 2, moves).results
    assert [p.error_code for p in result.partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
    E = request_codecs(43).cls  # ElectLeaders
    election = E(
        election_type=0, topic_partitions=[E.TopicPartitions(topic="t", partition_id=[0])], timeout_ms=1000
    )
    for version in (0, 2):
        answer = call(broker, "User:nobody", "ElectLeaders", version, election)
        [topic] = answer.replica_election_results
        assert topic.partition_result[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert answer.error_code == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if version >= 1 else 0)


def test_describe_topic_partitions_lists_only_describable_topics(broker) -> None:
    from sluice.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    for name in ("seen", "hidden"):
        if broker.storage.topic(name) is None:
            broker.create_topic(name, 1, {})
    broker.acls.add(
        [
            AclBinding(
                ResourceType.TOPIC,
                "seen",
                PatternType.LITERAL,
                "User:viewer",
                "*",
                Operation.DESCRIBE,
                Permission.ALLOW,
            )
        ]
    )
    D = request_codecs(75).cls
    listed = call(
        broker, "User:viewer", "DescribeTopicPartitions", 0, D(topics=[], response_partition_limit=100)
    )
    assert [t.name for t in listed.topics] == ["seen"]
    named = call(
        broker,
        "User:viewer",
        "DescribeTopicPartitions",
        0,
        D(topics=[D.TopicRequest(name="seen"), D.TopicRequest(name="hidden")], response_partition_limit=100),
    )
    assert {t.name: t.error_code for t in named.topics} == {
        "seen": 0,
        "hidden": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    }
