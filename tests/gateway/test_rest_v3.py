"""The REST Proxy API v3 through a real `sluice gateway` process and the real broker, with plain HTTP."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from rest_helpers import (
    V2,
    RestGateway,
    cluster_id,
    create_topic,
    new_consumer,
    produce_json,
    records_until,
    rest_gateway,
    unique,
)

from sluice.testing import BrokerProcess


@pytest.fixture(scope="module")
def rest(rest_proxy: RestGateway) -> RestGateway:
    return rest_proxy


@pytest.fixture(scope="module")
def v3(rest: RestGateway) -> str:
    return f"{rest.url}/v3/clusters/{cluster_id(rest.url)}"


def test_clusters(rest: RestGateway, v3: str) -> None:
    listed = requests.get(f"{rest.url}/v3/clusters", timeout=30).json()
    assert listed["kind"] == "KafkaClusterList"
    (cluster,) = listed["data"]
    assert cluster["metadata"]["self"] == v3
    assert cluster["topics"]["related"] == f"{v3}/topics"
    assert requests.get(v3, timeout=30).json()["cluster_id"] == cluster["cluster_id"]
    (broker,) = requests.get(f"{v3}/brokers", timeout=30).json()["data"]
    assert requests.get(f"{v3}/brokers/{broker['broker_id']}", timeout=30).json()["port"] == broker["port"]
    assert requests.get(f"{v3}/brokers/99", timeout=30).status_code == 404
    missing = requests.get(f"{rest.url}/v3/clusters/not-this-one/topics", timeout=30)
    assert missing.status_code == 404 and missing.json()["error_code"] == 404


def test_topic_create_get_configs_alter_delete(v3: str) -> None:
    name = unique("rest-v3")
    created = requests.post(
        f"{v3}/topics",
        json={
            "topic_name": name,
            "partitions_count": 3,
            "configs": [{"name": "retention.ms", "value": "123456"}],
        },
        timeout=30,
    )
    assert created.status_code == 201, created.text
    assert (created.json()["topic_name"], created.json()["partitions_count"]) == (name, 3)
    again = requests.post(f"{v3}/topics", json={"topic_name": name, "partitions_count": 1}, timeout=30)
    assert again.status_code == 400 and again.json()["error_code"] == 400  # as Confluent's server answers
    assert name in [t["topic_name"] for t in requests.get(f"{v3}/topics", timeout=30).json()["data"]]
    assert requests.get(f"{v3}/topics/{name}", timeout=30).json()["replication_factor"] == 1
    partitions = requests.get(f"{v3}/topics/{name}/partitions", timeout=30).json()["data"]
    assert [p["partition_id"] for p in partitions] == [0, 1, 2]
    assert requests.get(f"{v3}/topics/{name}/partitions/2", timeout=30).json()["partition_id"] == 2
    assert requests.get(f"{v3}/topics/{name}/partitions/3", timeout=30).status_code == 404
    retention = requests.get(f"{v3}/topics/{name}/configs/retention.ms", timeout=30).json()
    assert (retention["value"], retention["is_default"]) == ("123456", False)
    assert retention["source"] == "DYNAMIC_TOPIC_CONFIG"
    alter = {
        "data": [
            {"name": "retention.ms", "operation": "DELETE"},
            {"name": "cleanup.policy", "value": "compact"},
        ]
    }
    assert requests.post(f"{v3}/topics/{name}/configs:alter", json=alter, timeout=30).status_code == 204
    configs = {c["name"]: c for c in requests.get(f"{v3}/topics/{name}/configs", timeout=30).json()["data"]}
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["retention.ms"]["is_default"] is True
    assert (
        requests.put(
            f"{v3}/topics/{name}/configs/cleanup.policy", json={"value": "delete"}, timeout=30
        ).status_code
        == 204
    )
    assert requests.get(f"{v3}/topics/{name}/configs/cleanup.policy", timeout=30).json()["value"] == "delete"
    bad = requests.post(
        f"{v3}/topics/{name}/configs:alter", json={"data": [{"name": "x", "operation": "FLIP"}]}, timeout=30
    )
    assert bad.status_code == 400
    assert requests.delete(f"{v3}/topics/{name}", timeout=30).status_code == 204
    gone = requests.get(f"{v3}/topics/{name}", timeout=30)
    assert gone.status_code == 404 and gone.json() == {
        "error_code": 404,
        "message": f"Topic {name} not found.",
    }


def test_records_single(v3: str, rest: RestGateway, broker: BrokerProcess) -> None:
    topic = unique("rest-rec")
    create_topic(rest.url, topic, partitions=2)
    reply = requests.post(
        f"{v3}/topics/{topic}/records",
        json={
            "partition_id": 1,
            "headers": [{"name": "h", "value": base64.b64encode(b"hv").decode()}],
            "key": {"type": "STRING", "data": "k"},
            "value": {"type": "JSON", "data": {"x": 1}},
        },
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["error_code"], body["partition_id"], body["offset"]) == (200, 1, 0)
    assert body["value"] == {"type": "JSON", "size": 7}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("direct")})
    try:
        consumer.assign([TopicPartition(topic, 1, 0)])
        (message,) = consumer.consume(1, timeout=15)
    finally:
        consumer.close()
    assert (message.key(), message.value(), message.headers()) == (b"k", b'{"x":1}', [("h", b"hv")])
    for body, status, code in [
        ({"value": {"type": "BINARY", "data": "!!"}}, 400, 400),
        # No schema registry behind this gateway: as Confluent's, 422 with 42206.
        ({"value": {"type": "AVRO", "data": {}}}, 422, 42206),
        ({"value": {"schema_id": 1, "data": {}}}, 422, 42206),
        ({"partition_id": 9, "value": {"data": 1}}, 404, 404),
    ]:
        failed = requests.post(f"{v3}/topics/{topic}/records", json=body, timeout=30)
        assert (failed.status_code, failed.json()["error_code"]) == (status, code), failed.text
    unknown = requests.post(f"{v3}/topics/no-such-{topic}/records", json={"value": {"data": 1}}, timeout=30)
    assert unknown.status_code == 404


def test_records_streaming_answers_each_record(v3: str, rest: RestGateway) -> None:
    topic = unique("rest-stream")
    create_topic(rest.url, topic)

    def chunks() -> Iterator[bytes]:
        for n in range(300):
            yield json.dumps({"value": {"type": "JSON", "data": n}}).encode()
        yield b'{"value": {"type": "BINARY", "data": "!!"}}'
        yield b'{"value": {"type": "STRING", "data": "last"}}'

    reply = requests.post(
        f"{v3}/topics/{topic}/records",
        data=chunks(),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert reply.status_code == 200
    answers = [json.loads(line) for line in reply.text.splitlines()]
    assert [a["error_code"] for a in answers] == [200] * 300 + [400, 200]
    # Produced while later ones were still arriving, yet in their order.
    assert [a["offset"] for a in answers if a["error_code"] == 200] == list(range(301))


def test_client_aborting_a_chunked_body_keeps_what_was_answered(v3: str, rest: RestGateway) -> None:
    topic = unique("rest-abort")
    create_topic(rest.url, topic)
    host, port = rest.url.removeprefix("http://").split(":")
    path = v3.removeprefix(rest.url) + f"/topics/{topic}/records"
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        for n in range(3):
            record = json.dumps({"value": {"type": "JSON", "data": n}}).encode()
            sock.sendall(b"%x\r\n%s\r\n" % (len(record), record))
        half = b'{"value": {"type": "JSON", "da'
        sock.sendall(b"%x\r\n%s\r\n" % (len(half), half))
        received = b""
        deadline = time.monotonic() + 30
        while received.count(b'"error_code":200') < 3 and time.monotonic() < deadline:
            received += sock.recv(65536)
    # The connection is gone mid-record: the three complete records are in the topic, and the gateway serves on.
    ends = requests.get(f"{rest.url}/topics/{topic}/partitions/0/offsets", timeout=30).json()
    assert ends["end_offset"] == 3
    assert requests.get(f"{v3}/topics/{topic}", timeout=30).status_code == 200


def test_consumer_groups_consumers_and_lags(v3: str, rest: RestGateway) -> None:
    topic = unique("rest-lag")
    create_topic(rest.url, topic)
    produce_json(rest.url, topic, list(range(5)))
    group = unique("rest-lag-group")
    base = new_consumer(
        rest.url,
        group,
        name="lagger",
        format="json",
        **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"},
    )
    requests.post(f"{base}/subscription", json={"topics": [topic]}, headers={"Content-Type": V2}, timeout=30)
    records = records_until(base, 5)
    requests.post(
        f"{base}/offsets",
        json={"offsets": [{"topic": topic, "partition": 0, "offset": records[1]["offset"]}]},
        headers={"Content-Type": V2},
        timeout=30,
    )
    described = requests.get(f"{v3}/consumer-groups/{group}", timeout=30).json()
    assert (described["consumer_group_id"], described["state"]) == (group, "STABLE")
    assert group in [
        g["consumer_group_id"] for g in requests.get(f"{v3}/consumer-groups", timeout=30).json()["data"]
    ]
    (member,) = requests.get(f"{v3}/consumer-groups/{group}/consumers", timeout=30).json()["data"]
    (assigned,) = requests.get(member["assignments"]["related"], timeout=30).json()["data"]
    assert (assigned["topic_name"], assigned["partition_id"]) == (topic, 0)
    one = requests.get(f"{v3}/consumer-groups/{group}/consumers/{member['consumer_id']}", timeout=30).json()
    assert one["client_id"] == member["client_id"]
    (lag,) = requests.get(f"{v3}/consumer-groups/{group}/lags", timeout=30).json()["data"]
    assert (lag["current_offset"], lag["log_end_offset"], lag["lag"]) == (2, 5, 3)
    summary = requests.get(f"{v3}/consumer-groups/{group}/lag-summary", timeout=30).json()
    assert (summary["max_lag"], summary["total_lag"], summary["max_lag_topic_name"]) == (3, 3, topic)
    assert summary["max_lag_consumer_id"] == member["consumer_id"]
    missing = requests.get(f"{v3}/consumer-groups/{unique('nobody')}/lags", timeout=30)
    assert missing.status_code == 404 and missing.json()["error_code"] == 404
    requests.delete(base, timeout=30)


def test_acls_without_an_authorizer_say_so(v3: str) -> None:
    assert requests.get(f"{v3}/acls", timeout=30).json()["data"] == []
    acl = {
        "resource_type": "TOPIC",
        "resource_name": "t",
        "pattern_type": "LITERAL",
        "principal": "User:bob",
        "host": "*",
        "operation": "READ",
        "permission": "ALLOW",
    }
    refused = requests.post(f"{v3}/acls", json=acl, timeout=30)
    assert refused.status_code == 400 and "authorizer" in refused.json()["message"].lower()
    bad = requests.post(f"{v3}/acls", json={**acl, "operation": "JUGGLE"}, timeout=30)
    assert bad.status_code == 400 and "operation" in bad.json()["message"]


def test_v3_bodies_are_checked(v3: str) -> None:
    for body in [
        "{",
        "[]",
        json.dumps({"topic_name": ""}),
        json.dumps({"topic_name": "x", "partitions_count": "3"}),
    ]:
        reply = requests.post(
            f"{v3}/topics", data=body, headers={"Content-Type": "application/json"}, timeout=30
        )
        assert reply.status_code == 400 and "Traceback" not in reply.text, body
        assert reply.json()["error_code"] == reply.status_code
    wrong = requests.post(f"{v3}/topics", data="{}", headers={"Content-Type": "text/plain"}, timeout=30)
    assert wrong.status_code == 415


def test_records_body_over_the_limit_is_413(v3: str, rest: RestGateway) -> None:
    topic = unique("rest-big")
    create_topic(rest.url, topic)
    record = json.dumps({"value": {"type": "STRING", "data": "x" * (12 * 1024 * 1024)}})
    reply = requests.post(
        f"{v3}/topics/{topic}/records", data=record, headers={"Content-Type": "application/json"}, timeout=60
    )
    assert (reply.status_code, reply.json()["error_code"]) == (413, 413)

    def streamed() -> Iterator[bytes]:
        yield b'{"value": {"type": "STRING", "data": "'
        for _ in range(13):
            yield b"y" * (1024 * 1024)
        yield b'"}}'

    answer = requests.post(
        f"{v3}/topics/{topic}/records",
        data=streamed(),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == 200 and json.loads(answer.text.splitlines()[0])["error_code"] == 413
    assert (
        requests.get(f"{rest.url}/topics/{topic}/partitions/0/offsets", timeout=30).json()["end_offset"] == 0
    )


def test_acls_on_a_cluster_with_an_authorizer(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    # The gateway connects as User:ANONYMOUS (plaintext), made a super user so that it may manage ACLs.
    config.write_text("authorizer: acl\nsuper_users: ['User:ANONYMOUS']\n")
    with (
        BrokerProcess(tmp_path / "data", config=config) as secured,
        rest_gateway(secured.bootstrap) as gateway,
    ):
        v3 = f"{gateway.url}/v3/clusters/{cluster_id(gateway.url)}"
        acl = {
            "resource_type": "TOPIC",
            "resource_name": "orders",
            "pattern_type": "LITERAL",
            "principal": "User:bob",
            "host": "*",
            "operation": "READ",
            "permission": "ALLOW",
        }
        assert requests.post(f"{v3}/acls", json=acl, timeout=30).status_code == 201
        assert (
            requests.post(
                f"{v3}/acls", json={**acl, "resource_name": "audit", "operation": "WRITE"}, timeout=30
            ).status_code
            == 201
        )
        listed = requests.get(f"{v3}/acls", params={"principal": "User:bob"}, timeout=30).json()["data"]
        assert sorted((a["resource_name"], a["operation"]) for a in listed) == [
            ("audit", "WRITE"),
            ("orders", "READ"),
        ]
        only = requests.get(
            f"{v3}/acls", params={"resource_type": "TOPIC", "resource_name": "orders"}, timeout=30
        )
        assert [a["operation"] for a in only.json()["data"]] == ["READ"]
        deleted = requests.delete(
            f"{v3}/acls",
            params={"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL"},
            timeout=30,
        )
        assert [a["resource_name"] for a in deleted.json()["data"]] == ["orders"]
        remaining = requests.get(f"{v3}/acls", timeout=30).json()["data"]
        assert [a["resource_name"] for a in remaining] == ["audit"]
        batch = [
            {**acl, "resource_type": "CLUSTER", "resource_name": "kafka-cluster", "operation": "DESCRIBE"},
            {**acl, "resource_type": "GROUP", "resource_name": "billing", "pattern_type": "PREFIXED"},
        ]
        assert requests.post(f"{v3}/acls:batch", json={"data": batch}, timeout=30).status_code == 204
        cluster_acls = requests.get(f"{v3}/acls", params={"resource_type": "CLUSTER"}, timeout=30).json()[
            "data"
        ]
        assert [(a["resource_type"], a["operation"]) for a in cluster_acls] == [("CLUSTER", "DESCRIBE")]
        grouped = requests.get(f"{v3}/acls", params={"resource_type": "GROUP"}, timeout=30).json()["data"]
        assert [(a["resource_name"], a["pattern_type"]) for a in grouped] == [("billing", "PREFIXED")]
        assert requests.delete(f"{v3}/acls", timeout=30).status_code == 400  # resource_type is required
