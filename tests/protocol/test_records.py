"""Record batches v2: varints, round trips, kafka-python interop, validation and corruption."""

from __future__ import annotations

import struct
import types

import cramjam
import kafka.codec
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sluice.errors import CorruptRecordError, ErrorCode, KafkaError
from sluice.protocol import records as records_module
from sluice.protocol.compression import Codec, compress
from sluice.protocol.control_batches import (
    ControlRecordType,
    decode_control_key,
    decode_end_txn_marker,
    encode_control_key,
    encode_end_txn_batch,
)
from sluice.protocol.records import (
    BATCH_HEADER_SIZE,
    Record,
    assign_base_offset,
    decode_batch,
    decode_varint,
    decode_varlong,
    encode_batch,
    encode_varint,
    encode_varlong,
    iter_batches,
    parse_batch_header,
    record_offset,
    record_timestamp,
    set_max_timestamp,
    set_partition_leader_epoch,
    validate_batches,
)

ALL_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _simple_records(count: int = 3) -> list[Record]:
    return [
        Record(index, index * 10, f"key-{index}".encode(), f"value-{index}".encode(), [("h", b"v")])
        for index in range(count)
    ]


def _seal(
    payload: bytes,
    *,
    record_count: int,
    last_offset_delta: int,
    attributes: int = 0,
    magic: int = 2,
    producer_id: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A batch built independently of encode_batch, with a correct CRC over whatever payload."""
    covered = struct.pack(
        ">hiqqqhii", attributes, last_offset_delta, 1000, 1000, producer_id, 0, base_sequence, record_count
    )
    crc = crc32c(covered + payload)
    return struct.pack(">qiibI", 0, 49 + len(payload), 0, magic, crc) + covered + payload


def _reseal(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC after a test edits CRC-covered bytes on purpose."""
    edited = bytearray(batch)
    struct.pack_into(">I", edited, 17, crc32c(edited[21:]))
    return bytes(edited)


# --- varints -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (300, b"\xd8\x04"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded) == (value, len(encoded))


@given(INT32)
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 5
    assert decode_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


def test_varint_out_of_range_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)


def test_varint_longer_than_five_bytes_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_varint(b"\x80\x80\x80\x80\x80\x00")
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varlong(b"\x80" * 10 + b"\x00")


def test_varint_overflowing_32_bits_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="overflows"):
        decode_varint(b"\xff\xff\xff\xff\x7f")


def test_varint_running_past_its_end_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="runs past"):
        decode_varint(b"\x80\x80")
    with pytest.raises(CorruptRecordError, match="runs past"):
        decode_varint(b"\x80\x01", 0, end=1)  # whole in the buffer but beyond the allowed end
    with pytest.raises(CorruptRecordError, match="runs past"):
        decode_varlong(b"")


# --- round trips --------------------------------------------------------------------------------

header_keys = st.text(max_size=12)  # includes non-ASCII and the empty string
nullable_bytes = st.none() | st.binary(max_size=300)
records_strategy = st.lists(
    st.tuples(
        st.integers(1, 5),  # gap to the next offset delta
        st.integers(-(2**40), 2**40),  # timestamp delta
        nullable_bytes,
        nullable_bytes,
        st.lists(st.tuples(header_keys, nullable_bytes), max_size=4),
    ),
    max_size=8,
).map(
    lambda rows: [
        Record(sum(gap for gap, *_ in rows[: index + 1]) - 1, ts, key, value, headers)
        for index, (_, ts, key, value, headers) in enumerate(rows)
    ]
)


@settings(max_examples=30, deadline=None)
@given(
    records=records_strategy,
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.integers(0, 2**50),
    producer_id=st.integers(-1, 2**40),
    is_transactional=st.booleans(),
)
@pytest.mark.parametrize("codec", ALL_CODECS)
def test_encode_decode_round_trip(
    codec: Codec,
    records: list[Record],
    base_offset: int,
    base_timestamp: int,
    producer_id: int,
    is_transactional: bool,
) -> None:
    batch = encode_batch(
        records,
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=3,
        base_sequence=7,
        partition_leader_epoch=11,
        is_transactional=is_transactional,
    )
    header, decoded = decode_batch(batch, max_uncompressed=len(batch) * 2 + 10_000)
    assert decoded == records
    assert header.size == len(batch)
    assert header.compression == codec
    assert header.record_count == len(records)
    assert header.is_transactional == is_transactional
    assert (header.base_offset, header.producer_id, header.producer_epoch) == (base_offset, producer_id, 3)
    assert (header.base_sequence, header.partition_leader_epoch) == (7, 11)
    if records:
        assert header.last_offset_delta == records[-1].offset_delta
        latest = max(base_timestamp + record.timestamp_delta for record in records)
        assert header.max_timestamp == latest
        assert [record_offset(header, record) for record in decoded] == [
            base_offset + record.offset_delta for record in records
        ]


def test_record_attributes_survive_a_round_trip() -> None:
    record = Record(0, 0, b"k", b"v", [], attributes=0x7F)
    assert decode_batch(encode_batch([record], base_timestamp=0))[1] == [record]


def test_empty_batch_round_trip() -> None:
    header, decoded = decode_batch(encode_batch([], base_timestamp=5))
    assert decoded == []
    assert (header.record_count, header.last_offset_delta, header.max_timestamp) == (0, -1, 5)


def test_offset_deltas_must_increase() -> None:
    with pytest.raises(ValueError, match="must increase"):
        encode_batch([Record(1, 0, None, None), Record(1, 0, None, None)], base_timestamp=0)


def test_decode_batch_at_a_position_inside_a_larger_buffer() -> None:
    first = encode_batch(_simple_records(2), base_timestamp=0)
    second = encode_batch(_simple_records(3), base_offset=2, base_timestamp=0, compression=Codec.ZSTD)
    header, decoded = decode_batch(b"".join((first, second)), len(first))
    assert header.base_offset == 2
    assert decoded == _simple_records(3)


def test_decode_bounds_decompressed_size() -> None:
    batch = encode_batch([Record(0, 0, None, bytes(1_000_000))], base_timestamp=0, compression=Codec.ZSTD)
    assert len(batch) < 1000
    with pytest.raises(CorruptRecordError, match="exceeds the limit"):
        decode_batch(batch, max_uncompressed=100_000)


# --- interop with kafka-python's independent implementation ----------------------------------------


def _cramjam_as_python_snappy() -> types.SimpleNamespace:
    """Stand in for python-snappy (not installed) so kafka-python writes Java-style xerial snappy."""
    return types.SimpleNamespace(
        compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
    )


@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> list[Codec]:
    if not kafka.codec.has_snappy():
        monkeypatch.setattr(kafka.codec, "snappy", _cramjam_as_python_snappy())
    checks = {
        Codec.NONE: lambda: True,
        Codec.GZIP: kafka.codec.has_gzip,
        Codec.SNAPPY: kafka.codec.has_snappy,
        Codec.LZ4: kafka.codec.has_lz4,
        Codec.ZSTD: kafka.codec.has_zstd,
    }
    return [codec for codec, available in checks.items() if available()]


def _kafka_python_batch(codec: Codec, rows: list[tuple[int, bytes | None, bytes | None, list]]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=42,
        producer_epoch=1,
        base_sequence=5,
        batch_size=10_000_000,
    )
    for offset, (timestamp, key, value, headers) in enumerate(rows):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


interop_rows = st.lists(
    st.tuples(
        st.integers(0, 2**41),
        nullable_bytes,
        nullable_bytes,
        st.lists(st.tuples(header_keys, nullable_bytes), max_size=3),
    ),
    min_size=1,
    max_size=6,
)


# The fixture only patches in a codec, which every generated example may share.
SHARED_FIXTURE = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SHARED_FIXTURE
@given(rows=interop_rows)
def test_we_read_what_kafka_python_writes(kafka_python_codecs: list[Codec], rows: list) -> None:
    assert Codec.SNAPPY in kafka_python_codecs
    for codec in kafka_python_codecs:
        batch = _kafka_python_batch(codec, rows)
        assert validate_batches(batch, max_batch_bytes=len(batch))[0].record_count == len(rows)
        header, decoded = decode_batch(batch)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 1, 5)
        assert [(record_timestamp(header, r), r.key, r.value, r.headers) for r in decoded] == [
            (timestamp, key, value, headers) for timestamp, key, value, headers in rows
        ]
        assert [record_offset(header, r) for r in decoded] == list(range(len(rows)))


def test_kafka_python_xerial_snappy_is_what_we_decode(kafka_python_codecs: list[Codec]) -> None:
    rows = [(1000 + index, None, bytes(range(256)) * 40, []) for index in range(20)]
    batch = _kafka_python_batch(Codec.SNAPPY, rows)
    header = parse_batch_header(batch)
    assert header.compression == Codec.SNAPPY, "kafka-python fell back to no compression"
    assert batch[BATCH_HEADER_SIZE:].startswith(b"\x82SNAPPY\x00")
    assert [record.value for record in decode_batch(batch)[1]] == [row[2] for row in rows]


@SHARED_FIXTURE
@given(records=records_strategy.filter(bool), base_timestamp=st.integers(0, 2**40))
def test_kafka_python_reads_what_we_write(
    kafka_python_codecs: list[Codec], records: list[Record], base_timestamp: int
) -> None:
    for codec in kafka_python_codecs:
        batch = encode_batch(records, base_offset=100, base_timestamp=base_timestamp, compression=codec)
        theirs = DefaultRecordBatch(batch)
        assert theirs.validate_crc()
        assert theirs.compression_type == codec
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs] == [
            (100 + r.offset_delta, base_timestamp + r.timestamp_delta, r.key, r.value, r.headers)
            for r in records
        ]


def test_uncompressed_bytes_match_kafka_python_exactly() -> None:
    rows = [(1000, b"k1", b"v1", [("h", b"x")]), (1003, None, b"v2", []), (999, b"k3", None, [("é", None)])]
    theirs = _kafka_python_batch(Codec.NONE, rows)
    ours = encode_batch(
        [Record(i, ts - 1000, key, value, headers) for i, (ts, key, value, headers) in enumerate(rows)],
        base_timestamp=1000,
        producer_id=42,
        producer_epoch=1,
        base_sequence=5,
        partition_leader_epoch=0,  # kafka-python leaves it 0
    )
    assert ours == theirs


# --- corruption in decode_batch -------------------------------------------------------------------


def test_bad_crc_is_corrupt() -> None:
    batch = bytearray(encode_batch(_simple_records(), base_timestamp=0))
    batch[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(batch)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_every_truncation_is_corrupt(codec: Codec) -> None:
    batch = encode_batch(_simple_records(), base_timestamp=0, compression=codec)
    for cut in range(len(batch)):
        with pytest.raises(CorruptRecordError):
            decode_batch(batch[:cut])


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_unsupported_version(magic: int) -> None:
    batch = bytearray(encode_batch(_simple_records(), base_timestamp=0))
    batch[16] = magic
    with pytest.raises(KafkaError) as error:
        decode_batch(batch)
    assert error.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert "v0/v1" in error.value.message


def test_unknown_magic_is_corrupt() -> None:
    batch = bytearray(encode_batch(_simple_records(), base_timestamp=0))
    batch[16] = 3
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_batch(batch)


def test_batch_length_below_header_size_is_corrupt() -> None:
    batch = bytearray(encode_batch(_simple_records(), base_timestamp=0))
    struct.pack_into(">i", batch, 8, 48)
    with pytest.raises(CorruptRecordError, match="below 49"):
        decode_batch(batch)


def test_huge_batch_length_is_corrupt() -> None:
    batch = bytearray(encode_batch(_simple_records(), base_timestamp=0))
    struct.pack_into(">i", batch, 8, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="claims"):
        decode_batch(batch)


def _one_record_payload(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        # key claims 2**30 bytes
        (_one_record_payload(b"\x00\x00\x00" + encode_varint(2**30) + b"k\x00\x00"), "key"),
        # value length -2 is neither null nor a length
        (_one_record_payload(b"\x00\x00\x00\x01" + encode_varint(-2) + b"\x00"), "value"),
        # header count claims 2**31 - 1 headers
        (_one_record_payload(b"\x00\x00\x00\x01\x01" + encode_varint(2**31 - 1)), "runs past|header"),
        # header key is null
        (_one_record_payload(b"\x00\x00\x00\x01\x01\x02\x01\x01"), "header key"),
        # header key is not UTF-8
        (_one_record_payload(b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"), "UTF-8"),
        # timestamp delta varint never ends inside the record
        (_one_record_payload(b"\x00\x80\x80\x80"), "runs past"),
        # record length claims far more than the batch holds
        (encode_varint(2**30) + b"\x00\x00\x00\x01\x01\x00", "does not fit"),
        # record length varint is six bytes long
        (b"\x80\x80\x80\x80\x80\x01", "longer than 5"),
        # record declares one byte more than its fields use
        (_one_record_payload(b"\x00\x00\x00\x01\x01\x00\x00"), "end 1 early"),
    ],
)
def test_malformed_record_is_corrupt(payload: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_batch(_seal(payload, record_count=1, last_offset_delta=0))


def test_well_formed_sealed_record_decodes() -> None:
    # The control case for the malformed ones above: the same construction, done right.
    payload = _one_record_payload(b"\x00\x00\x00" + encode_varint(1) + b"k" + encode_varint(2) + b"vv\x00")
    assert decode_batch(_seal(payload, record_count=1, last_offset_delta=0))[1] == [Record(0, 0, b"k", b"vv")]


def test_record_count_must_match_records_present() -> None:
    payload = _one_record_payload(b"\x00\x00\x00\x01\x01\x00") * 2
    assert len(decode_batch(_seal(payload, record_count=2, last_offset_delta=1))[1]) == 2
    with pytest.raises(CorruptRecordError, match="left after"):
        decode_batch(_seal(payload, record_count=1, last_offset_delta=0))
    with pytest.raises(CorruptRecordError):
        decode_batch(_seal(payload, record_count=3, last_offset_delta=2))
    with pytest.raises(CorruptRecordError, match="negative record count"):
        decode_batch(_seal(payload, record_count=-1, last_offset_delta=0))


def test_huge_record_count_with_little_data_fails_fast() -> None:
    payload = _one_record_payload(b"\x00\x00\x00\x01\x01\x00")
    with pytest.raises(CorruptRecordError):
        decode_batch(_seal(payload, record_count=2**31 - 1, last_offset_delta=0))


def test_corrupt_compressed_payload_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_batch(_seal(b"not zstd at all", record_count=1, last_offset_delta=0, attributes=Codec.ZSTD))


# --- iter_batches -------------------------------------------------------------------------------


def _three_batches() -> tuple[bytes, list[int]]:
    batches = [
        encode_batch(_simple_records(2), base_offset=0, base_timestamp=0),
        encode_batch(_simple_records(3), base_offset=2, base_timestamp=0, compression=Codec.GZIP),
        encode_batch(_simple_records(1), base_offset=5, base_timestamp=0),
    ]
    starts = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    return b"".join(batches), starts


def test_iter_batches_walks_whole_batches() -> None:
    buffer, starts = _three_batches()
    walked = list(iter_batches(buffer))
    assert [pos for pos, _ in walked] == starts
    assert [header.base_offset for _, header in walked] == [0, 2, 5]


def test_iter_batches_stops_quietly_at_any_truncated_tail() -> None:
    buffer, starts = _three_batches()
    for cut in range(len(buffer) + 1):
        complete = [
            start for start, end in zip(starts, [*starts[1:], len(buffer)], strict=True) if end <= cut
        ]
        assert [pos for pos, _ in iter_batches(buffer[:cut])] == complete


def test_iter_batches_rejects_a_corrupt_length_and_old_magic() -> None:
    buffer = bytearray(_three_batches()[0])
    struct.pack_into(">i", buffer, 8, 10)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buffer))
    buffer = bytearray(_three_batches()[0])
    buffer[16] = 1
    with pytest.raises(KafkaError) as error:
        list(iter_batches(buffer))
    assert error.value.code == ErrorCode.UNSUPPORTED_VERSION


# --- validate_batches -----------------------------------------------------------------------------


def _producer_batch(**overrides: object) -> bytes:
    arguments: dict = {"base_timestamp": 0, "producer_id": 7, "producer_epoch": 0, "base_sequence": 0}
    arguments.update(overrides)
    return encode_batch(_simple_records(3), **arguments)


def _validation_error(buffer: bytes, max_batch_bytes: int = 1_000_000) -> KafkaError:
    with pytest.raises(KafkaError) as error:
        validate_batches(buffer, max_batch_bytes=max_batch_bytes)
    return error.value


def test_validate_accepts_producer_batches() -> None:
    buffer = _producer_batch() + _producer_batch(compression=Codec.LZ4, base_sequence=3)
    headers = validate_batches(buffer, max_batch_bytes=1_000_000)
    assert [(h.record_count, h.compression) for h in headers] == [(3, Codec.NONE), (3, Codec.LZ4)]


def test_validate_never_decompresses_nor_reads_records(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_: object) -> None:
        raise AssertionError("the produce path must not touch records")

    monkeypatch.setattr(records_module, "decompress", forbidden)
    monkeypatch.setattr(records_module, "_read_record", forbidden)
    payload = compress(Codec.ZSTD, b"\x00" * 10)
    # Garbage records under a valid CRC pass: validation is about the batch frame only.
    garbage = _seal(payload, record_count=3, last_offset_delta=2, attributes=Codec.ZSTD)
    assert validate_batches(_producer_batch() + garbage, max_batch_bytes=1_000_000)[1].record_count == 3


def test_validate_empty_buffer_is_corrupt() -> None:
    assert _validation_error(b"").code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("garbage", [b"\x00", b"\x00" * 16, b"\x00" * 40, b"\x00" * 200])
def test_validate_trailing_garbage_is_corrupt(garbage: bytes) -> None:
    assert _validation_error(_producer_batch() + garbage).code == ErrorCode.CORRUPT_MESSAGE


def test_validate_truncated_batch_is_corrupt() -> None:
    batch = _producer_batch()
    for cut in (1, 12, 30, 61, len(batch) - 1):
        assert _validation_error(batch[:cut]).code == ErrorCode.CORRUPT_MESSAGE


def test_validate_batch_length_below_minimum_is_corrupt() -> None:
    batch = bytearray(_producer_batch())
    struct.pack_into(">i", batch, 8, 40)
    assert _validation_error(bytes(batch)).code == ErrorCode.CORRUPT_MESSAGE


def test_validate_oversized_batch_is_message_too_large() -> None:
    batch = _producer_batch()
    assert validate_batches(batch, max_batch_bytes=len(batch))
    error = _validation_error(batch, max_batch_bytes=len(batch) - 1)
    assert error.code == ErrorCode.MESSAGE_TOO_LARGE


def test_validate_bad_crc_is_corrupt() -> None:
    batch = bytearray(_producer_batch())
    batch[30] ^= 0xFF  # inside the CRC-covered header
    assert _validation_error(bytes(batch)).code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("magic", [0, 1])
def test_validate_old_magic_is_unsupported_version(magic: int) -> None:
    batch = bytearray(_producer_batch())
    batch[16] = magic
    error = _validation_error(bytes(batch))
    assert error.code == ErrorCode.UNSUPPORTED_VERSION
    assert error.message == "message format v0/v1 is not supported"
    # A real v0 message is shorter than a v2 header: offset, size, crc, magic, attributes, key, value.
    short_v0 = struct.pack(">qiIbbii", 0, 14, 0, 0, 0, -1, -1)
    assert _validation_error(short_v0).code == ErrorCode.UNSUPPORTED_VERSION


def test_validate_unknown_magic_is_corrupt() -> None:
    batch = bytearray(_producer_batch())
    batch[16] = 7
    assert _validation_error(bytes(batch)).code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize(
    ("record_count", "last_offset_delta"),
    [(3, 1), (3, 3), (0, -1), (0, 0)],
)
def test_validate_count_and_offset_range_must_agree(record_count: int, last_offset_delta: int) -> None:
    batch = _seal(b"", record_count=record_count, last_offset_delta=last_offset_delta)
    assert _validation_error(batch).code == ErrorCode.INVALID_RECORD


def test_validate_negative_record_count_is_corrupt() -> None:
    batch = _seal(b"", record_count=-1, last_offset_delta=-2)
    assert _validation_error(batch).code == ErrorCode.CORRUPT_MESSAGE


def test_validate_rejects_control_batches_from_clients_only() -> None:
    marker = encode_end_txn_batch(
        commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=1, timestamp=0
    )
    assert _validation_error(marker).code == ErrorCode.INVALID_RECORD
    assert validate_batches(marker, max_batch_bytes=1000, from_client=False)[0].is_control


def test_validate_idempotent_batch_needs_a_sequence() -> None:
    assert _validation_error(_producer_batch(base_sequence=-1)).code == ErrorCode.INVALID_RECORD
    assert validate_batches(_producer_batch(producer_id=-1, base_sequence=-1), max_batch_bytes=10_000)


def test_validate_unknown_codec_is_unsupported_compression_type() -> None:
    batch = _seal(b"", record_count=1, last_offset_delta=0, attributes=6)
    assert _validation_error(batch).code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# --- in-place rewrites ----------------------------------------------------------------------------


def test_assign_base_offset_and_leader_epoch_keep_the_crc_valid() -> None:
    batch = bytearray(encode_batch(_simple_records(3), base_timestamp=0, compression=Codec.SNAPPY))
    crc_before = parse_batch_header(batch).crc
    assign_base_offset(batch, 0, 1_000_000)
    set_partition_leader_epoch(batch, 0, 9)
    header, decoded = decode_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.crc) == (1_000_000, 9, crc_before)
    assert header.last_offset == 1_000_002
    assert [record_offset(header, r) for r in decoded] == [1_000_000, 1_000_001, 1_000_002]


def test_assign_base_offset_at_a_position() -> None:
    first = encode_batch(_simple_records(1), base_timestamp=0)
    buffer = bytearray(first + encode_batch(_simple_records(2), base_timestamp=0))
    assign_base_offset(buffer, len(first), 77)
    assert [h.base_offset for _, h in iter_batches(buffer)] == [0, 77]
    validate_batches(buffer, max_batch_bytes=10_000)


def test_set_max_timestamp_for_log_append_time_refreshes_the_crc() -> None:
    batch = bytearray(encode_batch(_simple_records(3), base_timestamp=100))
    set_max_timestamp(batch, 0, 5_000, log_append_time=True)
    header, decoded = decode_batch(batch)
    assert header.is_log_append_time
    assert [record_timestamp(header, r) for r in decoded] == [5_000, 5_000, 5_000]
    set_max_timestamp(batch, 0, 120, log_append_time=False)
    header, decoded = decode_batch(batch)
    assert not header.is_log_append_time
    assert [record_timestamp(header, r) for r in decoded] == [100, 110, 120]


# --- control batches ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_key_round_trip(kind: ControlRecordType) -> None:
    key = encode_control_key(kind)
    assert key == struct.pack(">hh", 0, kind)
    assert decode_control_key(key) is kind


def test_control_key_unknown_type_and_malformed_keys() -> None:
    assert decode_control_key(struct.pack(">hh", 0, 2)) is ControlRecordType.UNKNOWN
    assert decode_control_key(struct.pack(">hh", 1, 1)) is ControlRecordType.COMMIT  # newer version
    for malformed in (None, b"\x00\x00\x00", struct.pack(">hh", -1, 0)):
        with pytest.raises(CorruptRecordError):
            decode_control_key(malformed)


def test_end_txn_batch_round_trip() -> None:
    batch = encode_end_txn_batch(
        commit=False, producer_id=9, producer_epoch=2, coordinator_epoch=4, timestamp=1234, base_offset=50
    )
    header, (marker,) = decode_batch(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_offset) == (9, 2, 50)
    assert decode_control_key(marker.key) is ControlRecordType.ABORT
    assert decode_end_txn_marker(marker.value) == 4
    with pytest.raises(CorruptRecordError):
        decode_end_txn_marker(b"\x00\x00")


def test_kafka_python_reads_our_control_batch() -> None:
    batch = encode_end_txn_batch(
        commit=True, producer_id=9, producer_epoch=2, coordinator_epoch=4, timestamp=1
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.is_control_batch and theirs.is_transactional
    (control,) = list(theirs)
    assert control.type == ControlRecordType.COMMIT
