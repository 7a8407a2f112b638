"""The REST Proxy API v2 through a real `sluice gateway` process and the real broker, with plain HTTP."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import socket
import time

import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from kafka.partitioner.default import murmur2
from rest_helpers import (
    BINARY,
    JSON,
    V2,
    RestGateway,
    create_topic,
    direct_messages,
    new_consumer,
    produce_json,
    records_until,
    unique,
)

from sluice.testing import BrokerProcess


@pytest.fixture(scope="module")
def rest(rest_proxy: RestGateway) -> RestGateway:
    return rest_proxy


@pytest.fixture
def topic(rest: RestGateway) -> str:
    name = unique("rest-v2")
    create_topic(rest.url, name, partitions=2)
    return name


def test_metadata_topics_partitions_offsets_and_brokers(rest: RestGateway, topic: str) -> None:
    assert topic in requests.get(f"{rest.url}/topics", timeout=30).json()
    described = requests.get(f"{rest.url}/topics/{topic}", timeout=30)
    assert described.headers["Content-Type"].startswith(V2)
    body = described.json()
    assert body["name"] == topic and "retention.ms" in body["configs"]
    assert [p["partition"] for p in body["partitions"]] == [0, 1]
    assert body["partitions"][0]["replicas"] == [{"broker": 1, "leader": True, "in_sync": True}]
    assert len(requests.get(f"{rest.url}/topics/{topic}/partitions", timeout=30).json()) == 2
    assert requests.get(f"{rest.url}/topics/{topic}/partitions/1", timeout=30).json()["partition"] == 1
    produce_json(rest.url, topic, [1, 2, 3])
    ends = [
        requests.get(f"{rest.url}/topics/{topic}/partitions/{p}/offsets", timeout=30).json() for p in (0, 1)
    ]
    assert all(e["beginning_offset"] == 0 for e in ends)
    assert sum(e["end_offset"] for e in ends) == 3
    assert requests.get(f"{rest.url}/brokers", timeout=30).json() == {"brokers": [1]}


def test_produce_binary_and_json_lands_in_kafka(rest: RestGateway, topic: str, broker: BrokerProcess) -> None:
    binary = requests.post(
        f"{rest.url}/topics/{topic}/partitions/1",
        json={
            "records": [
                {"key": base64.b64encode(b"k").decode(), "value": base64.b64encode(b"\x00\xff").decode()}
            ]
        },
        headers={"Content-Type": BINARY, "Accept": V2},
        timeout=30,
    )
    assert binary.status_code == 200, binary.text
    assert binary.json() == {
        "key_schema_id": None,
        "value_schema_id": None,
        "offsets": [{"partition": 1, "offset": 0, "error_code": None, "error": None}],
    }
    answer = requests.post(
        f"{rest.url}/topics/{topic}",
        json={
            "records": [
                {"value": {"a": [1, None]}, "partition": 1},
                {"key": "k2", "value": None, "partition": 1},
            ]
        },
        headers={"Content-Type": JSON},
        timeout=30,
    ).json()
    assert [(o["partition"], o["offset"]) for o in answer["offsets"]] == [(1, 1), (1, 2)]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("direct")})
    try:
        consumer.assign([TopicPartition(topic, 1, 0)])
        messages = []
        while len(messages) < 3:
            messages.extend(m for m in consumer.consume(3, timeout=10) if m.error() is None)
    finally:
        consumer.close()
    assert [(m.key(), m.value()) for m in messages] == [
        (b"k", b"\x00\xff"),
        (None, b'{"a":[1,null]}'),
        (b'"k2"', None),
    ]


def test_bodies_are_read_as_json_reads_them(rest: RestGateway, broker: BrokerProcess) -> None:
    """The json format keeps an integer beyond 64 bits exact; a binary body that msgspec (its fast path) refuses,
    here UTF-16, is read by json; a partition beyond any int32 is refused by name; a malformed body is 422."""
    name = unique("rest-json-wide")
    create_topic(rest.url, name)
    wide = b'{"records":[{"value":{"n":123456789012345678901234567890}}]}'
    binary = json.dumps({"records": [{"value": base64.b64encode(b"wide").decode()}]})
    for body, content_type in (
        (wide, JSON),
        (wide.decode().encode("utf-16"), JSON),
        (binary.encode("utf-16"), BINARY),
    ):
        reply = requests.post(
            f"{rest.url}/topics/{name}", data=body, headers={"Content-Type": content_type}, timeout=30
        )
        assert reply.status_code == 200, reply.text
    assert [m.value() for m in direct_messages(broker.bootstrap, name, 3)] == [
        b'{"n":123456789012345678901234567890}',
        b'{"n":123456789012345678901234567890}',
        b"wide",
    ]
    huge = '{"records":[{"value":"AA==","partition":123456789012345678901234567890}]}'
    refused = requests.post(
        f"{rest.url}/topics/{name}", data=huge, headers={"Content-Type": BINARY}, timeout=30
    )
    assert refused.status_code == 422 and "records[0].partition" in refused.json()["message"]
    malformed = requests.post(
        f"{rest.url}/topics/{name}", data=b'{"records":[', headers={"Content-Type": JSON}, timeout=30
    )
    # Confluent's JsonParseExceptionMapper: malformed JSON is 400.
    assert malformed.status_code == 400 and malformed.json()["error_code"] == 400


@pytest.mark.parametrize(
    ("path", "headers", "body", "status", "code"),
    [
        ("/topics/{topic}", {"Content-Type": "text/plain"}, "x", 415, 415),
        (
            "/topics/{topic}",
            {"Content-Type": "application/vnd.kafka.avro.v2+json"},
            '{"records":[]}',
            415,
            415,
        ),
        # Malformed JSON, and JSON of another shape than Confluent's entity: Jackson's errors, 400.
        ("/topics/{topic}", {"Content-Type": BINARY}, '{"records":', 400, 400),
        ("/topics/{topic}", {"Content-Type": BINARY}, '{"records":"should be an array"}', 400, 400),
        ("/topics/{topic}", {"Content-Type": BINARY}, '{"records":[]}', 422, 422),
        (
            "/topics/{topic}",
            {"Content-Type": BINARY},
            '{"records":[{"value":"ok=="},{"value":"!"}]}',
            400,
            400,
        ),
        # Binary records are decoded in one pass; a malformed one anywhere is still named.
        ("/topics/{topic}", {"Content-Type": BINARY}, '{"records":[{"value":"ok=="},{"key":5}]}', 400, 400),
        ("/topics/{topic}", {"Content-Type": BINARY}, '{"records":[{"value":"ok=="},"x"]}', 400, 400),
        (
            "/topics/{topic}",
            {"Content-Type": BINARY},
            '{"records":[{"value":"ok==","partition":-1}]}',
            422,
            422,
        ),
        ("/topics/{topic}", {"Content-Type": BINARY, "Accept": "text/html"}, '{"records":[{}]}', 406, 40601),
        ("/topics/no-such-topic-x", {"Content-Type": JSON}, '{"records":[{"value":1}]}', 404, 40401),
        ("/topics/{topic}/partitions/7", {"Content-Type": JSON}, '{"records":[{"value":1}]}', 404, 40402),
        ("/topics/{topic}", {"Content-Type": JSON}, '{"records":[{"value":1,"partition":9}]}', 404, 40402),
    ],
)
def test_produce_errors_carry_confluent_codes(
    rest: RestGateway, topic: str, path: str, headers: dict[str, str], body: str, status: int, code: int
) -> None:
    reply = requests.post(rest.url + path.format(topic=topic), data=body, headers=headers, timeout=30)
    assert reply.status_code == status, reply.text
    assert reply.json()["error_code"] == code
    assert reply.json()["message"] and "Traceback" not in reply.text
    if '{"value":"ok=="},' in body:  # the second record is the bad one
        assert "records[1]" in reply.json()["message"]


def test_metadata_and_routing_errors(rest: RestGateway, topic: str) -> None:
    for path, status, code in [
        ("/topics/nope-missing", 404, 40401),
        (f"/topics/{topic}/partitions/5", 404, 40402),
        (f"/topics/{topic}/partitions/5/offsets", 404, 40402),
        ("/consumers/g/instances/nobody/subscription", 404, 40403),
        ("/consumers/g/instances/nobody/records", 404, 40403),
        ("/no/such/path", 404, 404),
    ]:
        reply = requests.get(rest.url + path, timeout=30)
        assert (reply.status_code, reply.json()["error_code"]) == (status, code), path
    assert (
        requests.get(f"{rest.url}/topics", headers={"Accept": "text/html"}, timeout=30).json()["error_code"]
        == 40601
    )


def test_oversized_body_is_413(rest: RestGateway, topic: str) -> None:
    huge = '{"records":[{"value":"' + "A" * (12 * 1024 * 1024) + '"}]}'
    reply = requests.post(
        f"{rest.url}/topics/{topic}", data=huge, headers={"Content-Type": BINARY}, timeout=60
    )
    assert reply.status_code == 413
    assert reply.json()["error_code"] == 413


def test_consumer_instance_lifecycle(rest: RestGateway, topic: str) -> None:
    spread = {"records": [{"value": {"n": n}, "partition": n % 2} for n in range(6)]}
    assert requests.post(
        f"{rest.url}/topics/{topic}", json=spread, headers={"Content-Type": JSON}, timeout=30
    ).ok
    group = unique("rest-group")
    base = new_consumer(
        rest.url,
        group,
        name="c1",
        format="json",
        **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"},
    )
    assert base == f"{rest.url}/consumers/{group}/instances/c1"
    again = requests.post(
        f"{rest.url}/consumers/{group}", json={"name": "c1"}, headers={"Content-Type": V2}, timeout=30
    )
    assert (again.status_code, again.json()["error_code"]) == (409, 40902)
    assert (
        requests.post(
            f"{base}/subscription", json={"topics": [topic]}, headers={"Content-Type": V2}, timeout=30
        ).status_code
        == 204
    )
    assert requests.get(f"{base}/subscription", timeout=30).json() == {"topics": [topic]}
    records = records_until(base, 6)
    assert sorted(r["value"]["n"] for r in records) == list(range(6))
    assert all(r["topic"] == topic and r["key"] is None for r in records)
    wrong = requests.get(f"{base}/records", headers={"Accept": BINARY}, timeout=30)
    assert (wrong.status_code, wrong.json()["error_code"]) == (406, 40601)
    # Commit naming the last consumed offset of partition 0: Kafka holds the next one to read.
    last_of_0 = max(r["offset"] for r in records if r["partition"] == 0)
    committed = requests.post(
        f"{base}/offsets",
        json={"offsets": [{"topic": topic, "partition": 0, "offset": last_of_0}]},
        headers={"Content-Type": V2},
        timeout=30,
    )
    assert committed.status_code == 200
    read = requests.get(
        f"{base}/offsets",
        json={"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]},
        headers={"Content-Type": V2},
        timeout=30,
    ).json()["offsets"]
    assert [(o["partition"], o["offset"]) for o in read] == [(0, last_of_0 + 1), (1, -1001)]
    # Commit without a body: everything handed out.
    assert requests.post(f"{base}/offsets", timeout=30).status_code == 200
    read = requests.get(
        f"{base}/offsets",
        json={"partitions": [{"topic": topic, "partition": 1}]},
        headers={"Content-Type": V2},
        timeout=30,
    ).json()["offsets"]
    assert read[0]["offset"] == 1 + max(r["offset"] for r in records if r["partition"] == 1)
    # Seek back to the beginning: the same records again.
    partitions = {"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]}
    assert (
        requests.post(
            f"{base}/positions/beginning", json=partitions, headers={"Content-Type": V2}, timeout=30
        ).status_code
        == 204
    )
    assert sorted(r["value"]["n"] for r in records_until(base, 6)) == list(range(6))
    assert requests.delete(f"{base}/subscription", timeout=30).status_code == 204
    assert requests.get(f"{base}/subscription", timeout=30).json() == {"topics": []}
    assert requests.delete(base, timeout=30).status_code == 204
    gone = requests.get(f"{base}/records", timeout=30)
    assert (gone.status_code, gone.json()["error_code"]) == (404, 40403)


def test_assignments_positions_and_max_bytes(rest: RestGateway, topic: str) -> None:
    offsets = requests.post(
        f"{rest.url}/topics/{topic}/partitions/0",
        json={"records": [{"value": base64.b64encode(bytes([n]) * 100).decode()} for n in range(10)]},
        headers={"Content-Type": BINARY},
        timeout=30,
    ).json()["offsets"]
    assert [o["offset"] for o in offsets] == list(range(10))
    base = new_consumer(rest.url, unique("rest-assign"), format="binary")
    assign = {"partitions": [{"topic": topic, "partition": 0}]}
    assert (
        requests.post(
            f"{base}/assignments", json=assign, headers={"Content-Type": V2}, timeout=30
        ).status_code
        == 204
    )
    assert requests.get(f"{base}/assignments", timeout=30).json() == assign
    subscribe = requests.post(
        f"{base}/subscription", json={"topics": [topic]}, headers={"Content-Type": V2}, timeout=30
    )
    assert subscribe.status_code == 409
    seek = {"offsets": [{"topic": topic, "partition": 0, "offset": 4}]}
    assert (
        requests.post(f"{base}/positions", json=seek, headers={"Content-Type": V2}, timeout=30).status_code
        == 204
    )
    first = []
    while not first:
        reply = requests.get(
            f"{base}/records",
            params={"timeout": 1000, "max_bytes": 250},
            headers={"Accept": BINARY},
            timeout=30,
        )
        assert reply.headers["Content-Type"].startswith(BINARY)
        first = reply.json()
    # 250 bytes hold two 100-byte values; the rest wait for the next call, nothing skipped.
    assert [r["offset"] for r in first] == [4, 5]
    assert base64.b64decode(first[0]["value"]) == bytes([4]) * 100
    rest_of_them = records_until(base, 4, fmt=BINARY)
    assert [r["offset"] for r in rest_of_them] == [6, 7, 8, 9]
    end = requests.post(f"{base}/positions/end", json=assign, headers={"Content-Type": V2}, timeout=30)
    assert end.status_code == 204
    assert (
        requests.get(
            f"{base}/records", params={"timeout": 300}, headers={"Accept": BINARY}, timeout=30
        ).json()
        == []
    )
    not_held = {"offsets": [{"topic": topic, "partition": 1, "offset": 0}]}
    assert (
        requests.post(
            f"{base}/positions", json=not_held, headers={"Content-Type": V2}, timeout=30
        ).status_code
        == 409
    )
    assert requests.delete(base, timeout=30).status_code == 204


def test_binary_records_carry_keys_nulls_and_partitions_as_produced(rest: RestGateway, topic: str) -> None:
    """Every combination of a null, empty or present key and value, on both partitions, read back in the binary
    format as they were sent."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    sent = [
        {"key": b64(b"k0"), "value": b64(b"\x00\xffv0"), "partition": 0},
        {"key": None, "value": b64(b"v1"), "partition": 1},
        {"key": b64(b"k2"), "value": None, "partition": 0},
        {"key": None, "value": None, "partition": 1},
        {"key": b64(b""), "value": b64(b"%d"), "partition": 0},
    ]
    reply = requests.post(
        f"{rest.url}/topics/{topic}", json={"records": sent}, headers={"Content-Type": BINARY}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    offsets = [(o["partition"], o["offset"]) for o in reply.json()["offsets"]]
    assert offsets == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]
    base = new_consumer(rest.url, unique("rest-nulls"), format="binary", **{"auto.offset.reset": "earliest"})
    subscribe = requests.post(
        f"{base}/subscription", json={"topics": [topic]}, headers={"Content-Type": V2}, timeout=30
    )
    assert subscribe.status_code == 204
    got = records_until(base, len(sent), fmt=BINARY)
    by_position = {(r["partition"], r["offset"]): r for r in got}
    assert len(got) == len(sent) and set(by_position) == set(offsets)
    for record, position in zip(sent, offsets, strict=True):
        answer = by_position[position]
        assert answer["topic"] == topic
        assert (answer["key"], answer["value"]) == (record["key"], record["value"]), answer


def test_consumer_bodies_are_validated(rest: RestGateway) -> None:
    group = unique("rest-bad")
    for body, code in [
        ({"format": "xml"}, 42204),
        ({"auto.offset.reset": "sometimes"}, 42204),
        ({"auto.commit.enable": "maybe"}, 42204),
        ({"name": "bad name!"}, 42204),
    ]:
        reply = requests.post(
            f"{rest.url}/consumers/{group}", json=body, headers={"Content-Type": V2}, timeout=30
        )
        assert (reply.status_code, reply.json()["error_code"]) == (422, code), body
    avro = requests.post(
        f"{rest.url}/consumers/{group}", json={"format": "avro"}, headers={"Content-Type": V2}, timeout=30
    )
    assert avro.status_code == 406 and "schema registry" in avro.json()["message"]
    wrong_type = requests.post(
        f"{rest.url}/consumers/{group}", data="{}", headers={"Content-Type": "text/plain"}, timeout=30
    )
    assert wrong_type.status_code == 415
    base = new_consumer(rest.url, group)
    for path, body in [
        ("/subscription", {}),
        ("/subscription", {"topics": [], "topic_pattern": "x"}),
        ("/subscription", {"topic_pattern": "("}),
        ("/assignments", {"partitions": [{"topic": "t", "partition": -1}]}),
        ("/positions", {"offsets": "all"}),
    ]:
        reply = requests.post(base + path, json=body, headers={"Content-Type": V2}, timeout=30)
        assert reply.status_code == 422, (path, body, reply.text)
    for query in ("timeout=soon", "timeout=-1", "max_bytes=1e6", "max_bytes=99999999999"):
        reply = requests.get(f"{base}/records?{query}", timeout=30)
        assert (reply.status_code, reply.json()["error_code"]) == (422, 422), query
        assert "between 0 and" in reply.json()["message"]
    requests.delete(base, timeout=30)


def test_records_a_client_never_received_are_handed_out_again(rest: RestGateway, topic: str) -> None:
    base = new_consumer(rest.url, unique("rest-gone"), format="binary", **{"auto.offset.reset": "earliest"})
    assign = {"partitions": [{"topic": topic, "partition": 0}]}
    requests.post(f"{base}/assignments", json=assign, headers={"Content-Type": V2}, timeout=30)
    path = base.removeprefix(rest.url)
    with socket.create_connection(("127.0.0.1", rest.port), timeout=30) as sock:
        # A long poll, and the client goes away before anything arrives.
        sock.sendall(f"GET {path}/records?timeout=5000 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n".encode())
    produced = requests.post(
        f"{rest.url}/topics/{topic}/partitions/0",
        json={"records": [{"value": base64.b64encode(b"kept").decode()}]},
        headers={"Content-Type": BINARY},
        timeout=30,
    ).json()["offsets"][0]["offset"]
    # Whether the abandoned poll took it or not, the next caller gets it: nothing handed to nobody is consumed.
    found = records_until(base, 1, fmt=BINARY)
    assert [(r["offset"], base64.b64decode(r["value"])) for r in found] == [(produced, b"kept")]
    requests.post(f"{base}/offsets", timeout=30)
    committed = requests.get(
        f"{base}/offsets",
        json={"partitions": [{"topic": topic, "partition": 0}]},
        headers={"Content-Type": V2},
        timeout=30,
    ).json()["offsets"][0]["offset"]
    assert committed == produced + 1
    requests.delete(base, timeout=30)


def test_deleting_an_instance_ends_its_long_poll(rest: RestGateway, topic: str) -> None:
    base = new_consumer(rest.url, unique("rest-poll"), format="binary")
    requests.post(
        f"{base}/assignments",
        json={"partitions": [{"topic": topic, "partition": 0}]},
        headers={"Content-Type": V2},
        timeout=30,
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        poll = pool.submit(
            requests.get,
            f"{base}/records",
            params={"timeout": 60_000},
            headers={"Accept": BINARY},
            timeout=90,
        )
        # The poll is under way once the instance is busy; deleting it must not wait out the minute.
        started = time.monotonic()
        assert requests.delete(base, timeout=90).status_code == 204
        answer = poll.result(timeout=90)
        assert time.monotonic() - started < 30
    assert answer.status_code in (200, 404)
    assert requests.delete(base, timeout=30).json()["error_code"] == 40403


def test_records_without_a_partition_go_where_the_java_producer_puts_them(
    rest: RestGateway, broker: BrokerProcess
) -> None:
    """A key's records go to murmur2(key) % partitions (kafka-python's murmur2 here: not sluice's own), in one
    request or many, mixed or alone; a request's null-key records stay together on one partition, and the
    next such request's go on to the next one."""
    name = unique("rest-placed")
    create_topic(rest.url, name, partitions=4)

    def post(records: list[dict]) -> list[tuple[int, int]]:
        reply = requests.post(
            f"{rest.url}/topics/{name}",
            json={"records": records},
            headers={"Content-Type": BINARY},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        return [(o["partition"], o["offset"]) for o in reply.json()["offsets"]]

    def where(key: bytes) -> int:
        return (murmur2(key) & 0x7FFFFFFF) % 4

    keys = [b"k%d" % i for i in range(12)]
    mixed = post([{"key": base64.b64encode(k).decode(), "value": "AA=="} for k in keys])
    assert [p for p, _ in mixed] == [where(k) for k in keys]
    one_key = post([{"key": base64.b64encode(b"same").decode(), "value": "AQ=="}] * 5)
    assert {p for p, _ in one_key} == {where(b"same")}
    offsets = [o for _, o in one_key]
    assert offsets == list(range(offsets[0], offsets[0] + 5))
    first, second = post([{"value": "Ag=="}] * 3), post([{"value": "Aw=="}] * 3)
    assert len({p for p, _ in first}) == 1 and len({p for p, _ in second}) == 1
    assert first[0][0] != second[0][0]
    # Every record sits where its answer put it.
    answered = mixed + one_key + first + second
    placed = {
        (m.partition(), m.offset()): m.key()
        for partition in range(4)
        for m in direct_messages(broker.bootstrap, name, sum(p == partition for p, _ in answered), partition)
    }
    assert [placed[position] for position in mixed] == keys
    assert {placed[position] for position in one_key} == {b"same"}
    assert {placed[position] for position in first + second} == {None}
