"""The producer's batch writer: the same bytes as `encode_batch`, and read back by kafka-python's decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from sluice.protocol.compression import Codec
from sluice.protocol.plain_batch import batch_of, encode_plain_batch, encode_records, encode_values
from sluice.protocol.records import Record, decode_batch, encode_batch, validate_batches

NOW = 1_795_000_000_000

# Around 16 KiB the record lengths leave the encoder's table of small varints (made, not drawn: cheap).
long_payloads = st.integers(16_370, 16_400).map(
    lambda n: bytes(range(256)) * (n // 256) + b"\x07" * (n % 256)
)
payloads = st.one_of(st.none(), st.binary(max_size=300), long_payloads)
headers = st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=40))), max_size=3)
records = st.lists(st.tuples(payloads, payloads, headers), min_size=1, max_size=40)


def reference(batch: list, compression: int = Codec.NONE) -> bytes:
    return encode_batch(
        [Record(i, 0, key, value, list(hs)) for i, (key, value, hs) in enumerate(batch)],
        base_timestamp=NOW,
        compression=compression,
    )


@settings(max_examples=150, deadline=None)
@given(records)
def test_writes_what_encode_batch_writes(batch: list) -> None:
    assert encode_plain_batch(batch, NOW) == reference(batch)


@settings(max_examples=60, deadline=None)
@given(records)
def test_kafka_python_reads_every_record_back(batch: list) -> None:
    read = list(DefaultRecordBatch(encode_plain_batch(batch, NOW)))
    assert [(r.offset, r.key, r.value, [tuple(h) for h in r.headers]) for r in read] == [
        (i, key, value, [tuple(h) for h in hs]) for i, (key, value, hs) in enumerate(batch)
    ]
    assert {r.timestamp for r in read} == {NOW}


@pytest.mark.parametrize("codec", list(Codec))
def test_compressed_batches_decode_to_the_records(codec: Codec) -> None:
    batch = [(None, b"value %d" % i * 20, ()) for i in range(200)] + [(b"k", None, (("h", b"v"),))]
    written = encode_plain_batch(batch, NOW, codec)
    (header,) = validate_batches(written, max_batch_bytes=1 << 20)
    assert header.attributes & 0x07 == codec and header.record_count == len(batch)
    _, decoded = decode_batch(written)
    assert [(r.offset_delta, r.key, r.value, r.headers) for r in decoded] == [
        (i, key, value, list(hs)) for i, (key, value, hs) in enumerate(batch)
    ]


def test_the_common_record_and_the_general_one_agree_at_every_length_boundary() -> None:
    """Value lengths around the varint size steps (64, 8192) and the lookup table's end take both paths."""
    for length in (0, 1, 58, 59, 60, 63, 64, 65, 8185, 8190, 8191, 8192, 16_351, 16_352, 16_383, 16_384):
        batch = [(None, b"x" * length, ())] * 130  # offset deltas past the one-byte varints too
        assert encode_plain_batch(batch, NOW) == reference(batch), length


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        batch_of(b"".join(encode_records([])), 0, NOW)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.binary(max_size=300), long_payloads), min_size=1, max_size=40),
    st.sampled_from([0, 7, 16_370]),
)
def test_values_alone_encode_as_the_records_they_are(values: list[bytes], first: int) -> None:
    """Past the lookup tables (offset deltas from 16,370, values near 16 KiB) as well as within them."""
    assert encode_values(values, first) == encode_records([(None, value, ()) for value in values], first)
