"""What each write decides, as records to append (pure: state in, records and an answer out).

The shell appends the records, waits until its own reader has folded them back into the state, then asks
`landed(state)`: false means another writer got there first (a racing primary), and the command is planned
again on the newer state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sluice.registry import errors, records
from sluice.registry.catalog import Catalog
from sluice.registry.compatibility import check_compatibility
from sluice.registry.records import Key, Reference, SchemaValue
from sluice.registry.state import RegistryState

Record = tuple[bytes, bytes | None]
MAX_VERSION = 2**31 - 1


@dataclass
class Plan:
    answer: Any
    records: list[Record] = field(default_factory=list)
    landed: Callable[[RegistryState], bool] = lambda state: True


@dataclass(frozen=True)
class RegisterRequest:
    schema: str
    schema_type: str = records.DEFAULT_SCHEMA_TYPE
    references: tuple[Reference, ...] = ()
    schema_id: int | None = None
    version: int | None = None
    normalize: bool = False


def _writable(state: RegistryState, subject: str | None) -> str:
    mode = state.mode_of(subject)
    if mode in ("READONLY", "READONLY_OVERRIDE"):
        raise errors.not_permitted(
            f"Subject '{subject}' is in read-only mode" if subject else "The registry is read-only"
        )
    return mode


def _schema_record(value: SchemaValue) -> Record:
    return records.encode_key(Key(records.SCHEMA, value.subject, value.version)), records.encode_schema(value)


def _tombstone(subject: str, version: int) -> Record:
    return records.encode_key(Key(records.SCHEMA, subject, version)), None


def _keep_max_id(state: RegistryState) -> Record:
    """Written before tombstones: compaction will drop the deleted records, and their ids with them."""
    return records.MAX_ID_KEY, records.encode_max_id(state.max_id)


def _answer(value: SchemaValue) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": value.subject, "version": value.version, "id": value.id}
    if value.schema_type != records.DEFAULT_SCHEMA_TYPE:
        out["schemaType"] = value.schema_type
    if value.references:
        out["references"] = [ref.to_json() for ref in value.references]
    out["schema"] = value.schema
    return out


def schema_answer(value: SchemaValue) -> dict[str, Any]:
    """A subject version as GET /subjects/{s}/versions/{v} and lookups show it."""
    return _answer(value)


LATEST_REFERENCE = -1


def with_latest_references(state: RegistryState, request: RegisterRequest) -> RegisterRequest:
    """The request with each reference of version -1 naming its subject's latest version, as Confluent's
    registry resolves (and stores) them; a subject with no live version is 42201."""
    if all(ref.version != LATEST_REFERENCE for ref in request.references):
        return request
    resolved = []
    for ref in request.references:
        if ref.version == LATEST_REFERENCE:
            latest = state.latest(ref.subject)
            if latest is None:
                raise errors.invalid_schema(
                    f"reference {ref.name!r} names the latest version of subject '{ref.subject}', which has none"
                )
            ref = Reference(ref.name, ref.subject, latest.version)
        resolved.append(ref)
    return replace(request, references=tuple(resolved))


def register(state: RegistryState, catalog: Catalog, subject: str, request: RegisterRequest) -> Plan:
    mode = _writable(state, subject)
    request = with_latest_references(state, request)
    importing = mode == "IMPORT"
    if request.schema_id is not None and not importing:
        raise errors.not_permitted(f"Subject '{subject}' is not in import mode: a schema id cannot be given")
    parsed = catalog.parse_request(request.schema_type, request.schema, request.references, request.normalize)
    existing = catalog.find_in_subject(subject, parsed.fingerprint)
    if (
        existing is not None
        and request.schema_id in (None, existing.id)
        and request.version in (None, existing.version)
    ):
        return Plan({"id": existing.id, "version": existing.version, "subject": subject})

    schema_id = request.schema_id
    if schema_id is not None:
        taken = catalog.parsed(schema_id) if schema_id in state.schemas else None
        if schema_id in state.schemas and (taken is None or taken.fingerprint != parsed.fingerprint):
            raise errors.id_taken(schema_id)
    else:
        same = catalog.id_with_fingerprint(parsed.fingerprint)
        schema_id = state.next_id if same is None else same
    text = parsed.text if schema_id not in state.schemas else state.schemas[schema_id].text

    every_version = state.versions(subject, deleted=True)
    next_version = (every_version[-1].version + 1) if every_version else 1
    version = request.version or next_version
    if not importing and version != next_version:
        raise errors.invalid_schema(
            f"version {version} is not one more than the subject's latest, {next_version - 1}"
        )
    if importing and request.version is not None:
        taken_version = state.version(subject, version)
        if taken_version is not None and taken_version.id != schema_id:
            raise errors.not_permitted(
                f"Subject '{subject}' already has a version {version} with another schema"
            )

    if not importing:
        live = state.versions(subject)
        problems = check_compatibility(state.level(subject), parsed, catalog.parsed_versions(live))
        if problems:
            raise errors.incompatible(problems)

    value = SchemaValue(subject, version, schema_id, text, parsed.schema_type, tuple(request.references))
    out: list[Record] = []
    # Confluent drops an older soft-deleted version of the same schema when it comes back (unless referenced).
    for old in every_version:
        if (
            old.deleted
            and old.id == schema_id
            and old.version < version
            and not state.referenced_by(subject, old.version, deleted=True)
        ):
            out.append(_tombstone(subject, old.version))
    out.append(_schema_record(value))

    def landed(after: RegistryState) -> bool:
        stored = after.version(subject, version)
        return stored is not None and stored.id == schema_id and not stored.deleted

    return Plan({"id": schema_id, "version": version, "subject": subject}, out, landed)


def lookup(
    state: RegistryState, catalog: Catalog, subject: str, request: RegisterRequest, *, deleted: bool = False
) -> SchemaValue:
    if not state.versions(subject, deleted=deleted):
        raise errors.subject_not_found(subject)
    request = with_latest_references(state, request)
    parsed = catalog.parse_request(request.schema_type, request.schema, request.references, request.normalize)
    found = catalog.find_in_subject(subject, parsed.fingerprint, deleted=deleted)
    if found is None:
        raise errors.schema_not_found()
    return found


def parse_version(text: str) -> int | str:
    """A version path segment: a number from 1 to 2^31-1, or "latest" (also spelled -1)."""
    if text in ("latest", "-1"):
        return "latest"
    try:
        number = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if not 1 <= number <= MAX_VERSION:
        raise errors.invalid_version(text)
    return number


def resolve(state: RegistryState, subject: str, version: str, *, deleted: bool = False) -> SchemaValue:
    """The subject version a path names (42202 for a bad version, 40401/40402 when missing)."""
    wanted = parse_version(version)
    if not state.versions(subject, deleted=True):
        raise errors.subject_not_found(subject)
    if wanted == "latest":
        found = state.latest(subject, deleted=deleted)
        if found is None:
            raise errors.subject_not_found(subject)
        return found
    assert isinstance(wanted, int)
    found = state.version(subject, wanted)
    if found is None or (found.deleted and not deleted):
        raise errors.version_not_found(wanted)
    return found


def _forget_subject_settings(state: RegistryState, subject: str) -> list[Record]:
    out: list[Record] = []
    if subject in state.config:
        out.append((records.encode_key(Key(records.CONFIG, subject)), None))
    if subject in state.mode:
        out.append((records.encode_key(Key(records.MODE, subject)), None))
    return out


def delete_version(state: RegistryState, subject: str, version: str, *, permanent: bool) -> Plan:
    _writable(state, subject)
    # "latest" of a soft delete is the newest live version; a numbered one may be soft-deleted (40406).
    value = resolve(state, subject, version, deleted=permanent or parse_version(version) != "latest")
    if not permanent and value.deleted:
        raise errors.version_soft_deleted(subject, value.version)
    if permanent and not value.deleted:
        raise errors.version_not_soft_deleted(subject, value.version)
    if state.referenced_by(subject, value.version, deleted=permanent):
        raise errors.reference_exists(subject, value.version)
    number = value.version
    if not permanent:
        deleted = SchemaValue(
            subject, number, value.id, value.schema, value.schema_type, value.references, deleted=True
        )
        return Plan(
            number,
            [_schema_record(deleted)],
            lambda after: (v := after.version(subject, number)) is None or v.deleted,
        )
    out = [_keep_max_id(state), _tombstone(subject, number)]
    if len(state.versions(subject, deleted=True)) == 1:
        out += _forget_subject_settings(state, subject)
    return Plan(number, out, lambda after: after.version(subject, number) is None)


def delete_subject(state: RegistryState, subject: str, *, permanent: bool) -> Plan:
    _writable(state, subject)
    every = state.versions(subject, deleted=True)
    live = [v for v in every if not v.deleted]
    if not every:
        raise errors.subject_not_found(subject)
    if not permanent and not live:
        raise errors.subject_soft_deleted(subject)
    if permanent and live:
        raise errors.subject_not_soft_deleted(subject)
    for value in every if permanent else live:
        users = [
            ref_id
            for ref_id in state.referenced_by(subject, value.version, deleted=permanent)
            if all(user.subject != subject for user in state.users_of(ref_id))
        ]
        if users:
            raise errors.reference_exists(subject, value.version)
    if not permanent:
        last = live[-1].version
        key = records.encode_key(Key(records.DELETE_SUBJECT, subject))
        return Plan(
            [v.version for v in live],
            [(key, records.encode_delete_subject(subject, last))],
            lambda after: not after.versions(subject),
        )
    out = [_keep_max_id(state), *(_tombstone(subject, v.version) for v in reversed(every))]
    out += _forget_subject_settings(state, subject)
    return Plan([v.version for v in every], out, lambda after: not after.versions(subject, deleted=True))


def set_config(state: RegistryState, subject: str | None, level: object) -> Plan:
    if not isinstance(level, str) or level.upper() not in errors.LEVELS:
        raise errors.invalid_level(level)
    level = level.upper()
    key = records.encode_key(Key(records.CONFIG, subject))
    return Plan(
        {"compatibility": level},
        [(key, records.encode_config(subject, level))],
        lambda after: after.config.get(subject) == level,
    )


def delete_config(state: RegistryState, subject: str | None) -> Plan:
    if subject is not None and subject not in state.config:
        raise (
            errors.subject_not_found(subject)
            if not state.versions(subject, deleted=True)
            else errors.no_subject_config(subject)
        )
    previous = state.level(subject)
    key = records.encode_key(Key(records.CONFIG, subject))
    return Plan({"compatibilityLevel": previous}, [(key, None)], lambda after: subject not in after.config)


def set_mode(state: RegistryState, subject: str | None, mode: object, *, force: bool) -> Plan:
    if not isinstance(mode, str) or mode.upper() not in errors.MODES:
        raise errors.invalid_mode(mode)
    mode = mode.upper()
    if mode == "IMPORT" and not force and state.mode_of(subject) != "IMPORT":
        has_schemas = bool(state.versions(subject, deleted=True)) if subject else bool(state.subjects)
        if has_schemas:
            where = f"subject '{subject}'" if subject else "the registry"
            raise errors.not_permitted(
                f"Cannot enter IMPORT mode: {where} already holds schemas (force=true imports anyway)"
            )
    key = records.encode_key(Key(records.MODE, subject))
    return Plan(
        {"mode": mode},
        [(key, records.encode_mode(subject, mode))],
        lambda after: after.mode.get(subject) == mode,
    )


def delete_mode(state: RegistryState, subject: str) -> Plan:
    if subject not in state.mode:
        raise (
            errors.subject_not_found(subject)
            if not state.versions(subject, deleted=True)
            else errors.no_subject_mode(subject)
        )
    previous = state.mode[subject]
    key = records.encode_key(Key(records.MODE, subject))
    return Plan({"mode": previous}, [(key, None)], lambda after: subject not in after.mode)


def check(
    state: RegistryState, catalog: Catalog, subject: str, version: str | None, request: RegisterRequest
) -> list[str]:
    """Problems registering `request` in `subject` would meet: against one version, or (None) the level's set."""
    request = with_latest_references(state, request)
    parsed = catalog.parse_request(request.schema_type, request.schema, request.references, request.normalize)
    level = state.level(subject)
    return check_compatibility(
        level, parsed, catalog.parsed_versions(_checked_against(state, subject, version))
    )


def _checked_against(state: RegistryState, subject: str, version: str | None) -> list[SchemaValue]:
    """What a compatibility check compares with, as Confluent's CompatibilityResource finds it: the live
    versions (none for a missing subject), or the one named: "latest" of a missing subject is none (the
    check passes), a numbered version missing or soft-deleted is 40402 whether or not the subject exists."""
    if version is None:
        return state.versions(subject)
    wanted = parse_version(version)
    if wanted == "latest":
        latest = state.latest(subject)
        return [] if latest is None else [latest]
    assert isinstance(wanted, int)
    found = state.version(subject, wanted)
    if found is None or found.deleted:
        raise errors.version_not_found(wanted)
    return [found]


def list_schemas(
    state: RegistryState, prefix: str, *, deleted: bool, latest_only: bool, offset: int, limit: int
) -> list[dict[str, Any]]:
    """GET /schemas: subject versions of the subjects starting with `prefix`, by subject then version
    (only each subject's latest with `latest_only`), `limit` of them from `offset` (all for limit <= 0)."""
    found: list[SchemaValue] = []
    for name in sorted(state.subjects):
        if not name.startswith(prefix):
            continue
        versions = state.versions(name, deleted=deleted)
        found.extend(versions[-1:] if latest_only else versions)
    end = offset + limit if limit > 0 else None
    return [_answer(value) for value in found[offset:end]]


def in_other_context(subject: str | None) -> bool:
    """Whether `subject` is qualified with a context other than the default one (`:.name:subject`): this
    registry keeps every schema in the default context, so no id is found there."""
    if not subject or not subject.startswith(":."):
        return False
    context, separator, _ = subject[2:].partition(":")
    return bool(separator) and context not in ("", ".")
