"""The request pipeline (broker/dispatch.py) without sockets: request bytes in, what the server must do out,
on a real in-memory broker. The order is the contract: the SASL gate and the version check come before
any decoding, the authorizer before the handler, the request-time quota after it."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from sluice.broker.api import NoResponse, Respond, RespondWhenDurable
from sluice.broker.config import BrokerConfig
from sluice.broker.dispatch import Close, Dispatched, Dispatcher, build_dispatcher
from sluice.errors import ErrorCode
from sluice.protocol.codec import Encoded
from sluice.protocol.headers import request_header
from sluice.protocol.messages import APIS_BY_NAME, request_codecs, response_codec
from sluice.protocol.records import Record, encode_batch
from sluice.security.session import Session
from sluice.server.app import build_broker


class Origin:
    """A connection as the dispatcher sees it, recording what it was asked."""

    def __init__(self, admitted: bool = True, principal: str = "User:ANONYMOUS") -> None:
        self.listener = "PLAINTEXT"
        self.session = Session.open("SASL_PLAINTEXT", "10.0.0.7")
        self.session.principal, self.session.authenticated = principal, True
        self.peer_host = "10.0.0.7"
        self.admitted = admitted
        self.gate_asked: list[int] = []
        self.replies: list[tuple[int, int, int]] = []

    def admits(self, api_key: int) -> bool:
        self.gate_asked.append(api_key)
        return self.admitted

    def open_reply(self, api_key: int, api_version: int, correlation_id: int) -> Hashable:
        self.replies.append((api_key, api_version, correlation_id))
        return len(self.replies)


def frame(api: str, version: int, correlation_id: int = 7, **fields: Any) -> memoryview:
    spec = APIS_BY_NAME[api]
    request = request_codecs(spec.key).cls(**fields)
    flexible = version in spec.request_def.flexible
    header = request_header(spec.key, version, correlation_id, "dispatch-test", flexible)
    return memoryview(header + request_codecs(spec.key)[version].encode(request))


@pytest.fixture(scope="module")
def dispatcher() -> Dispatcher:
    broker = build_broker(BrokerConfig(data_dir=None, auto_create_topics=False))
    broker.create_topic("orders", 1, {})
    return build_dispatcher(broker)


def produce(acks: int, topic: str = "orders") -> memoryview:
    Q = request_codecs(APIS_BY_NAME["Produce"].key).cls
    batch = encode_batch([Record(0, 0, b"k", b"v", [])], base_timestamp=1_700_000_000_000)
    data = [Q.TopicProduceData(name=topic, partition_data=[Q.PartitionProduceData(index=0, records=batch)])]
    return frame("Produce", 9, acks=acks, timeout_ms=1000, topic_data=data)


def test_a_request_runs_its_handler_and_takes_its_place_in_the_response_order(dispatcher: Dispatcher) -> None:
    origin = Origin()
    result = dispatcher.dispatch(produce(acks=-1), origin, 1_700_000_000_000)
    assert isinstance(result, Dispatched) and isinstance(result.outcome, RespondWhenDurable)
    assert origin.replies == [(0, 9, 7)] and result.reply == 1
    answer = result.outcome.response
    # A one-partition Produce takes the fast path: its answer is encoded already, waiting for the fsync.
    assert type(answer) is Encoded
    decoded, _ = response_codec(APIS_BY_NAME["Produce"].key, 9).decode(answer.body)
    partition = decoded.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.NONE and partition.base_offset >= 0
    acks_zero = dispatcher.dispatch(produce(acks=0), Origin(), 1_700_000_000_000)
    assert isinstance(acks_zero, Dispatched) and isinstance(acks_zero.outcome, NoResponse)


def test_the_gate_and_the_version_check_come_before_any_decoding(dispatcher: Dispatcher) -> None:
    refused = Origin(admitted=False)
    assert dispatcher.dispatch(produce(acks=1), refused, 0) == Close(None)
    assert refused.gate_asked == [0] and refused.replies == []
    unknown = memoryview(request_header(9999, 0, 1, None, False))
    assert dispatcher.dispatch(unknown, Origin(), 0) == Close("unknown API key 9999")
    too_new = memoryview(request_header(0, 99, 1, None, False) + b"\xde\xad")
    assert dispatcher.dispatch(too_new, Origin(), 0) == Close("unsupported version 99 of API 0")
    truncated = frame("Metadata", 9, topics=None)[:-3]
    closed = dispatcher.dispatch(truncated, Origin(), 0)
    assert isinstance(closed, Close) and (closed.reason or "").startswith("malformed request")


def test_an_api_versions_it_cannot_parse_is_answered_in_v0(dispatcher: Dispatcher) -> None:
    origin = Origin()
    result = dispatcher.dispatch(memoryview(request_header(18, 999, 3, None, False)), origin, 0)
    assert isinstance(result, Dispatched) and isinstance(result.outcome, Respond)
    assert origin.replies == [(18, 0, 3)]
    assert result.outcome.response.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_the_authorizer_answers_before_the_handler_runs() -> None:
    broker = build_broker(BrokerConfig(data_dir=None, authorizer="acl", auto_create_topics=False))
    broker.create_topic("orders", 1, {})
    secured = build_dispatcher(broker)
    result = secured.dispatch(produce(acks=-1), Origin(principal="User:nobody"), 0)
    assert isinstance(result, Dispatched) and isinstance(result.outcome, Respond)
    answer = result.outcome.response.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert broker.partition("orders", 0).log.log_end_offset == 0, "nothing was appended"


def test_the_request_time_quota_is_counted_after_the_handler(dispatcher: Dispatcher) -> None:
    quotas = dispatcher.quotas
    assert quotas is not None
    entity = (("client-id", "dispatch-test"),)
    quotas.configs[entity] = {"request_percentage": 0.000001}
    try:
        result = dispatcher.dispatch(frame("Metadata", 9, topics=None), Origin(), 1_700_000_000_000)
    finally:
        del quotas.configs[entity]
    assert isinstance(result, Dispatched) and result.throttle_ms > 0
