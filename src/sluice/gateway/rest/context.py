"""What every REST Proxy handler reaches: the cluster's producer, admin client and consumer instances."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from ..batch_writer import BatchWriter
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
    # v2 produce's path where the cluster's settings allow it (else `producer` writes its records).
    writer: BatchWriter | None = None
    # v3's schema'd keys and values, through `schemas`.
    schema_data: SchemaData | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.use_schemas(self.schemas)

    def use_schemas(self, schemas: SchemaFormats | None) -> None:
        self.schemas = schemas
        self.schema_data = SchemaData(schemas) if schemas is not None else None


# The default cluster's: v2 serves it, as do v3 paths until their cluster id says otherwise.
CONTEXT = web.AppKey("rest_context", RestContext)
# Every cluster the gateway fronts, the default first: v3 names one by its Kafka cluster id.
CLUSTERS = web.AppKey("rest_clusters", list)
# The cluster a v3 request's path named (set by `v3_common.cluster_id`).
REQUEST_CLUSTER = "sluice_rest_cluster"
# The largest request body accepted (aiohttp enforces it for read(); streamed bodies check it themselves).
MAX_BODY_BYTES = web.AppKey("rest_max_body_bytes", int)


def context_of(request: web.Request) -> RestContext:
    """The context of the cluster the request's path named, or the default cluster's."""
    named: RestContext | None = request.get(REQUEST_CLUSTER)
    return named if named is not None else request.app[CONTEXT]
