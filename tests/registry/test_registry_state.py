"""The `_schemas` layout and the replayed state, without Kafka: records in, state out."""

from __future__ import annotations

import json

from sluice.registry import records
from sluice.registry.records import Key, Reference, SchemaValue
from sluice.registry.state import RegistryState

AVRO_A = '{"type":"record","name":"A","fields":[{"name":"f","type":"string"}]}'
AVRO_B = '{"type":"record","name":"B","fields":[{"name":"g","type":"long"}]}'


def schema_record(subject: str, version: int, schema_id: int, text: str, **kw: object) -> tuple[bytes, bytes]:
    value = SchemaValue(subject, version, schema_id, text, **kw)  # type: ignore[arg-type]
    return records.encode_key(Key(records.SCHEMA, subject, version)), records.encode_schema(value)


def test_keys_are_confluents_json_in_its_field_order() -> None:
    assert (
        records.encode_key(Key(records.SCHEMA, "s", 3))
        == b'{"keytype":"SCHEMA","subject":"s","version":3,"magic":1}'
    )
    assert records.encode_key(Key(records.CONFIG, None)) == b'{"keytype":"CONFIG","magic":0}'
    assert records.encode_key(Key(records.CONFIG, "s")) == b'{"keytype":"CONFIG","subject":"s","magic":0}'
    assert records.encode_key(Key(records.MODE, "s")) == b'{"keytype":"MODE","subject":"s","magic":0}'
    assert records.encode_key(Key(records.DELETE_SUBJECT, "s")) == (
        b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}'
    )


def test_schema_values_omit_avro_type_and_empty_references() -> None:
    _, avro = schema_record("s", 1, 7, AVRO_A)
    assert json.loads(avro) == {"subject": "s", "version": 1, "id": 7, "schema": AVRO_A, "deleted": False}
    _, proto = schema_record(
        "s", 2, 8, "syntax = 'proto3';", schema_type="PROTOBUF", references=(Reference("a.proto", "a", 1),)
    )
    assert json.loads(proto)["schemaType"] == "PROTOBUF"
    assert json.loads(proto)["references"] == [{"name": "a.proto", "subject": "a", "version": 1}]


def test_ids_are_never_reused_after_a_permanent_delete() -> None:
    state = RegistryState()
    state.apply(*schema_record("s", 1, 1, AVRO_A))
    state.apply(*schema_record("s", 2, 2, AVRO_B))
    state.apply(*schema_record("s", 2, 2, AVRO_B, deleted=True))
    state.apply(records.encode_key(Key(records.SCHEMA, "s", 2)), None)
    assert 2 not in state.schemas
    assert state.next_id == 3


def test_a_record_giving_a_taken_id_to_another_schema_is_ignored() -> None:
    state = RegistryState()
    state.apply(*schema_record("a", 1, 5, AVRO_A))
    state.apply(*schema_record("b", 1, 5, AVRO_B))  # a racing primary's write
    assert state.version("b", 1) is None
    assert state.schemas[5].text == AVRO_A
    assert state.ignored == 1
    state.apply(*schema_record("b", 1, 5, AVRO_A))  # the same schema under another subject keeps its id
    assert state.version("b", 1) is not None


def test_delete_subject_soft_deletes_through_its_version_and_clear_subject_drops_them() -> None:
    state = RegistryState()
    for version, schema_id in ((1, 1), (2, 2)):
        state.apply(*schema_record("s", version, schema_id, AVRO_A if version == 1 else AVRO_B))
    state.apply(records.encode_key(Key(records.DELETE_SUBJECT, "s")), records.encode_delete_subject("s", 2))
    assert state.subject_names() == []
    assert state.subject_names(deleted=True) == ["s"]
    state.apply(records.encode_key(Key(records.CLEAR_SUBJECT, "s")), records.encode_clear_subject("s"))
    assert state.subject_names(deleted=True) == []
    assert state.next_id == 3


def test_config_and_mode_records_and_their_tombstones() -> None:
    state = RegistryState()
    assert state.level("s") == "BACKWARD" and state.mode_of("s") == "READWRITE"
    state.apply(records.encode_key(Key(records.CONFIG, None)), b'{"compatibilityLevel":"FULL"}')
    state.apply(records.encode_key(Key(records.CONFIG, "s")), records.encode_config("s", "NONE"))
    state.apply(records.encode_key(Key(records.MODE, "s")), records.encode_mode("s", "IMPORT"))
    assert (state.level("s"), state.level("t"), state.mode_of("s")) == ("NONE", "FULL", "IMPORT")
    state.apply(records.encode_key(Key(records.CONFIG, "s")), None)
    state.apply(records.encode_key(Key(records.MODE, "s")), None)
    assert (state.level("s"), state.mode_of("s")) == ("FULL", "READWRITE")


def test_foreign_and_broken_records_are_skipped() -> None:
    state = RegistryState()
    state.apply(b'{"keytype":"NOOP","magic":0}', None)
    state.apply(b'{"keytype":"CONTEXT","tenant":"t","context":"c","magic":0}', b"{}")
    state.apply(b"not json", b"{}")
    state.apply(b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b'{"id":"x"}')
    state.apply(b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b"[]")
    assert state.subjects == {} and state.ignored == 3


def test_the_max_id_record_outlives_the_compaction_of_a_permanent_delete() -> None:
    from sluice.registry import commands

    state = RegistryState()
    state.apply(*schema_record("s", 1, 41, AVRO_A, deleted=True))
    plan = commands.delete_version(state, "s", "1", permanent=True)
    assert plan.records[0] == (records.MAX_ID_KEY, b'{"maxId":41}')
    # What compaction leaves of that history: the max-id record and the tombstone, no record with id 41.
    compacted = RegistryState()
    for key, value in plan.records:
        compacted.apply(key, value)
    assert compacted.subjects == {} and compacted.next_id == 42
    # Confluent's and Karapace's readers see a NOOP key (keytype and magic are all they compare).
    assert (
        json.loads(records.MAX_ID_KEY)["keytype"] == "NOOP" and json.loads(records.MAX_ID_KEY)["magic"] == 0
    )
