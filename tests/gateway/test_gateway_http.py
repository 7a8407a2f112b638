"""kafka-pixy's HTTP API end to end with a real aiohttp client."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml
from gateway_helpers import JOIN_SECONDS, unique_group

from sluice.gateway import Gateway
from sluice.gateway.partitioners import sarama_hash_partition


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(gateway.http_url) as session:
        yield session


async def consume_http(
    http: aiohttp.ClientSession, path: str, params: dict[str, str], within: float = JOIN_SECONDS
) -> dict[str, Any]:
    """GET .../messages, calling again on 408 (long polling timeout) until `within` runs out."""
    deadline = time.monotonic() + within
    while True:
        async with http.get(path, params=params) as response:
            body = await response.json()
            if response.status == 200:
                return body
            assert response.status == 408, body
            assert body == {"error": "long polling timeout"}
        if time.monotonic() > deadline:
            raise AssertionError("nothing to consume")
        params = {k: v for k, v in params.items() if k not in ("ackPartition", "ackOffset")}


async def test_produce_and_consume_with_key_headers_and_acks(kafka, http: aiohttp.ClientSession) -> None:
    topic, group = kafka.create_topic(partitions=3), unique_group()
    async with http.post(
        f"/topics/{topic}/messages",
        params={"key": "user-7", "sync": ""},
        data=b'{"hello": 1}',
        headers={"Content-Type": "application/json", "X-Kafka-Trace-Id": base64.b64encode(b"abc").decode()},
    ) as response:
        assert response.status == 200
        produced = await response.json()
    assert produced["partition"] == sarama_hash_partition(b"user-7", 3)
    async with http.post(
        f"/topics/{topic}/messages", data="second", headers={"Content-Type": "text/plain"}
    ) as response:
        assert response.status == 200 and await response.json() == {}

    first = await consume_http(http, f"/topics/{topic}/messages", {"group": group, "noAck": ""})
    second = await consume_http(
        http,
        f"/topics/{topic}/messages",
        {"group": group, "ackPartition": str(first["partition"]), "ackOffset": str(first["offset"])},
    )
    by_value = {base64.b64decode(m["value"]): m for m in (first, second)}
    assert set(by_value) == {b'{"hello": 1}', b"second"}
    keyed = by_value[b'{"hello": 1}']
    assert base64.b64decode(keyed["key"]) == b"user-7"
    assert keyed["headers"] == [{"key": "Trace-Id", "value": base64.b64encode(b"abc").decode()}]
    assert by_value[b"second"]["key"] is None


async def test_consume_timeout_is_408_and_explicit_acks(kafka, http: aiohttp.ClientSession) -> None:
    topic, group = kafka.create_topic(), unique_group()
    async with http.get(f"/topics/{topic}/messages", params={"group": group}) as response:
        assert response.status == 408
        assert await response.json() == {"error": "long polling timeout"}
    async with http.post(
        f"/topics/{topic}/messages", params={"sync": ""}, data="x", headers={"Content-Type": "text/plain"}
    ) as response:
        assert response.status == 200
    message = await consume_http(http, f"/topics/{topic}/messages", {"group": group, "noAck": ""})
    async with http.post(
        f"/topics/{topic}/acks", params={"group": group, "partition": "0", "offset": str(message["offset"])}
    ) as response:
        assert response.status == 200 and await response.json() == {}


async def test_offsets_get_and_set(kafka, http: aiohttp.ClientSession) -> None:
    topic, group = kafka.create_topic(), unique_group()
    for index in range(4):
        async with http.post(
            f"/topics/{topic}/messages",
            params={"sync": ""},
            data=str(index),
            headers={"Content-Type": "text/plain"},
        ):
            pass
    for _ in range(2):  # plain GET acknowledges on the way out
        await consume_http(http, f"/topics/{topic}/messages", {"group": group})

    async def committed() -> dict[str, Any]:
        async with http.get(f"/topics/{topic}/offsets", params={"group": group}) as response:
            assert response.status == 200
            return (await response.json())[0]

    deadline = time.monotonic() + 5
    while (view := await committed())["offset"] != 2 and time.monotonic() < deadline:
        pass
    assert view == {"partition": 0, "begin": 0, "end": 4, "count": 4, "offset": 2, "lag": 2}

    async with http.post(
        f"/topics/{topic}/offsets", params={"group": group}, json=[{"partition": 0, "offset": 1}]
    ) as response:
        assert response.status == 200, await response.text()
    assert (await committed())["offset"] == 1
    again = await consume_http(http, f"/topics/{topic}/messages", {"group": group})
    assert again["offset"] == 1


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"{}",
        b"[]",
        b'[{"partition": 0}]',
        b'[{"partition": "0", "offset": 1}]',
        b'[{"partition": 0, "offset": -5}]',
        b'[{"partition": 0, "offset": 1, "metadata": 7}]',
        b'[{"partition": 9, "offset": 1}]',
        # A partition named twice: librdkafka refuses such a commit ("Duplicate partitions"), once a 500.
        b'[{"partition": 0, "offset": 1}, {"partition": 0, "offset": 2}]',
    ],
)
async def test_garbage_offsets_bodies_are_400_and_move_nothing(
    kafka, http: aiohttp.ClientSession, body: bytes
) -> None:
    topic, group = kafka.create_topic(), unique_group()
    async with http.post(f"/topics/{topic}/offsets", params={"group": group}, data=body) as response:
        assert response.status == 400
        assert "error" in await response.json()
    async with http.get(f"/topics/{topic}/offsets", params={"group": group}) as response:
        assert (await response.json())[0]["offset"] == -1


async def test_bad_input_statuses(kafka, http: aiohttp.ClientSession) -> None:
    topic, group = kafka.create_topic(), unique_group()
    text = {"Content-Type": "text/plain"}
    cases = [
        (http.post("/topics/bad%20topic/messages", data="x", headers=text), 400),
        (http.post(f"/topics/{topic}/messages", data="x", headers={"Content-Type": "image/png"}), 400),
        (http.post(f"/topics/{topic}/messages", data="x", headers={**text, "X-Kafka-H": "%%%"}), 400),
        (http.post(f"/topics/{topic}/messages", data="x" * 70_000, headers=text), 413),
        (http.post(f"/topics/{topic}/messages", params={"sync": ""}, data="x" * 40_000, headers=text), 413),
        (http.post(f"/clusters/nope/topics/{topic}/messages", data="x", headers=text), 400),
        (http.get(f"/topics/{topic}/messages"), 400),
        (http.get(f"/topics/{topic}/messages", params=[("group", "a"), ("group", "b")]), 400),
        (http.get(f"/topics/{topic}/messages", params={"group": group, "ackPartition": "0"}), 400),
        (
            http.get(
                f"/topics/{topic}/messages", params={"group": group, "ackPartition": "x", "ackOffset": "1"}
            ),
            400,
        ),
        (http.post(f"/topics/{topic}/acks", params={"group": group, "partition": "0", "offset": "3"}), 400),
        (http.post(f"/topics/{topic}/acks", params={"group": group}), 400),
        (http.get("/topics/no-such-topic-here"), 404),
        (http.get("/topics/no-such-topic-here/offsets", params={"group": group}), 404),
    ]
    for request, status in cases:
        async with request as response:
            body = await response.json()
            assert response.status == status, (response.url, body)
            assert body["error"]


async def test_topics_listing_and_metadata(kafka, http: aiohttp.ClientSession) -> None:
    topic = kafka.create_topic(partitions=2)
    async with http.get("/topics") as response:
        assert topic in await response.json()
    async with http.get("/topics", params={"withPartitions": "true"}) as response:
        assert len((await response.json())[topic]["partitions"]) == 2
    async with http.get(f"/topics/{topic}", params={"withPartitions": ""}) as response:
        body = await response.json()
        assert [p["partition"] for p in body["partitions"]] == [0, 1]
        assert all(p["leader"] >= 0 and p["replicas"] for p in body["partitions"])
    async with http.get(f"/clusters/default/topics/{topic}") as response:
        assert response.status == 200


async def test_service_endpoints(http: aiohttp.ClientSession) -> None:
    async with http.get("/_ping") as response:
        assert response.status == 200 and await response.text() == "pong"
    async with http.get("/_health") as response:
        assert (await response.json())["status"] == "ok"
    async with http.get("/openapi.yaml") as response:
        document = yaml.safe_load(await response.text())
        assert "/topics/{topic}/messages" in document["paths"]
    async with http.get("/topics/no-such-topic-z") as response:
        assert response.status == 404
    async with http.get("/metrics") as response:
        metrics = await response.text()
    assert (
        'sluice_gateway_requests_total{api="http",operation="get_topic_metadata",outcome="not_found"}'
        in metrics
    )


async def test_form_encoded_produce(kafka, http: aiohttp.ClientSession) -> None:
    topic = kafka.create_topic()
    async with http.post(
        f"/topics/{topic}/messages", params={"sync": ""}, data={"msg": "from a form"}
    ) as response:
        assert response.status == 200
        assert (await response.json())["offset"] == 0
    async with http.post(f"/topics/{topic}/messages", data={"other": "x"}) as response:
        assert response.status == 400
        assert await response.json() == {"error": "empty message"}


async def test_consumers_listing(kafka, make_gateway) -> None:
    topic, group = kafka.create_topic(partitions=3), unique_group()
    gateways = [await make_gateway() for _ in range(3)]
    sessions = [aiohttp.ClientSession(g.http_url) for g in gateways]
    try:
        for count, session in enumerate(sessions, start=1):
            async with session.get(f"/topics/{topic}/messages", params={"group": group}) as response:
                assert response.status in (200, 408)
            members: dict[str, Any] = {}
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                async with sessions[0].get(f"/topics/{topic}/consumers", params={"group": group}) as response:
                    assert response.status == 200
                    members = (await response.json()).get(group, {})
                if len(members) == count:
                    break
                if "no_group_members" in kafka.quirks:
                    pytest.xfail("this broker's DescribeGroups answers without members")
                async with session.get(f"/topics/{topic}/messages", params={"group": group}):
                    pass
            assert len(members) == count
            assert sorted(p for partitions in members.values() for p in partitions) == [0, 1, 2]
        async with sessions[0].get(f"/topics/{topic}/consumers") as response:
            assert group in await response.json()
    finally:
        for session in sessions:
            await session.close()


def test_openapi_document_is_packaged() -> None:
    from importlib import resources

    text = resources.files("sluice.gateway").joinpath("openapi.yaml").read_text()
    assert json.dumps(yaml.safe_load(text))


async def test_a_consumer_started_before_its_topic_exists_reads_it_once_created(
    kafka_without_auto_create, make_gateway
) -> None:
    """The consumer's first fetches find no topic (librdkafka hands it an UNKNOWN_TOPIC_OR_PART event); it
    keeps going, and reads what is produced once the topic is created."""
    broker = kafka_without_auto_create
    gateway = await make_gateway({"default": broker})
    topic, group = f"later-{unique_group()}", unique_group()
    async with aiohttp.ClientSession(gateway.http_url) as http:
        async with http.get(f"/topics/{topic}/messages", params={"group": group}) as response:
            assert response.status in (404, 408), await response.text()
        broker.create_topic(name=topic)
        async with http.post(
            f"/topics/{topic}/messages",
            params={"sync": ""},
            data="late",
            headers={"Content-Type": "text/plain"},
        ) as response:
            assert response.status == 200, await response.text()
        message = await consume_http(
            http, f"/topics/{topic}/messages", {"group": group, "noAck": ""}, within=30
        )
        assert base64.b64decode(message["value"]) == b"late"
