"""Registry-framed keys and values <-> typed Spark columns (Avro, Protobuf, JSON Schema).

The framing is Confluent's: magic byte 0, the schema id as 4 big-endian bytes, then the payload;
a Protobuf payload starts with the message-index array (zigzag varints; one 0 byte means [0]).

A :class:`ColumnCodec` is built on the driver from the registry's latest or pinned schema of a
subject (the *reader* schema: it fixes the column's Spark type) and shipped to executors, which
decode whole Arrow columns at a time:

- Avro: values framed with the reader schema's id are read column at a time with numpy
  (avro_columns) when the schema is one it covers. Otherwise records of one schema id are
  concatenated into one Avro container block and read by fastavro's C reader in one go (about 30% less CPU than a ``schemaless_reader`` call per
  record); records written with another id are read with that writer schema resolved to the
  reader schema (Avro's schema resolution: new fields take their defaults, removed ones are
  dropped). A struct column is then built field by field rather than from dicts.
- Protobuf: the writer's message class (by id and message index), converted per record, then
  fields matched by name to the reader's struct.
- JSON Schema: ``json.loads`` and fields matched by name (not validated on read).

A record that cannot be decoded fails the task with :class:`UndecodableRecordError` naming topic,
partition and offset; with ``mode=PERMISSIVE`` its column is null instead.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np  # comes with pandas, which the pipeline extra requires
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from sluice.client import schema_registry as schemas
from sluice.client.schema_framing import (
    UndecodableRecordError,
    decode_message_index,
    is_framed,
    split_frame,
    zigzag,
)
from sluice.client.schema_registry import AVRO, JSON, PROTOBUF, RegistrySchema
from sluice.pipeline.options import PipelineOptionError, RegistryConnection, RegistryFormats

Located = Callable[[int], str]


def spark_type_of(schema: RegistrySchema) -> DataType:
    """The Spark type a column of this schema reads as (struct for records and messages)."""
    if schema.schema_type == AVRO:
        from sluice.pipeline import avro_spark

        return avro_spark.spark_type(schemas.parsed_avro(schema))[0]
    if schema.schema_type == PROTOBUF:
        from sluice.pipeline import protobuf_spark

        return protobuf_spark.spark_type(message_class(schema, (0,)).DESCRIPTOR)
    if schema.schema_type == JSON:
        from sluice.pipeline import jsonschema_spark

        return jsonschema_spark.spark_type(json.loads(schema.text))
    raise UndecodableRecordError(f"unknown schema type {schema.schema_type}")


def message_class(schema: RegistrySchema, index: Sequence[int]) -> type:
    from sluice.registry.formats import parse_schema, protobuf_message_class

    parsed = parse_schema(PROTOBUF, schema.text, dict(schema.references))
    return protobuf_message_class(parsed, tuple(index))


def project(data_type: DataType) -> Callable[[Any], Any] | None:
    """Match a decoded value to ``data_type`` by field name (missing -> null, extra dropped)."""
    if isinstance(data_type, StructType):
        fields = [(f.name, project(f.dataType)) for f in data_type.fields]

        def pick(value: Any) -> Any:
            if value is None:
                return None
            return {n: (p(value.get(n)) if p is not None else value.get(n)) for n, p in fields}

        return pick
    if isinstance(data_type, ArrayType):
        item = project(data_type.elementType)
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    if isinstance(data_type, MapType):
        value = project(data_type.valueType)
        return (
            None if value is None else (lambda v: None if v is None else {k: value(x) for k, x in v.items()})
        )
    return None


@dataclass
class ColumnCodec:
    """How one column (key or value) is read: registry, reader schema, Spark type, error mode.

    Picklable; what it derives (parsed schemas, message classes, writer schemas by id) is built
    lazily in each process and not pickled.
    """

    side: str  # "key" | "value"
    connection: RegistryConnection
    reader: RegistrySchema
    permissive: bool = False
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state

    @property
    def spark_type(self) -> DataType:
        if "spark_type" not in self._cache:
            self._cache["spark_type"] = spark_type_of(self.reader)
        return self._cache["spark_type"]

    @property
    def arrow_type(self) -> pa.DataType:
        if "arrow_type" not in self._cache:
            self._cache["arrow_type"] = to_arrow_type(self.spark_type, timezone="UTC")
        return self._cache["arrow_type"]

    def _writer(self, schema_id: int) -> RegistrySchema:
        if schema_id == self.reader.schema_id:
            return self.reader
        key = ("writer", schema_id)
        if key not in self._cache:
            writer = schemas.by_id(self.connection, schema_id)
            if writer.schema_type != self.reader.schema_type:
                raise UndecodableRecordError(
                    f"schema id {schema_id} is {writer.schema_type}, but the {self.side} is read as "
                    f"{self.reader.schema_type} (subject {self.reader.subject})"
                )
            self._cache[key] = writer
        return self._cache[key]

    def decode(self, values: Sequence[bytes | None], located: Located) -> pa.Array:
        """One Arrow array of the column's type; ``located(i)`` names record i for errors."""
        decoded: list[Any] = [None] * len(values)
        runs = self._runs(values, decoded, located)
        kind = self.reader.schema_type
        for schema_id, indexes, payloads in runs:
            try:
                if kind == AVRO:
                    results = self._decode_avro(schema_id, payloads)
                elif kind == PROTOBUF:
                    results = self._decode_protobuf(schema_id, payloads)
                else:
                    results = self._decode_json(schema_id, payloads)
            except Exception as error:  # find the record to blame, one at a time
                results = self._decode_one_by_one(schema_id, indexes, payloads, located, error)
            for index, result in zip(indexes, results, strict=True):
                decoded[index] = result
        return self._to_arrow_blaming(decoded, located)

    def _to_arrow_blaming(self, decoded: list[Any], located: Located) -> pa.Array:
        """A value the reader accepted but the column type cannot hold (an Avro int past 32 bits, say)
        is blamed on its record like any undecodable one."""
        try:
            return self._to_arrow(decoded)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            for index, value in enumerate(decoded):
                if value is None:
                    continue
                try:
                    self._to_arrow([value])
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as single:
                    self._undecodable(index, located, single)
                    decoded[index] = None
            return self._to_arrow(decoded)

    def _runs(
        self, values: Sequence[bytes | None], decoded: list[Any], located: Located
    ) -> list[tuple[int, list[int], list[memoryview]]]:
        """Consecutive records of one schema id (in practice one run per batch)."""
        first = values[0] if values else None
        if first is not None and is_framed(first):
            head = first[:5]
            if all(
                [v is not None and v.startswith(head) for v in values]
            ):  # one id, no nulls: no Python loop
                return [(int.from_bytes(head[1:], "big"), list(range(len(values))), [v[5:] for v in values])]
        runs: list[tuple[int, list[int], list[memoryview]]] = []
        for index, data in enumerate(values):
            if data is None:
                continue
            try:
                schema_id, payload = split_frame(data)
            except UndecodableRecordError as error:
                self._undecodable(index, located, error)
                continue
            if not runs or runs[-1][0] != schema_id:
                runs.append((schema_id, [], []))
            runs[-1][1].append(index)
            runs[-1][2].append(payload)
        return runs

    def _undecodable(self, index: int, located: Located, error: Exception) -> None:
        if not self.permissive:
            raise UndecodableRecordError(
                f"cannot decode the {self.side} of {located(index)} as {self.reader.schema_type} "
                f"(subject {self.reader.subject}, schema id {self.reader.schema_id}): {error}. "
                "Option mode=PERMISSIVE reads such records with a null column instead"
            ) from None

    def _decode_one_by_one(
        self,
        schema_id: int,
        indexes: list[int],
        payloads: list[memoryview],
        located: Located,
        error: Exception,
    ) -> list[Any]:
        results: list[Any] = []
        for index, payload in zip(indexes, payloads, strict=True):
            try:
                if self.reader.schema_type == AVRO:
                    results.append(self._decode_avro_single(schema_id, payload))
                elif self.reader.schema_type == PROTOBUF:
                    results.extend(self._decode_protobuf(schema_id, [payload]))
                else:
                    results.extend(self._decode_json(schema_id, [payload]))
            except schemas.RegistryLookupError as lookup:
                if not lookup.not_found:
                    raise  # the registry is down: no record is to blame, PERMISSIVE or not
                self._undecodable(index, located, lookup)
                results.append(None)
            except Exception as single:
                self._undecodable(index, located, single)
                results.append(None)
        return results

    # ----- Avro -----

    def _avro(self, schema_id: int) -> tuple[Any, Any, bytes, Callable[[Any], Any] | None]:
        """(writer schema, reader schema or None, container header, read adapter) for an id.

        Dates and timestamps are read as numbers (see ``_to_arrow``), for writer and reader alike.
        """
        key = ("avro", schema_id)
        if key not in self._cache:
            import fastavro

            from sluice.pipeline import avro_spark

            numeric = avro_spark.without_time_logical_types
            reader = schemas.parsed_avro(self.reader, numeric)
            writer = (
                reader
                if schema_id == self.reader.schema_id
                else schemas.parsed_avro(self._writer(schema_id), numeric)
            )
            header = io.BytesIO()
            fastavro.writer(header, writer, [], codec="null")
            self._cache[key] = (
                writer,
                None if writer is reader else reader,
                header.getvalue(),
                avro_spark.read_adapter(reader),
            )
        return self._cache[key]

    def _decode_avro(self, schema_id: int, payloads: list[memoryview]) -> list[Any]:
        return self._decode_avro_body(schema_id, b"".join(payloads), len(payloads))

    def _decode_avro_body(self, schema_id: int, body: bytes, count: int) -> list[Any]:
        """``count`` concatenated payloads of one schema id, read as one Avro container block."""
        import fastavro

        _writer, reader, header, adapter = self._avro(schema_id)
        sync = header[-16:]
        block = header + zigzag(count) + zigzag(len(body)) + body + sync
        records = list(fastavro.reader(io.BytesIO(block), reader_schema=reader))
        if len(records) != count:
            raise UndecodableRecordError(f"{count} payloads decoded as {len(records)} records")
        return records if adapter is None else [adapter(r) for r in records]

    def decode_column(self, column: pa.Array, located: Located) -> pa.Array:
        """Like :meth:`decode`, from Arrow's binary column; Avro of one id without nulls never leaves Arrow
        and numpy until fastavro reads the block (no bytes object per record)."""
        if self.reader.schema_type == AVRO and len(column):
            vectorised = self._decode_avro_columns(column)
            if vectorised is not None:
                return vectorised
        if self.reader.schema_type == AVRO and len(column) and not column.null_count:
            framed = _one_id_payloads(column)
            if framed is not None:
                schema_id, body = framed
                try:
                    return self._to_arrow(self._decode_avro_body(schema_id, body, len(column)), no_nulls=True)
                except Exception:
                    pass
        return self.decode(column.to_pylist(), located)

    def _decode_avro_columns(self, column: pa.Array) -> pa.Array | None:
        """The column read field by field with numpy (see avro_columns) when every value is null or framed
        with the reader schema's id and the schema is one it covers; None otherwise."""
        from sluice.pipeline import avro_columns

        if "vector_reader" not in self._cache:
            parsed = schemas.parsed_avro(self.reader)
            self._cache["vector_reader"] = avro_columns.column_reader(parsed, self.arrow_type)
        reader = self._cache["vector_reader"]
        payloads = None if reader is None else _payloads_of_id(column, self.reader.schema_id)
        if payloads is None:
            return None
        try:
            built = avro_columns.read_payloads(reader, *payloads)
        except avro_columns.NotVectorisable:
            return None
        return built

    def _decode_avro_single(self, schema_id: int, payload: memoryview) -> Any:
        import fastavro

        writer, reader, _header, adapter = self._avro(schema_id)
        stream = io.BytesIO(payload)
        record = fastavro.schemaless_reader(stream, writer, reader)
        if stream.tell() != len(payload):
            raise UndecodableRecordError(f"{len(payload) - stream.tell()} bytes left after the record")
        return record if adapter is None else adapter(record)

    # ----- Protobuf -----

    def _decode_protobuf(self, schema_id: int, payloads: list[memoryview]) -> list[Any]:
        results = []
        for payload in payloads:
            index, body = decode_message_index(payload)
            message_class, convert = self._protobuf(schema_id, index)
            message = message_class()
            message.ParseFromString(bytes(body))
            results.append(convert(message))
        return results

    def _protobuf(self, schema_id: int, index: tuple[int, ...]) -> tuple[type, Callable[[Any], Any]]:
        key = ("protobuf", schema_id, index)
        if key not in self._cache:
            from sluice.pipeline import protobuf_spark

            writer_class = message_class(self._writer(schema_id), index)
            to_row = protobuf_spark.row_converter(writer_class.DESCRIPTOR)  # type: ignore[attr-defined]
            same = schema_id == self.reader.schema_id and index == (0,)
            projection = None if same else project(self.spark_type)
            convert = to_row if projection is None else (lambda m: projection(to_row(m)))
            self._cache[key] = (writer_class, convert)
        return self._cache[key]

    # ----- JSON Schema -----

    def _decode_json(self, schema_id: int, payloads: list[memoryview]) -> list[Any]:
        self._writer(schema_id)  # an unknown id fails like in the other formats
        if "json" not in self._cache:
            from sluice.pipeline import jsonschema_spark

            self._cache["json"] = jsonschema_spark.shaper(self.spark_type)
        shape = self._cache["json"]
        return [shape(json.loads(bytes(p))) for p in payloads]

    # ----- to Arrow -----

    def _read_type(self) -> pa.DataType:
        """The Arrow type values are built with: Avro timestamps in ms stay ms until the final cast."""
        if "read_type" not in self._cache:
            read_type = self.arrow_type
            if self.reader.schema_type == AVRO:
                from sluice.pipeline import avro_spark

                read_type = avro_spark.arrow_read_type(schemas.parsed_avro(self.reader), read_type)
            self._cache["read_type"] = read_type
        return self._cache["read_type"]

    def _to_arrow(self, decoded: list[Any], no_nulls: bool = False) -> pa.Array:
        read_type = self._read_type()
        built = self._build(decoded, read_type, no_nulls)
        return built if read_type == self.arrow_type else _cast_fields(built, self.arrow_type)

    @staticmethod
    def _build(decoded: list[Any], arrow_type: pa.DataType, no_nulls: bool = False) -> pa.Array:
        if not pa.types.is_struct(arrow_type):
            return pa.array(decoded, arrow_type)
        # Field by field: pa.array(list of dicts) looks every key up per record, ~4x slower.
        if not no_nulls and None in decoded:
            mask = pa.array([d is None for d in decoded])
            columns = [
                pa.array([None if d is None else d[f.name] for d in decoded], f.type) for f in arrow_type
            ]
            return pa.StructArray.from_arrays(columns, fields=list(arrow_type), mask=mask)
        columns = [pa.array([d[f.name] for d in decoded], f.type) for f in arrow_type]
        if not columns:
            return pa.array(decoded, arrow_type)
        return pa.StructArray.from_arrays(columns, fields=list(arrow_type))


def _one_id_payloads(column: pa.Array) -> tuple[int, bytes] | None:
    """(schema id, payloads concatenated without their 5-byte headers) when every value is framed with
    the same id; None otherwise (the general path sorts it out)."""
    if not pa.types.is_binary(column.type):
        return None
    _validity, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=len(column) + 1, offset=column.offset * 4)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    starts = offsets[:-1]
    if (np.diff(offsets) < _HEADER_BYTES).any():
        return None
    header_positions = starts[:, None] + np.arange(_HEADER_BYTES)
    headers = data[header_positions]
    if headers[0, 0] != 0 or not (headers == headers[0]).all():
        return None
    first, last = int(offsets[0]), int(offsets[-1])
    keep = np.ones(last - first, dtype=bool)
    keep[header_positions - first] = False
    return int.from_bytes(headers[0, 1:].tobytes(), "big"), data[first:last][keep].tobytes()


def _cast_fields(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array.cast(target)``, struct by struct: Arrow refuses to cast a struct whose required field
    holds nulls, which it does under a null parent (a tombstone, a null optional record)."""
    if not pa.types.is_struct(target) or not pa.types.is_struct(array.type) or array.offset:
        return array.cast(target)
    children = [_cast_fields(array.field(i), field.type) for i, field in enumerate(target)]
    if not children:
        return array.cast(target)
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


def _payloads_of_id(
    column: pa.Array, schema_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(data, payload starts, payload ends, non-null rows or None for all) when every non-null value is
    framed with ``schema_id``; None otherwise."""
    if not pa.types.is_binary(column.type):
        return None
    _validity, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=len(column) + 1, offset=column.offset * 4)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    present = column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else None
    framed = ends - starts >= _HEADER_BYTES
    if not (framed.all() if present is None else framed[present].all()):
        return None
    expected = np.frombuffer(b"\0" + schema_id.to_bytes(4, "big"), np.uint8)
    header_starts = starts if present is None else starts[present]
    if len(data) < _HEADER_BYTES and len(header_starts):
        return None
    if not (data[header_starts[:, None] + np.arange(_HEADER_BYTES)] == expected).all():
        return None
    payload_starts = (
        starts + _HEADER_BYTES if present is None else np.where(present, starts + _HEADER_BYTES, starts)
    )
    return data, payload_starts, ends, present


_HEADER_BYTES = 5
Codecs = tuple["ColumnCodec | None", "ColumnCodec | None"]


def resolve_codecs(formats: RegistryFormats | None) -> Codecs:
    """Driver side: the reader schema of the key and the value (the subject's latest or pinned version)."""
    if formats is None:
        return None, None
    found: list[ColumnCodec | None] = []
    for column in (formats.key, formats.value):
        if column is None:
            found.append(None)
            continue
        reader = schemas.by_subject(formats.connection, column.subject, column.version)
        if reader.schema_type != column.schema_type:
            raise PipelineOptionError(
                f"subject {column.subject} holds {reader.schema_type} schemas, but {column.side}Format asks for "
                f"{column.schema_type}"
            )
        codec = ColumnCodec(column.side, formats.connection, reader, formats.permissive)
        codec.spark_type  # noqa: B018 - fail on the driver, not in every task, if Spark cannot hold it
        found.append(codec)
    return found[0], found[1]


def column_types(codecs: Codecs) -> tuple[DataType | None, DataType | None]:
    return tuple(None if codec is None else codec.spark_type for codec in codecs)  # type: ignore[return-value]


def decode_batch(batch: pa.RecordBatch, codecs: Codecs, schema: pa.Schema) -> pa.RecordBatch:
    """A batch read from Kafka (binary key and value) with its framed columns decoded."""
    key_codec, value_codec = codecs
    if key_codec is None and value_codec is None:
        return batch
    topics, partitions, offsets = (batch.column(n) for n in ("topic", "partition", "offset"))

    def located(index: int) -> str:
        return f"{topics[index].as_py()}-{partitions[index].as_py()} offset {offsets[index].as_py()}"

    columns = dict(zip(batch.schema.names, batch.columns, strict=True))
    for name, codec in (("key", key_codec), ("value", value_codec)):
        if codec is not None:
            columns[name] = codec.decode_column(columns[name], located)
    return pa.RecordBatch.from_arrays([columns[n] for n in schema.names], schema=schema)
