"""Typed Spark columns -> registry-framed bytes, for the sink.

On the driver, :func:`writer_schema` picks the schema a column is written with: a pinned
version of the subject (``valueSchemaVersion``), or one derived from the column's Spark type and
registered under the subject (TopicNameStrategy ``<topic>-value`` unless ``valueSubject`` names
another; registering the same schema again returns its id, so restarts add no version). Tasks get
the resulting :class:`ColumnEncoder` pickled and never call the registry.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.types import DataType, StructType

from sluice.client import schema_registry as schemas
from sluice.client.schema_framing import frame
from sluice.client.schema_registry import AVRO, JSON, PROTOBUF, RegistrySchema
from sluice.pipeline.options import PipelineOptionError, RegistryConnection


def derived_schema_text(schema_type: str, data_type: DataType, record_name: str) -> str:
    """The schema text a column of ``data_type`` is registered with."""
    if schema_type == AVRO:
        from sluice.pipeline.avro_spark import avro_schema_for

        return json.dumps(avro_schema_for(data_type, record_name))
    if schema_type == JSON:
        from sluice.pipeline.jsonschema_spark import json_schema_for

        return json.dumps(
            {"$schema": "http://json-schema.org/draft-07/schema#", **json_schema_for(data_type)}
        )
    if schema_type == PROTOBUF:
        from sluice.pipeline.protobuf_text import proto_file_for

        if not isinstance(data_type, StructType):
            raise PipelineOptionError("writing Protobuf needs a struct column (a message)")
        return proto_file_for(data_type, record_name)
    raise PipelineOptionError(f"unknown schema type {schema_type}")


def writer_schema(
    connection: RegistryConnection,
    schema_type: str,
    subject: str,
    version: int | None,
    pinned: bool,
    data_type: DataType,
    record_name: str,
) -> RegistrySchema:
    """Driver side: the registered schema the column is written with."""
    if pinned:
        schema = schemas.by_subject(connection, subject, version)
        if schema.schema_type != schema_type:
            raise PipelineOptionError(
                f"subject {subject} version {schema.version} is {schema.schema_type}, not {schema_type}"
            )
        return schema
    registered = schemas.register(
        connection, subject, schema_type, derived_schema_text(schema_type, data_type, record_name)
    )
    return schemas.by_id(connection, registered.schema_id)


@dataclass
class ColumnEncoder:
    """Encodes one column with a registered schema; picklable (derived parts rebuilt per process)."""

    side: str
    schema: RegistrySchema
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state

    def encode(self, column: pa.Array) -> list[bytes | None]:
        rows = column.to_pylist()
        kind = self.schema.schema_type
        if kind == AVRO:
            write = self._avro_writer()
        elif kind == JSON:
            write = self._json_writer()
        else:
            write = self._protobuf_writer()
        out: list[bytes | None] = []
        for row in rows:
            if row is None:
                out.append(None)
                continue
            try:
                out.append(write(row))
            except (ValueError, TypeError, KeyError, AttributeError) as error:
                raise PipelineOptionError(
                    f"a {self.side} does not fit schema id {self.schema.schema_id} "
                    f"(subject {self.schema.subject}): {error}; row {str(row)[:200]}"
                ) from None
        return out

    def _avro_writer(self) -> Callable[[Any], bytes]:
        if "avro" not in self._cache:
            import fastavro

            from sluice.pipeline.avro_spark import write_adapter

            parsed = schemas.parsed_avro(self.schema)
            adapter = write_adapter(parsed)
            schema_id = self.schema.schema_id

            def write(row: Any) -> bytes:
                buffer = io.BytesIO()
                fastavro.schemaless_writer(buffer, parsed, row if adapter is None else adapter(row))
                return frame(schema_id, buffer.getvalue())

            self._cache["avro"] = write
        return self._cache["avro"]

    def _json_writer(self) -> Callable[[Any], bytes]:
        from sluice.pipeline.jsonschema_spark import to_json_value

        schema_id = self.schema.schema_id
        return lambda row: frame(schema_id, json.dumps(to_json_value(row), separators=(",", ":")).encode())

    def _protobuf_writer(self) -> Callable[[Any], bytes]:
        if "protobuf" not in self._cache:
            from sluice.pipeline.formats import message_class
            from sluice.pipeline.protobuf_text import fill_message

            message_class = message_class(self.schema, (0,))
            schema_id = self.schema.schema_id

            def write(row: Any) -> bytes:
                message = message_class()
                fill_message(message, row)
                return frame(schema_id, message.SerializeToString(), (0,))

            self._cache["protobuf"] = write
        return self._cache["protobuf"]
