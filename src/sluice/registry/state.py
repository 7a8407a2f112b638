"""The registry's state, replayed from `_schemas` records (pure: no I/O, no clock).

`apply(key, value)` folds one record in; everything the REST API reads is a query on this object. Ids
are never reused: `next_id` is one more than the largest id in any SCHEMA record ever applied, deleted
or tombstoned ones included, or named by the max-id record written beside permanent deletes (which
outlives the deleted records' compaction). A SCHEMA record that would give an id already bound to a *different*
schema is ignored, as Confluent's reader ignores it: two writers racing (a split brain between
primaries) cannot make one id mean two schemas, and every replica ignores the same record.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from sluice.registry import records
from sluice.registry.records import Key, Reference, SchemaValue

log = logging.getLogger("sluice.registry")

DEFAULT_LEVEL = "BACKWARD"
DEFAULT_MODE = "READWRITE"


@dataclass(frozen=True)
class StoredSchema:
    """What an id names: the same for every subject/version registered with it."""

    schema_type: str
    text: str
    references: tuple[Reference, ...]


@dataclass
class Subject:
    versions: dict[int, SchemaValue] = field(default_factory=dict)

    def live(self) -> list[SchemaValue]:
        return [v for _, v in sorted(self.versions.items()) if not v.deleted]

    def all(self) -> list[SchemaValue]:
        return [v for _, v in sorted(self.versions.items())]


class RegistryState:
    def __init__(self) -> None:
        self.subjects: dict[str, Subject] = {}
        self.max_id = 0
        self.config: dict[str | None, str] = {}  # None: the global level
        self.mode: dict[str | None, str] = {}
        self.schemas: dict[int, StoredSchema] = {}
        # (subject, version) pairs registered with each id: what keeps an id alive.
        self._id_users: dict[int, set[tuple[str, int]]] = {}
        self.ignored = 0  # records refused (conflicting ids, undecodable): a count for logs and tests

    # -- replay ---------------------------------------------------------------------------------------------

    def apply(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        """Fold one `_schemas` record in; a record that cannot be read is skipped (and counted)."""
        try:
            key = records.decode_key(raw_key)
            if key is not None:
                self._apply(key, raw_value)
        except records.RecordError as exc:
            self.ignored += 1
            log.warning("skipping a _schemas record: %s (key %r)", exc, raw_key[:200] if raw_key else None)

    def loaded(self, now_ms: int) -> list[tuple[bytes, bytes | None]]:
        """`_schemas` is replayed to its end: the state is whole as it is, with nothing to append."""
        return []

    def _apply(self, key: Key, raw_value: bytes | None) -> None:
        if key.keytype == records.SCHEMA:
            if raw_value is None:
                self._tombstone(key)
            else:
                self._put_schema(records.decode_schema(key, raw_value))
        elif key.keytype in (records.CONFIG, records.MODE):
            table = self.config if key.keytype == records.CONFIG else self.mode
            if raw_value is None:
                table.pop(key.subject, None)
            else:
                field_name = "compatibilityLevel" if key.keytype == records.CONFIG else "mode"
                table[key.subject] = records.decode_level(raw_value, field_name)
        elif raw_value is None:
            return  # tombstones of the subject-wide markers carry nothing
        elif key.keytype == records.MAX_ID:
            self.max_id = max(self.max_id, records.decode_max_id(raw_value))
        elif key.keytype == records.DELETE_SUBJECT:
            assert key.subject is not None
            self._soft_delete_through(key.subject, records.decode_delete_subject(raw_value))
        elif key.keytype == records.CLEAR_SUBJECT:
            assert key.subject is not None
            self._clear_deleted(key.subject)

    def _put_schema(self, value: SchemaValue) -> None:
        stored = StoredSchema(value.schema_type, value.schema, value.references)
        known = self.schemas.get(value.id)
        if known is not None and known != stored:
            self.ignored += 1
            log.error(
                "ignoring %s version %d: id %d already names a different schema",
                value.subject,
                value.version,
                value.id,
            )
            return
        self.max_id = max(self.max_id, value.id)
        subject = self.subjects.setdefault(value.subject, Subject())
        previous = subject.versions.get(value.version)
        if previous is not None and previous.id != value.id:
            self._release(previous)
        subject.versions[value.version] = value
        self.schemas[value.id] = stored
        self._id_users.setdefault(value.id, set()).add((value.subject, value.version))

    def _tombstone(self, key: Key) -> None:
        assert key.subject is not None and key.version is not None
        subject = self.subjects.get(key.subject)
        if subject is None:
            return
        previous = subject.versions.pop(key.version, None)
        if previous is not None:
            self._release(previous)
        if not subject.versions:
            del self.subjects[key.subject]

    def _release(self, value: SchemaValue) -> None:
        users = self._id_users.get(value.id)
        if users is None:
            return
        users.discard((value.subject, value.version))
        if not users:
            # Nothing names this id any more: it is gone (404), but max_id keeps it from coming back.
            del self._id_users[value.id]
            self.schemas.pop(value.id, None)

    def _soft_delete_through(self, name: str, last_version: int) -> None:
        subject = self.subjects.get(name)
        if subject is None:
            return
        for number, value in list(subject.versions.items()):
            if number <= last_version and not value.deleted:
                subject.versions[number] = _with_deleted(value)

    def _clear_deleted(self, name: str) -> None:
        subject = self.subjects.get(name)
        if subject is None:
            return
        for number, value in list(subject.versions.items()):
            if value.deleted:
                del subject.versions[number]
                self._release(value)
        if not subject.versions:
            del self.subjects[name]

    # -- queries --------------------------------------------------------------------------------------------

    @property
    def next_id(self) -> int:
        return self.max_id + 1

    def subject_names(self, *, deleted: bool = False) -> list[str]:
        return sorted(
            name
            for name, subject in self.subjects.items()
            if deleted or any(not v.deleted for v in subject.versions.values())
        )

    def versions(self, name: str, *, deleted: bool = False) -> list[SchemaValue]:
        subject = self.subjects.get(name)
        if subject is None:
            return []
        return subject.all() if deleted else subject.live()

    def version(self, name: str, number: int) -> SchemaValue | None:
        subject = self.subjects.get(name)
        return None if subject is None else subject.versions.get(number)

    def latest(self, name: str, *, deleted: bool = False) -> SchemaValue | None:
        found = self.versions(name, deleted=deleted)
        return found[-1] if found else None

    def users_of(self, schema_id: int) -> Iterator[SchemaValue]:
        """Every subject version registered with this id, deleted ones included, in name/version order."""
        for name, number in sorted(self._id_users.get(schema_id, ())):
            value = self.version(name, number)
            if value is not None:
                yield value

    def referenced_by(self, name: str, number: int, *, deleted: bool = False) -> list[int]:
        """Ids of the schemas whose references name this subject version."""
        found = set()
        for subject in self.subjects.values():
            for value in subject.versions.values():
                if value.deleted and not deleted:
                    continue
                if any(ref.subject == name and ref.version == number for ref in value.references):
                    found.add(value.id)
        return sorted(found)

    def level(self, name: str | None) -> str:
        """The compatibility level in force for a subject (its own, else the global, else BACKWARD)."""
        if name is not None and name in self.config:
            return self.config[name]
        return self.config.get(None, DEFAULT_LEVEL)

    def mode_of(self, name: str | None) -> str:
        if name is not None and name in self.mode:
            return self.mode[name]
        return self.mode.get(None, DEFAULT_MODE)


def _with_deleted(value: SchemaValue) -> SchemaValue:
    return SchemaValue(
        value.subject, value.version, value.id, value.schema, value.schema_type, value.references, True
    )
