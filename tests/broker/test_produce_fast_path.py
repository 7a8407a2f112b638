"""Produce through the whole request pipeline (real broker, segment files on disk, no sockets), in the version
librdkafka speaks (v10), for every answer the cheap path can give: each one must carry the error Kafka gives,
and the one-call encoder of the common answer (sluice.protocol.produce_answer) must write exactly the bytes
of the generated encoder, whether the answer is the common shape or one it hands on. A one-partition request
is answered already encoded (RespondEncoded, or an Encoded answer waiting for the fsync on a broker that
fsyncs first); every other shape takes the general path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.broker.without_sockets import Connection, dispatch, read_answer

from sluice.broker.api import NoResponse, Respond, RespondEncoded, RespondWhenDurable
from sluice.broker.config import BrokerConfig
from sluice.broker.dispatch import Dispatched, Dispatcher, build_dispatcher
from sluice.broker.handlers.produce import refuse_unflushed
from sluice.errors import ErrorCode
from sluice.protocol.codec import Encoded
from sluice.protocol.headers import request_header
from sluice.protocol.messages import request_codecs, response_codec
from sluice.protocol.records import Record, encode_batch
from sluice.server.app import build_broker

VERSION = 10
NOW_MS = 1_700_000_000_000
REQUEST = request_codecs(0).cls


@pytest.fixture(scope="module")
def dispatcher(tmp_path_factory: pytest.TempPathFactory) -> Dispatcher:
    broker = build_broker(
        BrokerConfig(
            data_dir=tmp_path_factory.mktemp("fast"), auto_create_topics=False, fsync_before_ack=False
        )
    )
    broker.create_topic("plain", 1, {})
    broker.create_topic("small", 1, {"max.message.bytes": "200"})
    broker.create_topic("recent", 1, {"message.timestamp.before.max.ms": "60000"})
    broker.create_topic("keyed", 1, {"cleanup.policy": "compact"})
    return build_dispatcher(broker)


def batch(value: bytes = b"v", *, key: bytes | None = b"k", timestamp: int = NOW_MS, **fields: Any) -> bytes:
    return encode_batch([Record(0, 0, key, value, [])], base_timestamp=timestamp, **fields)


def respond(
    dispatcher: Dispatcher,
    topic: str,
    records: bytes,
    *,
    index: int = 0,
    acks: int = 1,
    connection: Connection | None = None,
) -> Any:
    """The response to one Produce, after checking that both encoders write the same bytes for it."""
    partitions = [REQUEST.PartitionProduceData(index=index, records=records)]
    body = REQUEST(
        transactional_id=None,
        acks=acks,
        timeout_ms=1000,
        topic_data=[REQUEST.TopicProduceData(name=topic, partition_data=partitions)],
    )
    frame = request_header(0, VERSION, 5, "fast-path-test", True) + request_codecs(0)[VERSION].encode(body)
    result, _ = dispatch(dispatcher, frame, connection, NOW_MS)
    assert isinstance(result, Dispatched) and result.answer is not None
    correlation_id, sent = read_answer(result.answer, "Produce", VERSION)
    assert correlation_id == 5
    codec = response_codec(0, VERSION)
    if isinstance(result.outcome, RespondEncoded):
        # An accepted append's answer, encoded without building it: what the generated encoder writes for it.
        response, end = codec.decode(result.outcome.body)
        assert end == len(result.outcome.body)
        general_bytes: list[Any] = []
        codec.generated_encode_root(response, general_bytes)
        assert b"".join(general_bytes) == result.outcome.body
        assert sent == response
        return response
    assert isinstance(result.outcome, Respond)
    response = result.outcome.response
    fast: list[Any] = []
    general: list[Any] = []
    codec.encode_root(response, fast)
    codec.generated_encode_root(response, general)
    assert b"".join(fast) == b"".join(general)
    decoded, _ = codec.decode(b"".join(fast))
    assert decoded == response == sent
    return response


def produce(dispatcher: Dispatcher, topic: str, records: bytes, **options: Any) -> Any:
    """The partition's answer (see `respond`)."""
    return respond(dispatcher, topic, records, **options).responses[0].partition_responses[0]


def end_offset(dispatcher: Dispatcher, topic: str) -> int:
    return dispatcher.broker.partition(topic, 0).log.log_end_offset


def test_an_accepted_batch_gets_the_next_offset(dispatcher: Dispatcher) -> None:
    first = produce(dispatcher, "plain", batch())
    second = produce(dispatcher, "plain", batch())
    assert (first.error_code, second.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert second.base_offset == first.base_offset + 1
    assert end_offset(dispatcher, "plain") == second.base_offset + 1


@pytest.mark.parametrize(("topic", "index"), [("missing", 0), ("plain", 5)])
def test_an_unknown_topic_or_partition(dispatcher: Dispatcher, topic: str, index: int) -> None:
    answer = produce(dispatcher, topic, batch(), index=index)
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and answer.base_offset == -1


def test_a_bad_crc_is_refused_and_nothing_is_stored(dispatcher: Dispatcher) -> None:
    before = end_offset(dispatcher, "plain")
    damaged = bytearray(batch(b"payload"))
    damaged[-2] ^= 0xFF
    answer = produce(dispatcher, "plain", bytes(damaged))
    assert answer.error_code == ErrorCode.CORRUPT_MESSAGE and "CRC" in (answer.error_message or "")
    assert end_offset(dispatcher, "plain") == before


def test_a_duplicate_batch_answers_its_first_offset_and_a_gap_is_refused(dispatcher: Dispatcher) -> None:
    idempotent = {"producer_id": 4242, "producer_epoch": 0}
    first = produce(dispatcher, "plain", batch(b"once", base_sequence=0, **idempotent))
    stored = end_offset(dispatcher, "plain")
    again = produce(dispatcher, "plain", batch(b"once", base_sequence=0, **idempotent))
    assert (again.error_code, again.base_offset) == (ErrorCode.NONE, first.base_offset)
    assert end_offset(dispatcher, "plain") == stored, "the retry was not stored twice"
    gap = produce(dispatcher, "plain", batch(b"later", base_sequence=5, **idempotent))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_batch_over_the_topic_limit_is_too_large(dispatcher: Dispatcher) -> None:
    answer = produce(dispatcher, "small", batch(b"x" * 500))
    assert answer.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert produce(dispatcher, "small", batch(b"x")).error_code == ErrorCode.NONE


def test_timestamp_rules_name_the_record(dispatcher: Dispatcher) -> None:
    stale = produce(dispatcher, "recent", batch(timestamp=NOW_MS - 3_600_000))
    assert stale.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in stale.record_errors] == [0]
    # No bounds on "plain", but a producer may not claim LogAppendTime with no timestamp of its own.
    claimed = produce(dispatcher, "plain", batch(timestamp_type_log_append=True, max_timestamp=-1))
    assert claimed.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [e.batch_index for e in claimed.record_errors] == [0]


def test_a_compacted_topic_refuses_a_record_without_a_key(dispatcher: Dispatcher) -> None:
    answer = produce(dispatcher, "keyed", batch(key=None))
    assert answer.error_code == ErrorCode.INVALID_RECORD and len(answer.record_errors) == 1
    assert produce(dispatcher, "keyed", batch(key=b"k")).error_code == ErrorCode.NONE


def test_bad_acks_are_refused(dispatcher: Dispatcher) -> None:
    assert produce(dispatcher, "plain", batch(), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_an_unauthorized_topic(tmp_path: Path) -> None:
    broker = build_broker(
        BrokerConfig(data_dir=tmp_path, authorizer="acl", auto_create_topics=False, fsync_before_ack=False)
    )
    broker.create_topic("plain", 1, {})
    answer = produce(build_dispatcher(broker), "plain", batch(), connection=Connection("User:nobody"))
    assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert broker.partition("plain", 0).log.log_end_offset == 0


def test_the_byte_rate_quota_still_throttles(dispatcher: Dispatcher) -> None:
    quotas = dispatcher.quotas
    assert quotas is not None
    entity = (("client-id", "fast-path-test"),)
    quotas.configs[entity] = {"producer_byte_rate": 1.0}
    try:
        produce(dispatcher, "plain", batch(b"x" * 100))
        response = respond(dispatcher, "plain", batch())
    finally:
        del quotas.configs[entity]
    assert response.throttle_time_ms > 0
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def dispatch_produce(dispatcher: Dispatcher, topic_data: list[Any], acks: int = 1) -> Any:
    body = REQUEST(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=topic_data)
    frame = request_header(0, VERSION, 5, "fast-path-test", True) + request_codecs(0)[VERSION].encode(body)
    result, _ = dispatch(dispatcher, frame, now_ms=NOW_MS)
    assert isinstance(result, Dispatched)
    return result.outcome


def one_topic(topic: str, *indexes: int) -> list[Any]:
    partitions = [REQUEST.PartitionProduceData(index=i, records=batch()) for i in indexes]
    return [REQUEST.TopicProduceData(name=topic, partition_data=partitions)]


def test_an_accepted_one_partition_request_is_answered_encoded(dispatcher: Dispatcher) -> None:
    before = end_offset(dispatcher, "plain")
    outcome = dispatch_produce(dispatcher, one_topic("plain", 0))
    assert isinstance(outcome, RespondEncoded)
    answer, _ = response_codec(0, VERSION).decode(outcome.body)
    assert answer.responses[0].partition_responses[0].base_offset == before


def test_acks_0_stores_and_answers_nothing(dispatcher: Dispatcher) -> None:
    before = end_offset(dispatcher, "plain")
    assert isinstance(dispatch_produce(dispatcher, one_topic("plain", 0), acks=0), NoResponse)
    assert end_offset(dispatcher, "plain") == before + 1


def test_other_shapes_take_the_general_path(dispatcher: Dispatcher) -> None:
    long_name = "l" * 130  # its length prefix takes two varint bytes
    dispatcher.broker.create_topic(long_name, 1, {})
    before = end_offset(dispatcher, "plain")
    two_partitions = dispatch_produce(dispatcher, one_topic("plain", 0, 5))
    assert isinstance(two_partitions, Respond)
    answers = two_partitions.response.responses[0].partition_responses
    assert [(a.error_code, a.base_offset) for a in answers] == [
        (ErrorCode.NONE, before), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]  # fmt: skip
    two_topics = dispatch_produce(dispatcher, one_topic("plain", 0) + one_topic(long_name, 0))
    assert isinstance(two_topics, Respond) and len(two_topics.response.responses) == 2
    long = dispatch_produce(dispatcher, one_topic(long_name, 0))
    assert isinstance(long, Respond)
    assert long.response.responses[0].partition_responses[0].base_offset == 1
    assert end_offset(dispatcher, "plain") == before + 2


def test_a_broker_that_fsyncs_before_answering_waits_for_the_fsync(tmp_path: Path) -> None:
    """The answer is encoded at once but waits for the group commit; if that fsync fails, the group commit
    builds it after all to turn it into KAFKA_STORAGE_ERROR (refuse_unflushed), and the built answer is the
    encoded one."""
    broker = build_broker(BrokerConfig(data_dir=tmp_path, auto_create_topics=False))
    broker.create_topic("plain", 1, {})
    dispatcher = build_dispatcher(broker)
    outcome = dispatch_produce(dispatcher, one_topic("plain", 0))
    assert isinstance(outcome, RespondWhenDurable) and type(outcome.response) is Encoded
    codec = response_codec(0, VERSION)
    answer, _ = codec.decode(outcome.response.body)
    assert answer.responses[0].partition_responses[0].base_offset == 0
    assert outcome.response.build() == answer
    refused = refuse_unflushed(broker, outcome.response, {("plain", 0): "fsync failed"})
    assert [(p.error_code, p.base_offset, p.error_message) for p in refused.responses[0].partition_responses] == [
        (ErrorCode.KAFKA_STORAGE_ERROR, -1, "fsync failed")]  # fmt: skip
    refused_elsewhere = refuse_unflushed(
        broker, dispatch_produce(dispatcher, one_topic("plain", 0)).response, {("other", 0): "fsync failed"}
    )
    assert refused_elsewhere.responses[0].partition_responses[0].base_offset == 1
    # Shapes the fast path hands on wait for the fsync too.
    two = dispatch_produce(dispatcher, one_topic("plain", 0, 1))
    assert isinstance(two, RespondWhenDurable) and type(two.response) is not Encoded
