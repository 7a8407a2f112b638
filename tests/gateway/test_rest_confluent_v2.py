"""REST v2 as Confluent's REST Proxy behaves where Karapace's integration suite found sluice apart from it
(kafka-rest's ConsumersResource, KafkaConsumerState, ProduceRequest, rest-utils' Jackson provider), through a
real gateway, registry and broker."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from rest_helpers import (
    JSON,
    V2,
    RestGateway,
    create_topic,
    new_consumer,
    read_formatted,
    records_until,
    unique,
)

from sluice.testing import BrokerProcess

FORMATS = ("binary", "json", "avro", "protobuf", "jsonschema")
AVRO = "application/vnd.kafka.avro.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"


def embedded(fmt: str) -> str:
    return f"application/vnd.kafka.{fmt}.v2+json"


def produce(rest: RestGateway, topic: str, body: dict, content_type: str) -> requests.Response:
    return requests.post(
        f"{rest.url}/topics/{topic}", json=body, headers={"Content-Type": content_type}, timeout=30
    )


@pytest.fixture(scope="module")
def rest(rest_with_registry: RestGateway) -> RestGateway:
    return rest_with_registry


@pytest.fixture(scope="module")
def topic(rest: RestGateway) -> str:
    name = unique("v2-confluent")
    create_topic(rest.url, name)
    return name


def create(rest: RestGateway, group: str, fmt: str, headers: dict[str, str]) -> str:
    reply = requests.post(f"{rest.url}/consumers/{group}", json={"format": fmt}, headers=headers, timeout=30)
    assert reply.status_code == 200, (fmt, reply.text)
    return str(reply.json()["base_uri"])


def test_consumer_calls_take_every_embedded_content_type(rest: RestGateway, topic: str) -> None:
    """Confluent's consumer resource consumes and produces application/vnd.kafka.<format>.v2+json for every
    call, so a client may send its format's type throughout (sluice answered 415)."""
    partition = {"topic": topic, "partition": 0}
    for fmt in FORMATS:
        headers = {"Content-Type": embedded(fmt), "Accept": embedded(fmt)}

        # One instance subscribes (a group member), another is assigned: a commit of the first could meet
        # a rebalance under way.
        subscriber, assigned = (
            create(rest, unique(f"{role}-{fmt}"), fmt, headers) for role in ("sub", "assign")
        )
        for base, path, body in [
            (subscriber, "subscription", {"topics": [topic]}),
            (subscriber, "subscription", None),
            (assigned, "assignments", {"partitions": [partition]}),
            (assigned, "positions", {"offsets": [{**partition, "offset": 0}]}),
            (assigned, "positions/beginning", {"partitions": [partition]}),
            (assigned, "offsets", {"offsets": [{**partition, "offset": 0}]}),
        ]:
            if body is None:
                reply = requests.delete(f"{base}/{path}", headers=headers, timeout=30)
            else:
                reply = requests.post(f"{base}/{path}", json=body, headers=headers, timeout=30)
            assert reply.status_code in (200, 204), (fmt, path, reply.status_code, reply.text)
        reply = requests.get(f"{assigned}/assignments", headers=headers, timeout=30)
        assert reply.json() == {"partitions": [partition]}
        for base in (subscriber, assigned):
            assert requests.delete(base, headers=headers, timeout=30).status_code == 204
    # An unsupported type is still refused.
    refused = requests.post(
        f"{rest.url}/consumers/{unique('ct')}", data="{}", headers={"Content-Type": "text/plain"}, timeout=30
    )
    assert (refused.status_code, refused.json()["error_code"]) == (415, 415)


def test_paths_with_a_trailing_slash_are_the_same_calls(rest: RestGateway, topic: str) -> None:
    """Jersey matches Confluent's paths with a trailing slash too: the same call, not a 404 or a redirect."""
    produced = requests.post(
        f"{rest.url}/topics/{topic}/", json={"records": [{"value": "c2xhc2g="}]}, headers={"Content-Type": BINARY},
        timeout=30, allow_redirects=False,
    )  # fmt: skip
    assert produced.status_code == 200, produced.text
    offset = produced.json()["offsets"][0]["offset"]
    group = unique("slash")
    created = requests.post(
        f"{rest.url}/consumers/{group}/", json={}, headers={"Content-Type": V2}, timeout=30
    )
    assert created.status_code == 200, created.text
    base = created.json()["base_uri"]
    partition = {"topic": topic, "partition": 0}
    for path, body in [
        ("assignments/", {"partitions": [partition]}),
        ("positions/", {"offsets": [{**partition, "offset": offset}]}),
    ]:
        reply = requests.post(f"{base}/{path}", json=body, headers={"Content-Type": V2}, timeout=30)
        assert reply.status_code == 204, (path, reply.text)
    records = requests.get(
        f"{base}/records/", params={"timeout": 5000}, headers={"Accept": BINARY}, timeout=30
    )
    assert records.status_code == 200 and records.json()[0]["value"] == "c2xhc2g=", records.text
    assert requests.get(f"{rest.url}/topics/{topic}/", timeout=30).json()["name"] == topic
    # A seek on a partition the instance does not hold: the Java consumer's IllegalStateException, 409/40903.
    elsewhere = {"offsets": [{"topic": topic, "partition": 7, "offset": 0}]}
    refused = requests.post(f"{base}/positions/", json=elsewhere, headers={"Content-Type": V2}, timeout=30)
    assert (refused.status_code, refused.json()["error_code"]) == (409, 40903), refused.text
    assert refused.json()["message"] == f"Illegal state: No current assignment for partition {topic}-7"
    assert requests.delete(f"{base}/", timeout=30).status_code == 204


def test_subscription_after_a_pattern_lists_the_matched_topics(rest: RestGateway) -> None:
    """GET .../subscription answers what Java's KafkaConsumer.subscription() does after a pattern subscribe:
    the topics the pattern matches whole (sluice answered [])."""
    prefix = unique("pattern").replace("-", "_")
    matched = [f"{prefix}_{n}" for n in (1, 2)]
    for name in [*matched, f"x{prefix}_3"]:
        create_topic(rest.url, name)
    base = new_consumer(rest.url, unique("pattern"))
    reply = requests.post(
        f"{base}/subscription",
        json={"topic_pattern": f"{prefix}_.*"},
        headers={"Content-Type": V2},
        timeout=30,
    )
    assert reply.status_code == 204, reply.text
    assert requests.get(f"{base}/subscription", timeout=30).json() == {"topics": matched}
    requests.delete(base, timeout=30)


def test_an_offset_commit_answers_as_confluent_does(
    rest: RestGateway, topic: str, broker: BrokerProcess
) -> None:
    """200 with Confluent's CommitOffsetsResponse, an empty list (sluice answered an empty body); Kafka gets
    the last consumed offset + 1."""
    group = unique("commit")
    base = new_consumer(rest.url, group)
    partition = {"topic": topic, "partition": 0}
    requests.post(
        f"{base}/assignments", json={"partitions": [partition]}, headers={"Content-Type": V2}, timeout=30
    )
    reply = requests.post(
        f"{base}/offsets",
        json={"offsets": [{**partition, "offset": 4}]},
        headers={"Content-Type": V2},
        timeout=30,
    )
    assert (reply.status_code, reply.headers["Content-Type"], reply.json()) == (200, V2, [])
    requests.delete(base, timeout=30)
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        (committed,) = reader.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        reader.close()
    assert committed.offset == 5


def test_protobuf_records_include_fields_at_their_defaults(rest: RestGateway) -> None:
    """Confluent's consumers print a protobuf record with JsonFormat's includingDefaultValueFields and JSON
    names: fields at 0, "" or empty are there (sluice left them out)."""
    topic = unique("proto-defaults")
    create_topic(rest.url, topic)
    schema = (
        'syntax = "proto3";\nmessage Reading {\n  int32 sensor_id = 1;\n  string label = 2;\n'
        "  repeated double samples = 3;\n  bool ok = 4;\n}\n"
    )
    reply = produce(
        rest,
        topic,
        {"value_schema": schema, "records": [{"value": {"sensor_id": 7}}, {"value": {}}]},
        embedded("protobuf"),
    )
    assert reply.status_code == 200, reply.text
    values = [r["value"] for r in read_formatted(rest.url, topic, "protobuf", 2)]
    assert values == [
        {"sensorId": 7, "label": "", "samples": [], "ok": False},
        {"sensorId": 0, "label": "", "samples": [], "ok": False},
    ]


@pytest.mark.parametrize(
    "body",
    [
        {"records": [{"valur": {"foo": "bar"}}]},
        {"records": [{"value": "YQ==", "valur": "YQ=="}]},
        {"records": [{"value": "YQ=="}], "foo": "bar"},
    ],
)
@pytest.mark.parametrize("content_type", [BINARY, embedded("json")])
def test_a_misspelled_field_is_refused_not_produced(
    rest: RestGateway, broker: BrokerProcess, body: dict, content_type: str
) -> None:
    """rest-utils turns Jackson's unrecognized property into 422 (error_code 422, "Unrecognized field: ...");
    sluice produced a record with a null value."""
    topic = unique("misspelled")
    create_topic(rest.url, topic)
    reply = requests.post(
        f"{rest.url}/topics/{topic}", json=body, headers={"Content-Type": content_type}, timeout=30
    )
    assert (reply.status_code, reply.json()["error_code"]) == (422, 422), reply.text
    assert reply.json()["message"].startswith("Unrecognized field: ")
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("probe")})
    try:
        assert probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    finally:
        probe.close()


def test_a_schema_id_given_as_a_string_is_read_as_a_number(rest: RestGateway) -> None:
    """Jackson reads "1" into ProduceRequest's Integer value_schema_id; sluice refused it."""
    topic = unique("string-id")
    create_topic(rest.url, topic)
    schema = json.dumps({"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "int"}]})
    first = produce(rest, topic, {"value_schema": schema, "records": [{"value": {"n": 1}}]}, AVRO)
    assert first.status_code == 200, first.text
    schema_id = first.json()["value_schema_id"]
    by_text = produce(
        rest, topic, {"value_schema_id": str(schema_id), "records": [{"value": {"n": 2}}]}, AVRO
    )
    assert (by_text.status_code, by_text.json()["value_schema_id"]) == (200, schema_id), by_text.text
    assert [r["value"] for r in read_formatted(rest.url, topic, "avro", 2)] == [{"n": 1}, {"n": 2}]
    bad = produce(rest, topic, {"value_schema_id": "one", "records": [{"value": {"n": 3}}]}, AVRO)
    assert bad.status_code == 422 and "value_schema_id" in bad.json()["message"]


UNION_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Attrs",
        "namespace": "shop",
        "fields": [
            {
                "name": "attrs",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Attr",
                        "fields": [{"name": "v", "type": ["null", "string", "long"]}],
                    },
                },
            },
            {"name": "props", "type": {"type": "map", "values": ["null", "string"]}},
        ],
    }
)


def test_a_union_value_outside_avro_json_gets_a_clear_400(rest: RestGateway) -> None:
    """Confluent reads records with Avro's JsonDecoder, where a union value names its branch; a bare one is
    refused, with where and why, never with Python's own words ('str' object has no attribute 'popitem')."""
    topic = unique("union")
    create_topic(rest.url, topic)

    def second_record(value: dict) -> requests.Response:
        records = [{"value": {"attrs": [], "props": {}}}, {"value": value}]
        return produce(rest, topic, {"value_schema": UNION_SCHEMA, "records": records}, AVRO)

    bare = second_record({"attrs": [{"v": None}, {"v": "text"}], "props": {}})
    # 400 as Confluent's SchemaRecordSerializerImpl answers a record Avro's JsonDecoder refuses.
    assert (bare.status_code, bare.json()["error_code"]) == (400, 400), bare.text
    message = bare.json()["message"]
    assert "records[1].value" in message and "attrs[1].v" in message and '{"string": ...}' in message
    assert "attribute" not in message and "popitem" not in message
    in_map = second_record({"attrs": [], "props": {"k": "v"}})
    assert in_map.status_code == 400 and 'props["k"]' in in_map.json()["message"]
    wrapped = second_record(
        {"attrs": [{"v": {"string": "text"}}, {"v": {"long": 5}}], "props": {"k": {"string": "v"}}}
    )
    assert wrapped.status_code == 200, wrapped.text
    values = [
        r["value"]
        for r in read_formatted(rest.url, topic, "avro", 1, offset=wrapped.json()["offsets"][1]["offset"])
    ]
    assert values == [
        {"attrs": [{"v": {"string": "text"}}, {"v": {"long": 5}}], "props": {"k": {"string": "v"}}}
    ]


def test_a_schema_id_of_another_type_than_the_format_is_a_clear_4xx(rest: RestGateway, registry: str) -> None:
    """Avro records with a protobuf schema's id: Confluent's proxy casts the schema and fails with a 500;
    sluice failed with 500 "JSONDecodeError". A 422 naming both types says what is wrong."""
    topic = unique("wrong-type")
    create_topic(rest.url, topic)
    text = 'syntax = "proto3";\nmessage Example { string name = 1; }\n'
    registered = requests.post(
        f"{registry}/subjects/{topic}-value/versions",
        json={"schemaType": "PROTOBUF", "schema": text},
        timeout=30,
    )
    assert registered.status_code == 200, registered.text
    schema_id = registered.json()["id"]
    for fmt in ("avro", "jsonschema"):
        reply = produce(
            rest, topic, {"value_schema_id": schema_id, "records": [{"value": {"name": "x"}}]}, embedded(fmt)
        )
        assert (reply.status_code, reply.json()["error_code"]) == (422, 42205), reply.text
        assert "PROTOBUF" in reply.json()["message"]
    right = produce(
        rest,
        topic,
        {"value_schema_id": schema_id, "records": [{"value": {"name": "x"}}]},
        embedded("protobuf"),
    )
    assert right.status_code == 200, right.text


def test_a_schema_id_registered_under_another_subject_is_42207(rest: RestGateway, registry: str) -> None:
    """Confluent's proxy looks the id's schema up under the topic's subject and answers 422/42207 ("Error when
    fetching schema version") when it is not there; sluice answered 42203 as if the record did not fit."""
    topic = unique("other-subject")
    create_topic(rest.url, topic)
    schema = json.dumps(
        {"type": "record", "name": "Reading", "fields": [{"name": "temperature", "type": "int"}]}
    )
    elsewhere = requests.post(
        f"{registry}/subjects/{unique('elsewhere')}/versions", json={"schema": schema}, timeout=30
    )
    assert elsewhere.status_code == 200, elsewhere.text
    body = {"value_schema_id": elsewhere.json()["id"], "records": [{"value": {"temperature": 25}}]}
    reply = produce(rest, topic, body, AVRO)
    assert (reply.status_code, reply.json()["error_code"]) == (422, 42207), reply.text
    assert f"{topic}-value" in reply.json()["message"]


def test_switching_between_topics_and_a_pattern_is_409(rest: RestGateway, topic: str) -> None:
    """The Java consumer under Confluent's proxy refuses to change how it subscribes (IllegalStateException:
    409, 40903); a body naming both topics and a pattern subscribes the topics (sluice answered 422)."""
    base = new_consumer(rest.url, unique("switch"))

    def subscribe(body: dict) -> requests.Response:
        return requests.post(f"{base}/subscription", json=body, headers={"Content-Type": V2}, timeout=30)

    assert subscribe({"topics": [topic], "topic_pattern": "ignored.*"}).status_code == 204
    assert requests.get(f"{base}/subscription", timeout=30).json() == {"topics": [topic]}
    refused = subscribe({"topic_pattern": "other.*"})
    assert (refused.status_code, refused.json()["error_code"]) == (409, 40903), refused.text
    assert "mutually exclusive" in refused.json()["message"]
    assert subscribe({"topics": [topic]}).status_code == 204  # the same way again: a new subscription
    requests.delete(f"{base}/subscription", timeout=30)
    assert subscribe({"topic_pattern": "other.*"}).status_code == 204
    assert (subscribe({"topics": [topic]}).status_code, requests.delete(base, timeout=30).status_code) == (
        409,
        204,
    )


def test_a_value_schema_the_registry_refuses_as_incompatible_is_42207(rest: RestGateway) -> None:
    """Registering `value_schema` fails with the registry's 409: Confluent's proxy answers 422/42207 (its
    failed registry call); sluice answered 42205 as for a schema that does not parse."""
    topic = unique("incompatible")
    create_topic(rest.url, topic)

    def schema(field_type: str) -> str:
        return json.dumps(
            {"type": "record", "name": "Reading", "fields": [{"name": "v", "type": field_type}]}
        )

    first = produce(rest, topic, {"value_schema": schema("int"), "records": [{"value": {"v": 1}}]}, AVRO)
    assert first.status_code == 200, first.text
    refused = produce(
        rest, topic, {"value_schema": schema("string"), "records": [{"value": {"v": "x"}}]}, AVRO
    )
    assert (refused.status_code, refused.json()["error_code"]) == (422, 42207), refused.text
    assert "value_schema" in refused.json()["message"]


def test_an_assignment_takes_the_seeks_made_before_the_first_read_and_a_seek_moves_only_its_partition(
    rest: RestGateway,
) -> None:
    """An assignment reaches librdkafka at the first read, with the positions seeks gave it (as Java's consumer
    assigns at its first poll); a later seek of one partition leaves the others where they are, not back at
    their committed offset (here none, so auto.offset.reset=earliest would hand them out again)."""
    topic = unique("lazy-assign")
    create_topic(rest.url, topic, partitions=2)
    for partition in (0, 1):
        reply = requests.post(
            f"{rest.url}/topics/{topic}/partitions/{partition}",
            json={"records": [{"value": f"p{partition}-{n}"} for n in range(3)]},
            headers={"Content-Type": JSON},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
    base = new_consumer(
        rest.url,
        unique("lazy"),
        format="json",
        **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"},
    )
    both = [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]

    def post(path: str, body: dict) -> None:
        reply = requests.post(f"{base}/{path}", json=body, headers={"Content-Type": V2}, timeout=30)
        assert reply.status_code == 204, reply.text

    try:
        post("assignments", {"partitions": both})
        assert requests.get(f"{base}/assignments", timeout=30).json() == {"partitions": both}
        post("positions", {"offsets": [{"topic": topic, "partition": 0, "offset": 2}]})
        first = {(r["partition"], r["offset"]) for r in records_until(base, 4)}
        assert first == {(0, 2), (1, 0), (1, 1), (1, 2)}
        post("positions/beginning", {"partitions": [{"topic": topic, "partition": 0}]})
        again = {(r["partition"], r["offset"]) for r in records_until(base, 3)}
        assert again == {(0, 0), (0, 1), (0, 2)}
        more = requests.get(f"{base}/records", params={"timeout": 1000}, headers={"Accept": JSON}, timeout=30)
        assert more.status_code == 200 and more.json() == [], more.text  # partition 1 is not read again
    finally:
        requests.delete(base, timeout=30)
