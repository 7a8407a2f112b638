"""Registry-typed column codecs built without a registry (only the reader schema's own id is decoded)."""

from __future__ import annotations

import io
import json

import fastavro

from sluice.client.schema_framing import frame
from sluice.client.schema_registry import RegistrySchema
from sluice.pipeline.formats import ColumnCodec
from sluice.pipeline.options import RegistryConnection

NOWHERE = RegistryConnection("http://127.0.0.1:9")  # never asked: only the reader's own id is decoded


def avro_codec(schema: dict, schema_id: int = 7, permissive: bool = False) -> ColumnCodec:
    text = json.dumps(schema)
    return ColumnCodec(
        "value", NOWHERE, RegistrySchema(schema_id, "AVRO", text, subject="t-value"), permissive
    )


def avro_framed(schema: dict, records: list, schema_id: int = 7) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for record in records:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        out.append(frame(schema_id, buffer.getvalue()))
    return out


def where(index: int) -> str:
    return f"orders-0 offset {100 + index}"
