"""The column-at-a-time Avro reader (sluice.pipeline.avro_columns) against fastavro's record-at-a-time one:
same rows for any records of the schemas it covers, and a payload it cannot read cleanly still ends in the
general path's error naming the record (or a null column when permissive). Pure: no broker, no registry."""

from __future__ import annotations

import datetime
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from registry_codec_helpers import avro_codec
from registry_codec_helpers import avro_framed as _framed
from registry_codec_helpers import where as _where

pytest.importorskip("pyspark")

import pyarrow as pa

from sluice.client.schema_framing import frame
from sluice.client.schema_registry import parsed_avro
from sluice.pipeline import avro_columns
from sluice.pipeline.formats import ColumnCodec, UndecodableRecordError

ADDRESS = {
    "type": "record",
    "name": "Address",
    "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["int", "null"]}],
}
COVERED = {
    "type": "record",
    "name": "Everything",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int"},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "amount", "type": "double"},
        {"name": "name", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 3}},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "ship_to", "type": ["null", ADDRESS], "default": None},
        {"name": "bill_to", "type": "Address"},  # a named type used a second time, by name
        {"name": "again", "type": ["null", "Status"], "default": None},
    ],
}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_ADDRESSES = st.fixed_dictionaries({"city": st.text(max_size=8), "zip": st.none() | _INT32})
_RECORDS = st.fixed_dictionaries(
    {
        "id": _INT64,
        "n": _INT32,
        "ok": st.booleans(),
        "ratio": st.floats(width=32, allow_nan=False),
        "amount": st.floats(allow_nan=False),
        "name": st.text(max_size=20),
        "blob": st.binary(max_size=20),
        "status": st.sampled_from(["NEW", "PAID", "SHIPPED"]),
        "hash": st.binary(min_size=3, max_size=3),
        "placed": st.integers(-(10**12), 10**13).map(lambda ms: _EPOCH + datetime.timedelta(milliseconds=ms)),
        "seen": st.integers(-(10**15), 10**16).map(lambda us: _EPOCH + datetime.timedelta(microseconds=us)),
        "local": st.integers(0, 10**13).map(
            lambda ms: datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)
        ),
        "day": st.dates(),
        "at": st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
        "ref": st.uuids().map(str),
        "note": st.none() | st.text(max_size=5),
        "ship_to": st.none() | _ADDRESSES,
        "bill_to": _ADDRESSES,
        "again": st.none() | st.sampled_from(["NEW", "PAID"]),
    }
)


def _codec(schema: dict, permissive: bool = False) -> ColumnCodec:
    return avro_codec(schema, permissive=permissive)


def _vector_reader(codec: ColumnCodec) -> avro_columns.ColumnReader | None:
    return avro_columns.column_reader(parsed_avro(codec.reader), codec.arrow_type)


def test_schemas_with_arrays_maps_general_unions_or_decimals_are_left_to_fastavro() -> None:
    assert _vector_reader(_codec(COVERED)) is not None
    for field_type in (
        {"type": "array", "items": "long"},
        {"type": "map", "values": "long"},
        ["null", "string", "long"],
        ["int", "long"],
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
    ):
        schema = {"type": "record", "name": "R", "fields": [{"name": "f", "type": field_type}]}
        assert _vector_reader(_codec(schema)) is None, field_type


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.none() | _RECORDS, min_size=1, max_size=12), offset=st.integers(0, 2))
def test_column_reader_gives_the_rows_fastavro_gives(records: list, offset: int) -> None:
    codec = _codec(COVERED)
    framed = [None if r is None else _framed(COVERED, [r])[0] for r in records]
    column = pa.array([b"\0\0\0\0\7\0"] * offset + framed, pa.binary()).slice(offset)  # offsets not at 0
    rows = avro_columns.read_payloads(_vector_reader(codec), *_payload_positions(column)).to_pylist()
    assert codec.decode_column(column, _where).to_pylist() == rows
    assert [r is None for r in rows] == [r is None for r in records]
    assert codec.decode(framed, _where).to_pylist() == rows


def _payload_positions(column: pa.Array) -> tuple:
    from sluice.pipeline.formats import _payloads_of_id

    found = _payloads_of_id(column, 7)
    assert found is not None
    return found


FLAT = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "n", "type": "int"},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "boolean"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "o", "type": ["null", "long"]},
    ],
}
_GOOD = {"n": 1, "s": "ok", "b": True, "e": "B", "o": 5}


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\x02\x04ok\x01\x02\x02\x0a\x00", id="a byte left over"),
        pytest.param(b"\x02\x04ok\x01\x02\x02", id="cut short"),
        pytest.param(b"\x02\x04o\xff\x01\x02\x02\x0a", id="invalid UTF-8"),
        pytest.param(b"\x02\x04ok\x01\x08\x02\x0a", id="enum index out of range"),
        pytest.param(b"\x02\x04ok\x01\x02\x06\x0a", id="union index out of range"),
        pytest.param(b"\x02\x7fok\x01\x02\x02\x0a", id="string length past the end"),
        pytest.param(b"\x02\x03ok\x01\x02\x02\x0a", id="negative string length"),
        pytest.param(b"\xff" * 11 + b"\x04ok\x01\x02\x02\x0a", id="varint longer than 10 bytes"),
        pytest.param(b"\x80\x80\x80\x80\x10\x04ok\x01\x02\x02\x0a", id="int past 32 bits"),
    ],
)
def test_a_bad_payload_still_names_its_record_or_reads_as_null_when_permissive(payload: bytes) -> None:
    good = _framed(FLAT, [_GOOD] * 4)
    assert bytes(good[0][5:]) == b"\x02\x04ok\x01\x02\x02\x0a"  # the layout the cases above spoil
    column = pa.array([*good[:2], frame(7, payload), *good[2:]], pa.binary())
    with pytest.raises(UndecodableRecordError, match="orders-0 offset 102"):
        _codec(FLAT).decode_column(column, _where)
    rows = _codec(FLAT, permissive=True).decode_column(column, _where).to_pylist()
    assert rows == [_GOOD, _GOOD, None, _GOOD, _GOOD]


def test_values_of_another_schema_id_or_unframed_go_the_general_way() -> None:
    good = _framed(FLAT, [_GOOD])[0]
    other = _framed(FLAT, [_GOOD], schema_id=8)[0]
    assert _payload_positions(pa.array([good, None], pa.binary()))[3].tolist() == [True, False]
    from sluice.pipeline.formats import _payloads_of_id

    assert _payloads_of_id(pa.array([good, other], pa.binary()), 7) is None
    assert _payloads_of_id(pa.array([good, b"\0\0"], pa.binary()), 7) is None
    with pytest.raises(UndecodableRecordError, match=r"orders-0 offset 101 .*not registry-framed"):
        _codec(FLAT).decode_column(pa.array([good, b"plain"], pa.binary()), _where)


def test_a_uuid_reads_as_its_text() -> None:
    value = uuid.UUID(int=5)
    schema = {
        "type": "record",
        "name": "U",
        "fields": [{"name": "u", "type": {"type": "string", "logicalType": "uuid"}}],
    }
    column = pa.array(_framed(schema, [{"u": value}]), pa.binary())
    assert _codec(schema).decode_column(column, _where).to_pylist() == [{"u": str(value)}]
