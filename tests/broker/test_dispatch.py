"""The request pipeline (broker/dispatch.py) without sockets: request bytes in, the answer's bytes (or what the
server must wait for) out, on a real in-memory broker. The order is the contract: the SASL gate and the version
check come before any decoding, the authorizer before the handler, the request-time quota after it."""

from __future__ import annotations

import pytest
from tests.broker.without_sockets import Connection, dispatch, read_answer, request_frame

from sluice.broker.api import NoResponse, Respond, RespondWhenDurable
from sluice.broker.config import BrokerConfig
from sluice.broker.dispatch import Close, Dispatched, Dispatcher, build_dispatcher
from sluice.errors import ErrorCode
from sluice.protocol.codec import Encoded
from sluice.protocol.headers import request_header
from sluice.protocol.messages import APIS_BY_NAME, request_codecs, response_codec
from sluice.protocol.records import Record, encode_batch
from sluice.server.app import build_broker


@pytest.fixture(scope="module")
def dispatcher() -> Dispatcher:
    broker = build_broker(BrokerConfig(data_dir=None, auto_create_topics=False))
    broker.create_topic("orders", 1, {})
    return build_dispatcher(broker)


def produce(acks: int, topic: str = "orders") -> memoryview:
    Q = request_codecs(APIS_BY_NAME["Produce"].key).cls
    batch = encode_batch([Record(0, 0, b"k", b"v", [])], base_timestamp=1_700_000_000_000)
    data = [Q.TopicProduceData(name=topic, partition_data=[Q.PartitionProduceData(index=0, records=batch)])]
    return request_frame("Produce", 9, acks=acks, timeout_ms=1000, topic_data=data)


def test_a_request_runs_its_handler_and_its_answer_waits_for_what_it_needs(dispatcher: Dispatcher) -> None:
    connection = Connection()
    result, reply = dispatch(dispatcher, produce(acks=-1), connection, 1_700_000_000_000)
    assert isinstance(result, Dispatched) and isinstance(result.outcome, RespondWhenDurable)
    assert result.answer is None and (reply.api_key, reply.correlation_id) == (0, 7)
    answer = result.outcome.response
    # A one-partition Produce takes the fast path: its answer is encoded already, waiting for the fsync.
    assert type(answer) is Encoded
    decoded, _ = response_codec(APIS_BY_NAME["Produce"].key, 9).decode(answer.body)
    partition = decoded.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.NONE and partition.base_offset >= 0
    # Once durable, the reply frames the answer and hands it to its connection.
    reply.fill(answer)
    assert connection.answered_later == [(reply, 0)] and reply.parts is not None
    assert read_answer(reply.parts, "Produce", 9) == (7, decoded)
    acks_zero, _ = dispatch(dispatcher, produce(acks=0), now_ms=1_700_000_000_000)
    assert isinstance(acks_zero, Dispatched) and isinstance(acks_zero.outcome, NoResponse)
    assert acks_zero.answer is None


def test_an_answer_given_at_once_is_framed_by_the_pipeline(dispatcher: Dispatcher) -> None:
    result, _ = dispatch(dispatcher, request_frame("Metadata", 9, correlation_id=31, topics=[]))
    assert isinstance(result, Dispatched) and isinstance(result.outcome, Respond) and result.answer is not None
    correlation_id, metadata = read_answer(result.answer, "Metadata", 9)
    assert correlation_id == 31 and metadata == result.outcome.response and metadata.brokers


def test_the_gate_and_the_version_check_come_before_any_decoding(dispatcher: Dispatcher) -> None:
    before_login = Connection(gated=True, authenticated=False)
    assert dispatch(dispatcher, produce(acks=1), before_login)[0] == Close("API 0 before authentication finished")
    unknown = request_header(9999, 0, 1, None, False)
    assert dispatch(dispatcher, unknown)[0] == Close("unknown API key 9999")
    too_new = request_header(0, 99, 1, None, False) + b"\xde\xad"
    assert dispatch(dispatcher, too_new)[0] == Close("unsupported version 99 of API 0")
    truncated = request_frame("Metadata", 9, topics=None)[:-3]
    closed, _ = dispatch(dispatcher, truncated)
    assert isinstance(closed, Close) and closed.reason.startswith("malformed request")
    short = dispatch(dispatcher, b"\x00\x03")[0]
    assert short == Close("malformed request: 2 bytes are shorter than a header")


def test_an_api_versions_it_cannot_parse_is_answered_in_v0(dispatcher: Dispatcher) -> None:
    result, _ = dispatch(dispatcher, request_header(18, 999, 3, None, False) + b"\xff")
    assert isinstance(result, Dispatched) and isinstance(result.outcome, Respond) and result.answer is not None
    correlation_id, answer = read_answer(result.answer, "ApiVersions", 0)
    assert correlation_id == 3 and answer.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(key.api_key == 18 for key in answer.api_keys)


def test_the_authorizer_answers_before_the_handler_runs() -> None:
    broker = build_broker(BrokerConfig(data_dir=None, authorizer="acl", auto_create_topics=False))
    broker.create_topic("orders", 1, {})
    secured = build_dispatcher(broker)
    result, _ = dispatch(secured, produce(acks=-1), Connection("User:nobody"))
    assert isinstance(result, Dispatched) and isinstance(result.outcome, Respond)
    answer = result.outcome.response.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert broker.partition("orders", 0).log.log_end_offset == 0, "nothing was appended"


def test_the_request_time_quota_is_counted_after_the_handler(dispatcher: Dispatcher) -> None:
    quotas = dispatcher.quotas
    assert quotas is not None
    entity = (("client-id", "test"),)
    quotas.configs[entity] = {"request_percentage": 0.000001}
    try:
        result, _ = dispatch(dispatcher, request_frame("Metadata", 9, topics=None), now_ms=1_700_000_000_000)
    finally:
        del quotas.configs[entity]
    assert isinstance(result, Dispatched) and result.throttle_ms > 0 and result.answer is not None
    # The client backs off too: the answer carries the throttle time (KIP-219).
    assert read_answer(result.answer, "Metadata", 9)[1].throttle_time_ms == result.throttle_ms
