"""Schema Registry look-ups shared by the pipeline and the console: schemas by id and by subject version.

confluent-kafka's ``SchemaRegistryClient`` does the HTTP and caches by id and by subject version;
one client per registry URL and process (the driver, every Python worker) is kept here. Every
fetched schema is flattened with its references (transitively) into a picklable
:class:`RegistrySchema`, so executors get the reader schema in the task and only ask the registry
for writer schemas of other ids they meet.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

AVRO, PROTOBUF, JSON = "AVRO", "PROTOBUF", "JSON"
_MAX_REFERENCE_DEPTH = 32


@dataclass(frozen=True)
class RegistryConnection:
    """Where the schema registry is: its URL and confluent-kafka client settings (TLS, basic auth)."""

    url: str
    settings: tuple[tuple[str, str], ...] = ()

    def client_config(self) -> dict[str, Any]:
        # Settings come as text (Spark options, CLI flags); the client wants numbers as int.
        config: dict[str, Any] = {k: int(v) if v.isdigit() else v for k, v in self.settings}
        return {**config, "url": self.url}

    def _secrets(self) -> list[str]:
        """The passwords and tokens in the URL's user info and the settings (never shown)."""
        found = []
        userinfo = self.url.partition("://")[2].partition("/")[0].rpartition("@")[0]
        if ":" in userinfo:
            found.append(userinfo.partition(":")[2])
        for key, value in self.settings:
            if key == "basic.auth.user.info" and ":" in value:
                found.append(value.partition(":")[2])
            elif key in _SECRET_SETTINGS:
                found.append(value)
        return [secret for secret in found if secret]

    def masked(self, text: str) -> str:
        """``text`` with every password or token of this connection replaced by ***, for errors and logs."""
        for secret in self._secrets():
            text = text.replace(secret, "***")
        return text

    def __repr__(self) -> str:
        keys = ", ".join(key for key, _ in self.settings)
        return self.masked(f"RegistryConnection({self.url!r}, settings: {keys or 'none'})")


_SECRET_SETTINGS = frozenset({"ssl.key.password", "bearer.auth.token", "bearer.auth.client.secret"})


class RegistryLookupError(ValueError):
    """The registry could not be reached, or does not have the subject, version or id asked for."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        # The registry answered 404: the data names something it does not have (not an outage).
        self.not_found = not_found


@dataclass(frozen=True)
class RegistrySchema:
    """A registered schema with every reference it needs, by reference name (flattened)."""

    schema_id: int
    schema_type: str
    text: str
    references: Mapping[str, str] = field(default_factory=dict)
    # Reference names in the order they must be parsed (a reference's own references first).
    reference_order: tuple[str, ...] = ()
    subject: str | None = None
    version: int | None = None


_clients: dict[RegistryConnection, Any] = {}
_clients_lock = threading.Lock()


def client(connection: RegistryConnection) -> Any:
    """This process's SchemaRegistryClient for ``connection`` (it caches schemas by id)."""
    with _clients_lock:
        found = _clients.get(connection)
        if found is None:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            try:
                found = _clients[connection] = SchemaRegistryClient(connection.client_config())
            except (ValueError, TypeError) as error:
                raise RegistryLookupError(f"schema registry settings are not valid: {error}") from None
        return found


def _failed(connection: RegistryConnection, what: str, error: Exception) -> RegistryLookupError:
    return RegistryLookupError(
        connection.masked(f"schema registry {connection.url}: {what} failed: {error}"),
        not_found=getattr(error, "http_status_code", None) == 404,
    )


def _flatten(connection: RegistryConnection, schema: Any, depth: int = 0) -> tuple[dict[str, str], list[str]]:
    """Texts of all references of ``schema``, transitively, and a parse order (dependencies first)."""
    texts: dict[str, str] = {}
    order: list[str] = []
    if depth > _MAX_REFERENCE_DEPTH:
        raise RegistryLookupError(f"schema references nest deeper than {_MAX_REFERENCE_DEPTH}")
    for reference in schema.references or []:
        if reference.name in texts:
            continue
        try:
            registered = client(connection).get_version(reference.subject, reference.version)
        except Exception as error:
            raise _failed(
                connection, f"reference {reference.name} ({reference.subject} v{reference.version})", error
            ) from None
        inner_texts, inner_order = _flatten(connection, registered.schema, depth + 1)
        for name in inner_order:
            if name not in texts:
                texts[name] = inner_texts[name]
                order.append(name)
        texts[reference.name] = registered.schema.schema_str
        order.append(reference.name)
    return texts, order


def _registry_schema(
    connection: RegistryConnection, schema_id: int, schema: Any, subject: str | None, version: int | None
) -> RegistrySchema:
    texts, order = _flatten(connection, schema)
    return RegistrySchema(
        schema_id=schema_id,
        schema_type=(schema.schema_type or AVRO).upper(),
        text=schema.schema_str,
        references=texts,
        reference_order=tuple(order),
        subject=subject,
        version=version,
    )


def by_id(connection: RegistryConnection, schema_id: int) -> RegistrySchema:
    try:
        schema = client(connection).get_schema(schema_id)
    except Exception as error:
        raise _failed(connection, f"schema id {schema_id}", error) from None
    return _registry_schema(connection, schema_id, schema, None, None)


def by_subject(connection: RegistryConnection, subject: str, version: int | None) -> RegistrySchema:
    """The subject's ``version``, or its latest when None."""
    try:
        if version is None:
            registered = client(connection).get_latest_version(subject)
        else:
            registered = client(connection).get_version(subject, version)
    except Exception as error:
        which = "latest version" if version is None else f"version {version}"
        raise _failed(connection, f"the {which} of subject {subject!r}", error) from None
    return _registry_schema(connection, registered.schema_id, registered.schema, subject, registered.version)


def register(connection: RegistryConnection, subject: str, schema_type: str, text: str) -> RegistrySchema:
    """Register ``text`` under ``subject`` (idempotent: the same schema keeps its id)."""
    from confluent_kafka.schema_registry import Schema

    try:
        schema_id = client(connection).register_schema(subject, Schema(text, schema_type))
    except Exception as error:
        raise _failed(connection, f"registering a schema under subject {subject!r}", error) from None
    return RegistrySchema(schema_id=schema_id, schema_type=schema_type, text=text, subject=subject)


def parsed_avro(schema: RegistrySchema, transform: Callable[[Any], Any] | None = None) -> Any:
    """fastavro's parsed form, with the named types of the references known.

    ``transform`` rewrites each JSON document (the schema's and its references') before parsing.
    """
    import fastavro

    def load(text: str) -> Any:
        document = json.loads(text)
        return document if transform is None else transform(document)

    named: dict[str, Any] = {}
    for name in schema.reference_order:
        fastavro.parse_schema(load(schema.references[name]), named_schemas=named)
    return fastavro.parse_schema(load(schema.text), named_schemas=named)
