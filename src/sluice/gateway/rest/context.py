"""What every REST Proxy handler reaches: the cluster's producer, admin client and consumer instances."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from ..kafka import ClusterClient
from .admin import RestAdmin
from .instances import ConsumerInstances
from .schemas import SchemaFormats
from .v3_schema_data import SchemaData


@dataclass
class RestContext:
    producer: ClusterClient
    admin: RestAdmin
    instances: ConsumerInstances
    # The schema registry behind the avro and jsonschema formats, if one is configured.
    schemas: SchemaFormats | None = None
    # v3's schema'd keys and values, through `schemas`.
    schema_data: SchemaData | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.use_schemas(self.schemas)

    def use_schemas(self, schemas: SchemaFormats | None) -> None:
        self.schemas = schemas
        self.schema_data = SchemaData(schemas) if schemas is not None else None


CONTEXT = web.AppKey("rest_context", RestContext)
# The largest request body accepted (aiohttp enforces it for read(); streamed bodies check it themselves).
MAX_BODY_BYTES = web.AppKey("rest_max_body_bytes", int)


def context_of(request: web.Request) -> RestContext:
    return request.app[CONTEXT]
