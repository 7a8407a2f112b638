"""kafka-pixy's ConsumeNAck/Ack on a share group (consumer.group_backends: share), over real gRPC and HTTP calls
against the real broker: acks are the broker's, a message not acked comes back after the group's lock
duration, several gateways share one group, and a gateway that dies gives its messages back at once."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from gateway_helpers import expect_status, wait_for_ping

from conftest import GatewayFactory, KafkaUnderTest
from sluice.client.api_versions import BrokerApis
from sluice.client.wire import WireClient
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc
from sluice.gateway.share_groups import share_support_of
from sluice.testing import free_port

# Groups named share-* are served by share groups; every other group by the offset tracker.
SHARE = {"group_backends": {"share-*": "share"}, "long_polling_timeout": "500ms"}


def share_group() -> str:
    return f"share-{uuid.uuid4().hex[:8]}"


def topic_and_group(
    kafka: KafkaUnderTest, prefix: str, partitions: int = 1, **configs: str
) -> tuple[str, str]:
    """A new topic, and a new share group's name with these group configs set."""
    topic, group = kafka.create_topic(partitions, prefix), share_group()
    if configs:
        set_group_configs(kafka.bootstrap, group, **configs)
    return topic, group


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """Group configs (share.record.lock.duration.ms, ...), through IncrementalAlterConfigs on the GROUP."""
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]
    )
    for future in futures.values():
        future.result(10)


def describe_share_group(bootstrap: str, group: str) -> Any:
    """What the broker says of the group (ShareGroupDescribe): an error if it is not a share group."""
    with WireClient.connect(bootstrap) as client:
        request = client.request_class("ShareGroupDescribe")(
            group_ids=[group], include_authorized_operations=False
        )
        return client.call("ShareGroupDescribe", 1, request).groups[0]


async def produce_values(stub: pb_grpc.KafkaPixyStub, topic: str, values: list[bytes]) -> None:
    for value in values:  # one call each: one record batch each, so that fetches can split them
        await stub.Produce(pb.ProdRq(topic=topic, key_undefined=True, message=value))


async def take(
    stub: pb_grpc.KafkaPixyStub, topic: str, group: str, ack: tuple[int, int] | None = None
) -> pb.ConsRs:
    request = pb.ConsNAckRq(topic=topic, group=group)
    if ack is None:
        request.no_ack = True
    else:
        request.ack_partition, request.ack_offset = ack
    return await stub.ConsumeNAck(request)


async def take_within(stub: pb_grpc.KafkaPixyStub, topic: str, group: str, within: float) -> pb.ConsRs:
    """ConsumeNAck without an ack, calling again while long polls run out empty."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await take(stub, topic, group)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise


async def drain(
    stub: pb_grpc.KafkaPixyStub,
    topic: str,
    group: str,
    want: int,
    within: float = 20.0,
    pause: float = 0.0,
    seen: list[bytes] | None = None,
) -> list[pb.ConsRs]:
    """ConsumeNAck, acking each message with the next call, until `want` messages came (into `seen`, which
    other callers may share); the last one is acked."""
    got: list[pb.ConsRs] = []
    seen = [] if seen is None else seen
    ack: tuple[int, int] | None = None
    deadline = time.monotonic() + within
    while len(seen) < want and time.monotonic() < deadline:
        try:
            reply = await take(stub, topic, group, ack)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
            ack = None  # it went through with the call
            continue
        got.append(reply)
        seen.append(reply.message)
        ack = (reply.partition, reply.offset)
        await asyncio.sleep(pause)
    if ack is not None:
        await stub.Ack(pb.AckRq(topic=topic, group=group, partition=ack[0], offset=ack[1]))
    return got


async def test_consume_and_ack_through_a_share_group(
    kafka: KafkaUnderTest, make_gateway: GatewayFactory
) -> None:
    topic, group = topic_and_group(kafka, "share", 2)
    gateway = await make_gateway(**SHARE)
    values = [f"m{i}".encode() for i in range(12)]
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        await produce_values(stub, topic, values)
        got = await drain(stub, topic, group, 10)
        # The broker's view: a share group with this gateway's member, assigned both partitions.
        described = describe_share_group(kafka.bootstrap, group)
        assert described.error_code == 0 and len(described.members) == 1
        assert sorted(described.members[0].assignment.topic_partitions[0].partitions) == [0, 1]
        held = await take(stub, topic, group)  # handed out, never acked
    async with aiohttp.ClientSession() as http:
        # HTTP: acked on the way out (kafka-pixy's default); then nothing is left but the held message.
        async with http.get(f"{gateway.http_url}/topics/{topic}/messages", params={"group": group}) as reply:
            assert reply.status == 200
            got_http = [await reply.json()]
        params = {"group": group, "noAck": ""}
        async with http.get(f"{gateway.http_url}/topics/{topic}/messages", params=params) as reply:
            assert reply.status == 408  # the long poll runs out
        # A share group has no committed offsets: said so, with where to look instead.
        async with http.get(f"{gateway.http_url}/topics/{topic}/offsets", params={"group": group}) as reply:
            assert reply.status == 400 and "is a share group" in (await reply.json())["error"]
    assert len({(r.partition, r.offset) for r in got}) == 10
    seen = sorted([r.message for r in got] + [held.message] + [_value(m) for m in got_http])
    assert seen == sorted(values)

    # A clean restart: what was acked stays acked (the broker keeps it), the held message comes back at once
    # (the stopped gateway's member left, long before the group's 30 s lock would have run out).
    await gateway.stop()
    again = await make_gateway(**SHARE)
    async with grpc.aio.insecure_channel(again.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        started = time.monotonic()
        back = await drain(stub, topic, group, 1, within=10)
        assert [r.message for r in back] == [held.message] and time.monotonic() - started < 10
        await expect_status(take(stub, topic, group), grpc.StatusCode.NOT_FOUND)  # nothing else, ever
    url = f"{again.http_url}/topics/{topic}/messages"
    async with aiohttp.ClientSession() as http, http.get(url, params={"group": group}) as reply:
        assert reply.status == 408, await reply.text()  # kafka-pixy's long poll ran out


def _value(body: dict[str, Any]) -> bytes:
    return base64.b64decode(body["value"])


async def test_a_message_not_acked_comes_back_after_the_lock_duration(
    kafka: KafkaUnderTest, make_gateway: GatewayFactory
) -> None:
    topic, group = topic_and_group(kafka, "share-lock", 1, share_record_lock_duration_ms="1000")
    gateway = await make_gateway(**SHARE)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        await produce_values(stub, topic, [b"once", b"twice"])
        first = (await drain(stub, topic, group, 1))[0]  # acked
        dropped = await take(stub, topic, group)  # never acked
        handed_out = time.monotonic()
        batches = pb_grpc.SluiceGatewayStub(channel)
        # Waits: the only message left is held. It comes back as its second delivery (attempt 1).
        reply = await batches.ConsumeBatch(
            pb.ConsBatchRq(topic=topic, group=group, max_messages=10, wait_ms=5000, runs=True)
        )
        came_back = time.monotonic() - handed_out
        [run] = reply.runs
        assert (run.partition, run.first_offset, list(run.values), run.attempt) == (
            dropped.partition,
            dropped.offset,
            [b"twice"],
            1,
        )
        # The ack timeout is the lock (less a margin of 0.3 s at 1 s) plus a poll; never before.
        assert 0.5 < came_back < 3.0, came_back
        acked = pb.OffsetRange(partition=run.partition, begin=run.first_offset, end=run.first_offset + 1)
        await expect_status(
            batches.ConsumeBatch(
                pb.ConsBatchRq(topic=topic, group=group, ack_ranges=[acked], max_messages=1, wait_ms=1500)
            ),
            grpc.StatusCode.NOT_FOUND,  # acked now: it does not come back after another lock duration
        )
        await stub.Ack(pb.AckRq(topic=topic, group=group, partition=0, offset=dropped.offset))  # a repeat: ok
        error = await expect_status(
            stub.Ack(pb.AckRq(topic=topic, group=group, partition=0, offset=99)),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "not handed out" in error.details()
    assert first.message == b"once"


async def test_a_message_held_by_a_caller_gone_does_not_hold_up_the_others(
    kafka: KafkaUnderTest, make_gateway: GatewayFactory
) -> None:
    topic, group = topic_and_group(kafka, "share-gone", 1, share_assignment_interval_ms="0")
    gateway = await make_gateway(**SHARE)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        await produce_values(stub, topic, [b"lost"])
        lost = await take_within(stub, topic, group, 10)  # its caller is gone: never acked
        await produce_values(stub, topic, [f"next{i}".encode() for i in range(3)])
        started = time.monotonic()
        got = await drain(stub, topic, group, 3, within=10)
        # Served within about a second (a new member fetches), not after the group's 30 s lock.
        assert sorted(r.message for r in got) == [b"next0", b"next1", b"next2"]
        assert time.monotonic() - started < 5
    assert lost.message == b"lost"


async def test_two_gateways_on_one_group_get_distinct_messages(
    kafka: KafkaUnderTest, make_gateway: GatewayFactory
) -> None:
    # A new member gets its share of the partition at once (Kafka recomputes assignments once a second).
    topic, group = topic_and_group(kafka, "share-two", 1, share_assignment_interval_ms="0")
    gateways = [await make_gateway(share_max_poll_records=3, **SHARE) for _ in range(2)]
    values = [f"v{i}".encode() for i in range(30)]
    async with (
        grpc.aio.insecure_channel(gateways[0].grpc_address) as one,
        grpc.aio.insecure_channel(gateways[1].grpc_address) as two,
    ):
        stubs = [pb_grpc.KafkaPixyStub(one), pb_grpc.KafkaPixyStub(two)]
        for stub in stubs:  # both join the group before there is anything to take
            await expect_status(take(stub, topic, group), grpc.StatusCode.NOT_FOUND)
        assert len(describe_share_group(kafka.bootstrap, group).members) == 2
        await produce_values(stubs[0], topic, values)
        seen: list[bytes] = []  # shared: both stop once all 30 came, to one or the other
        results = await asyncio.gather(
            *(drain(stub, topic, group, 30, within=10, pause=0.01, seen=seen) for stub in stubs)
        )
    firsts, seconds = ([r.message for r in result] for result in results)
    assert firsts and seconds, (len(firsts), len(seconds))
    assert sorted(firsts + seconds) == sorted(values)  # each message to one gateway, once


def _gateway_process(tmp_path: Path, bootstrap: str) -> tuple[subprocess.Popen[bytes], int]:
    config = tmp_path / "gateway.yaml"
    consumer = {"long_polling_timeout": "1s", "offsets_commit_interval": "100ms", **SHARE}
    config.write_text(
        yaml.safe_dump({"proxies": {"default": {"kafka": {"seed_peers": [bootstrap]}, "consumer": consumer}}})
    )
    grpc_port, http_port = free_port(), free_port()
    command = [sys.executable, "-m", "sluice", "gateway", "--config", str(config)]
    command += ["--grpc-listen", f"127.0.0.1:{grpc_port}", "--http-listen", f"127.0.0.1:{http_port}"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_ping(http_port, proc)
    return proc, grpc_port


async def test_a_gateway_killed_holding_messages_gives_them_to_the_other(
    kafka: KafkaUnderTest, make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    topic, group = topic_and_group(kafka, "share-kill", 1, share_assignment_interval_ms="0")
    values = [f"k{i}".encode() for i in range(10)]
    doomed, port = _gateway_process(tmp_path, kafka.bootstrap)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.KafkaPixyStub(channel)
            await produce_values(stub, topic, values)
            held = [await take(stub, topic, group) for _ in range(3)]  # handed out, not acked
            assert all(r.message in values for r in held)
    finally:
        doomed.kill()  # SIGKILL: no acks sent, no goodbye
        doomed.wait(10)
    killed = time.monotonic()
    survivor = await make_gateway(**SHARE)
    async with grpc.aio.insecure_channel(survivor.grpc_address) as channel:
        got = await drain(pb_grpc.KafkaPixyStub(channel), topic, group, 10, within=20)
    # All of them: the 3 held and the 7 the dead gateway's member had fetched, well before the group's 30 s
    # lock could run out (the broker released them when the connection dropped).
    assert sorted(r.message for r in got) == sorted(values)
    assert time.monotonic() - killed < 15


async def test_a_consumer_group_id_configured_for_share_is_refused_clearly(
    kafka: KafkaUnderTest, make_gateway: GatewayFactory
) -> None:
    topic, group = topic_and_group(kafka, "share-clash")
    gateway = await make_gateway()  # the tracker: a consumer group of that id, with a committed offset
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        await produce_values(stub, topic, [b"classic"])
        assert [r.message for r in await drain(stub, topic, group, 1)] == [b"classic"]
    await gateway.stop()
    clashing = await make_gateway(**SHARE)
    async with grpc.aio.insecure_channel(clashing.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        # Long polls may run out before the broker's refusal comes back; then every call is refused.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await take_within(stub, topic, group, 10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
        assert "cannot be a share group" in (refused.value.details() or "")


@pytest.mark.parametrize(
    ("apis", "served"),
    [
        (BrokerApis({78: (1, 2)}), True),  # sluice: ShareFetch, no feature levels listed
        (BrokerApis({78: (1, 2)}, {"metadata.version": 27, "share.version": 1}), True),  # Kafka 4.2+
        (BrokerApis({78: (1, 2)}, {"metadata.version": 27}), False),  # Kafka 4.x, share.version off
        (BrokerApis({1: (0, 17)}), False),  # a broker before share groups
    ],
)
def test_share_groups_are_used_only_where_the_cluster_serves_them(apis: BrokerApis, served: bool) -> None:
    support = share_support_of("broker:9092", apis)
    assert support.served is served and "broker:9092" in support.reason
