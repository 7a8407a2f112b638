"""The codec's fast paths write and read exactly what the general ones do.

- ProduceResponse v9+ (sluice.protocol.produce_answer): the one-call encoder of the common answer must give
  the generated encoder's bytes for every response, the common shape and every shape it hands on.
- Compact strings and records whose length prefix takes one or two varint bytes are decoded inline; longer
  ones, null ones and ones that run past the end take the general reader.
- The common one-partition Produce request (sluice.protocol.produce_request) is read in place as the
  generated decoder reads it, and every other shape or damaged body is left to that decoder.
- A body encoded ahead is framed (size prefix and response header) as its message is.
- The batch producer's Produce v3 request is written, and its answer read, as the generated codec does.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.protocol.headers import request_header
from sluice.protocol.messages import request_codec, response_codec, response_codecs
from sluice.protocol.primitives import DecodeError
from sluice.protocol.produce_answer import read_one_topic_v3
from sluice.protocol.produce_request import one_topic_v3, read_one_partition

PRODUCE = 0
RESPONSE = response_codecs(PRODUCE).cls
TOPIC = RESPONSE.TopicProduceResponse
PARTITION = RESPONSE.PartitionProduceResponse
LEADER = RESPONSE.LeaderIdAndEpoch
RECORD_ERROR = RESPONSE.BatchIndexAndErrorMessage
NODE = RESPONSE.NodeEndpoint

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
# Names around the one-byte length limit (126 bytes) and non-ASCII ones, whose byte length differs.
names = st.one_of(
    st.text(max_size=8),
    st.integers(120, 130).map(lambda n: "t" * n),
    st.integers(40, 70).map(lambda n: "é" * n),
    st.none(),
)
partitions = st.builds(
    PARTITION,
    index=int32,
    error_code=int16,
    base_offset=int64,
    log_append_time_ms=int64,
    log_start_offset=int64,
    record_errors=st.one_of(
        st.just([]),
        st.lists(st.builds(RECORD_ERROR, batch_index=int32, batch_index_error_message=names), max_size=2),
    ),
    error_message=st.one_of(st.none(), st.none(), st.text(max_size=8)),
    current_leader=st.one_of(
        st.just(LEADER()), st.builds(LEADER, leader_id=int32, leader_epoch=int32), st.just(LEADER())
    ),
)
topics = st.builds(
    TOPIC,
    name=names,
    topic_id=st.one_of(st.uuids(), st.just(uuid.UUID(int=0))),
    partition_responses=st.one_of(
        st.lists(partitions, min_size=1, max_size=1), st.lists(partitions, max_size=3)
    ),
)
responses = st.builds(
    RESPONSE,
    responses=st.one_of(st.lists(topics, min_size=1, max_size=1), st.lists(topics, max_size=3)),
    throttle_time_ms=st.one_of(st.just(0), int32),
    node_endpoints=st.one_of(
        st.just([]),
        st.lists(
            st.builds(NODE, node_id=int32, host=st.text(max_size=5), port=int32, rack=names), max_size=2
        ),
    ),
)


def encoded(encode: Any, message: Any) -> bytes:
    out: list[Any] = []
    encode(message, out)
    return b"".join(out)


@pytest.mark.parametrize("version", range(0, 14))
def test_produce_answer_matches_the_generated_encoder(version: int) -> None:
    codec = response_codec(PRODUCE, version)

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(responses)
    def check(response: Any) -> None:
        if not version >= 13 and any(topic.name is None for topic in response.responses):
            return  # a null topic name before v13 is no valid answer for either encoder
        assert encoded(codec.encode_root, response) == encoded(codec.generated_encode_root, response)

    check()


def common_answer(name: str = "orders", **fields: Any) -> Any:
    partition = PARTITION(index=3, error_code=0, base_offset=41, log_start_offset=7, **fields)
    return RESPONSE(responses=[TOPIC(name=name, partition_responses=[partition])], throttle_time_ms=12)


@pytest.mark.parametrize("version", [9, 10, 11, 12])
def test_the_common_answer_decodes_to_what_was_encoded(version: int) -> None:
    codec = response_codec(PRODUCE, version)
    answer = common_answer()
    data = codec.encode(answer)
    decoded, end = codec.decode(data)
    assert end == len(data)
    part = decoded.responses[0].partition_responses[0]
    assert (decoded.responses[0].name, part.index, part.base_offset, part.log_start_offset) == (
        "orders",
        3,
        41,
        7,
    )
    assert decoded.throttle_time_ms == 12 and part.error_message is None and part.record_errors == []


def test_error_answers_keep_their_message_and_record_errors() -> None:
    codec = response_codec(PRODUCE, 10)
    answer = common_answer(
        error_message="bad timestamp",
        record_errors=[RECORD_ERROR(batch_index=0, batch_index_error_message="out of range")],
    )
    decoded, _ = codec.decode(codec.encode(answer))
    part = decoded.responses[0].partition_responses[0]
    assert part.error_message == "bad timestamp"
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(0, "out of range")]


# ----- inline compact string and records reads -----


def produce_request(version: int, name: str, records: bytes | None, transactional_id: str | None) -> Any:
    codec = request_codec(PRODUCE, version)
    request = codec.cls
    return request(
        transactional_id=transactional_id,
        acks=1,
        timeout_ms=1000,
        topic_data=[
            request.TopicProduceData(
                name=name, partition_data=[request.PartitionProduceData(index=0, records=records)]
            )
        ],
    )


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 128, 300, 16382, 16383, 20000])
@pytest.mark.parametrize("version", [9, 12])
def test_strings_and_records_of_every_length_round_trip(version: int, length: int) -> None:
    codec = request_codec(PRODUCE, version)
    for transactional_id in (None, "x" * length):
        request = produce_request(version, "n" * length, b"r" * length, transactional_id)
        data = codec.encode(request)
        decoded, end = codec.decode(memoryview(data))
        assert end == len(data)
        topic = decoded.topic_data[0]
        assert (decoded.transactional_id, topic.name) == (transactional_id, "n" * length)
        assert bytes(topic.partition_data[0].records) == b"r" * length


def test_null_records_decode_as_none() -> None:
    codec = request_codec(PRODUCE, 10)
    decoded, _ = codec.decode(codec.encode(produce_request(10, "t", None, None)))
    assert decoded.topic_data[0].partition_data[0].records is None


@pytest.mark.parametrize("cut", [1, 3, 6])
def test_a_string_that_runs_past_the_end_is_a_decode_error(cut: int) -> None:
    codec = request_codec(PRODUCE, 10)
    data = codec.encode(produce_request(10, "t", b"", "txn-id"))
    with pytest.raises(DecodeError):
        codec.decode(data[:cut])


def test_a_records_field_that_runs_past_the_end_is_a_decode_error() -> None:
    codec = request_codec(PRODUCE, 10)
    data = codec.encode(produce_request(10, "t", b"r" * 20, None))
    with pytest.raises(DecodeError):
        codec.decode(data[:-8])


# ----- the common one-partition Produce request read in place -----

REQUEST = request_codec(PRODUCE, 10).cls
request_partitions = st.builds(
    REQUEST.PartitionProduceData,
    index=int32,
    records=st.one_of(
        st.none(),
        st.binary(max_size=4),
        st.integers(120, 130).map(lambda n: b"r" * n),
        st.integers(16380, 16390).map(lambda n: b"r" * n),
    ),
)
requests = st.builds(
    REQUEST,
    transactional_id=st.one_of(st.none(), st.none(), st.text(max_size=4)),
    acks=int16,
    timeout_ms=int32,
    topic_data=st.one_of(
        st.lists(
            st.builds(
                REQUEST.TopicProduceData,
                name=names.filter(lambda name: name is not None),
                partition_data=st.lists(request_partitions, min_size=1, max_size=1),
            ),
            min_size=1,
            max_size=1,
        ),
        st.lists(
            st.builds(
                REQUEST.TopicProduceData,
                name=st.text(max_size=3),
                partition_data=st.lists(request_partitions, max_size=2),
            ),
            max_size=2,
        ),
    ),
)


def is_common(request: Any) -> bool:
    """What read_one_partition must read: no transactional id, one topic whose name's length fits one
    varint byte, one partition whose records are not null and whose length fits two."""
    if request.transactional_id is not None or len(request.topic_data) != 1:
        return False
    topic = request.topic_data[0]
    if len(topic.partition_data) != 1 or len(topic.name.encode()) > 126:
        return False
    records = topic.partition_data[0].records
    return records is not None and len(records) < 16383


@pytest.mark.parametrize("version", [9, 10, 11, 12])
def test_the_one_partition_reader_reads_what_the_generated_decoder_reads(version: int) -> None:
    codec = request_codec(PRODUCE, version)

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(requests, st.one_of(st.none(), st.text(max_size=3), st.just("c" * 300)))
    def check(request: Any, client_id: str | None) -> None:
        header = request_header(PRODUCE, version, 7, client_id, True)
        data = memoryview(header + codec.encode(request))
        read = read_one_partition(data)
        if not is_common(request):
            assert read is None
            return
        assert read is not None
        decoded, _ = codec.decode(data, len(header))
        topic = decoded.topic_data[0]
        part = topic.partition_data[0]
        acks, name, index, records = read
        assert (acks, name, index, bytes(records)) == (
            decoded.acks,
            topic.name,
            part.index,
            bytes(part.records),
        )
        # A body cut short, or followed by more bytes, is not read: the generated decoder names the fault.
        for cut in range(0, len(data), max(1, len(data) // 16)):
            assert read_one_partition(data[:cut]) is None
        assert read_one_partition(memoryview(bytes(data) + b"\x00")) is None

    check()


def test_the_one_partition_reader_leaves_header_tags_to_the_decoder() -> None:
    codec = request_codec(PRODUCE, 10)
    header = request_header(PRODUCE, 10, 7, "client", True)
    body = codec.encode(produce_request(10, "ab", b"records", None))
    assert read_one_partition(memoryview(header + body)) is not None
    tagged = memoryview(header[:-1] + b"\x01\x05\x01x" + body)  # one tagged field: tag 5, one byte
    assert read_one_partition(tagged) is None
    _, pos = codec.read_header(tagged)
    assert codec.decode(tagged, pos)[0].topic_data[0].name == "ab"


@pytest.mark.parametrize("client_id", [b"\x00\x02\xff\xfe", b"\xff\xfe"])  # not UTF-8; a length below -1
def test_the_one_partition_reader_leaves_a_bad_client_id_to_the_header_reader(client_id: bytes) -> None:
    codec = request_codec(PRODUCE, 10)
    header = request_header(PRODUCE, 10, 7, None, True)
    frame = memoryview(header[:8] + client_id + b"\x00" + codec.encode(produce_request(10, "t", b"r", None)))
    assert read_one_partition(frame) is None
    with pytest.raises(DecodeError):
        codec.read_header(frame)


def test_the_one_partition_reader_leaves_a_name_that_is_not_utf8_to_the_decoder() -> None:
    codec = request_codec(PRODUCE, 10)
    header = request_header(PRODUCE, 10, 7, "client", True)
    data = bytearray(codec.encode(produce_request(10, "ab", b"records", None)))
    data[data.index(b"ab")] = 0xFF
    assert read_one_partition(memoryview(header + data)) is None
    with pytest.raises(DecodeError):
        codec.decode(memoryview(data))


@pytest.mark.parametrize(("api_key", "version"), [(PRODUCE, 8), (PRODUCE, 9), (18, 3)])  # ApiVersions: header v0
@pytest.mark.parametrize("name_bytes", [1, 4000, 4080, 20000])
def test_a_body_encoded_ahead_is_framed_as_its_message_is(api_key: int, version: int, name_bytes: int) -> None:
    codec = response_codec(api_key, version)
    if api_key == PRODUCE:
        message = RESPONSE(responses=[TOPIC(name="t" * name_bytes, partition_responses=[PARTITION(index=3)])])
    else:
        keys = [codec.cls.ApiVersion(api_key=k, min_version=0, max_version=1) for k in range(name_bytes // 7)]
        message = codec.cls(error_code=0, api_keys=keys)
    body = codec.encode(message)
    framed = codec.frame_body(123456, body)
    assert b"".join(framed) == b"".join(codec.frame(123456, message)[0])
    assert len(framed) == (1 if len(body) <= 4096 else 2)  # small answers go out as one buffer
    tagged_header = api_key == PRODUCE and version >= 9  # flexible, and not ApiVersions
    assert int.from_bytes(framed[0][:4], "big") == 4 + tagged_header + len(body)
    assert framed[0][4:8] == (123456).to_bytes(4, "big")


@settings(max_examples=60, deadline=None)
@given(
    acks=st.sampled_from([-1, 1]),
    timeout_ms=st.integers(0, 2**31 - 1),
    topic=st.one_of(st.text(min_size=1, max_size=8), st.just("é" * 40)),
    batches=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=40)), min_size=1, max_size=4),
)
def test_the_batch_producers_request_is_what_the_generated_encoder_writes(
    acks: int, timeout_ms: int, topic: str, batches: list[tuple[int, bytes]]
) -> None:
    codec = request_codec(PRODUCE, 3)
    Q = codec.cls
    request = Q(
        transactional_id=None,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            Q.TopicProduceData(
                name=topic, partition_data=[Q.PartitionProduceData(index=p, records=b) for p, b in batches]
            )
        ],
    )
    assert one_topic_v3(acks, timeout_ms, topic.encode(), batches) == codec.encode(request)


@settings(max_examples=60, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=8),
    answers=st.lists(st.tuples(int32, int16, int64, int64), max_size=4, unique_by=lambda answer: answer[0]),
)
def test_the_batch_producers_answer_is_read_as_the_generated_decoder_reads_it(
    topic: str, answers: list[tuple[int, int, int, int]]
) -> None:
    codec = response_codec(PRODUCE, 3)
    partitions = [
        PARTITION(index=i, error_code=e, base_offset=b, log_append_time_ms=t) for i, e, b, t in answers
    ]
    body = codec.encode(RESPONSE(responses=[TOPIC(name=topic, partition_responses=partitions)]))
    read = read_one_topic_v3(body, topic.encode(), len(answers))
    assert read == {p.index: (p.error_code, p.base_offset) for p in partitions}
    # Another shape (another topic, another partition count) is left to the generated decoder.
    assert read_one_topic_v3(body, topic.encode() + b"x", len(answers)) is None
    assert read_one_topic_v3(body, topic.encode(), len(answers) + 1) is None
