"""Offsets, metadata, two clusters, and sluice's batch and streaming consume."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from gateway_helpers import consume, eventually, expect_status, produce, unique_group

from sluice.gateway import Gateway
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc


async def test_get_and_set_offsets(kafka, pixy: pb_grpc.KafkaPixyStub) -> None:
    topic, group = kafka.create_topic(partitions=2), unique_group()
    for index in range(6):
        await pixy.Produce(pb.ProdRq(topic=topic, key_value=b"same", message=b"%d" % index))
    first = await consume(pixy, topic, group)
    partition = first.partition
    await consume(pixy, topic, group, ack=(partition, first.offset))  # leaves offset 1 un-acked

    async def committed_is_one() -> pb.PartitionOffset | None:
        reply = await pixy.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))
        view = {o.partition: o for o in reply.offsets}[partition]
        return view if view.offset == 1 else None

    view = await eventually(committed_is_one, within=5)
    assert view is not None
    assert (view.begin, view.end, view.count, view.lag) == (0, 6, 6, 5)

    await pixy.SetOffsets(
        pb.SetOffsetsRq(topic=topic, group=group, offsets=[pb.PartitionOffset(partition=partition, offset=4)])
    )
    reply = await pixy.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))
    assert {o.partition: o.offset for o in reply.offsets}[partition] == 4
    resumed = await consume(pixy, topic, group)
    assert (resumed.partition, resumed.offset) == (partition, 4)

    bad = pb.SetOffsetsRq(topic=topic, group=group, offsets=[pb.PartitionOffset(partition=7, offset=0)])
    await expect_status(pixy.SetOffsets(bad), grpc.StatusCode.INVALID_ARGUMENT)
    await expect_status(
        pixy.SetOffsets(pb.SetOffsetsRq(topic=topic, group=group)), grpc.StatusCode.INVALID_ARGUMENT
    )
    await expect_status(
        pixy.GetOffsets(pb.GetOffsetsRq(topic="missing-topic-x", group=group)), grpc.StatusCode.NOT_FOUND
    )


async def test_topic_listing_and_metadata(kafka, pixy: pb_grpc.KafkaPixyStub) -> None:
    topic = kafka.create_topic(partitions=3)
    listing = await pixy.ListTopics(pb.ListTopicRq(with_partitions=True))
    assert len(listing.topics[topic].partitions) == 3
    metadata = await pixy.GetTopicMetadata(pb.GetTopicMetadataRq(topic=topic, with_partitions=True))
    assert [p.partition for p in metadata.partitions] == [0, 1, 2]
    without = await pixy.GetTopicMetadata(pb.GetTopicMetadataRq(topic=topic))
    assert not without.partitions
    await expect_status(
        pixy.GetTopicMetadata(pb.GetTopicMetadataRq(topic="missing-topic-y")), grpc.StatusCode.NOT_FOUND
    )
    await expect_status(pixy.ListTopics(pb.ListTopicRq(cluster="nope")), grpc.StatusCode.INVALID_ARGUMENT)


async def test_list_consumers_with_one_to_three_members(kafka, make_gateway) -> None:
    topic, group = kafka.create_topic(partitions=3), unique_group()
    gateways: list[Gateway] = [await make_gateway() for _ in range(3)]
    channels = [grpc.aio.insecure_channel(g.grpc_address) for g in gateways]
    stubs = [pb_grpc.KafkaPixyStub(c) for c in channels]
    try:
        for count in (1, 2, 3):
            waiting = stubs[count - 1].ConsumeNAck(pb.ConsNAckRq(topic=topic, group=group, no_ack=True))

            async def members(count: int = count) -> dict[str, list[int]] | None:
                reply = await stubs[0].ListConsumers(pb.ListConsumersRq(topic=topic, group=group))
                found = {m: list(p.partitions) for m, p in reply.groups[group].consumers.items()}
                return found if len(found) == count else None

            found = await eventually(members, within=8 if "no_group_members" in kafka.quirks else 20)
            with pytest.raises(grpc.aio.AioRpcError):
                await waiting
            if found is None and "no_group_members" in kafka.quirks:
                pytest.xfail("this broker's DescribeGroups answers without members")
            assert found is not None
            assert sorted(p for partitions in found.values() for p in partitions) == [0, 1, 2]
    finally:
        for channel in channels:
            await channel.close()


async def test_two_clusters(kafka, second_kafka, make_gateway) -> None:
    gateway: Gateway = await make_gateway({"main": kafka, "other": second_kafka})
    topic = second_kafka.create_topic()
    group = unique_group()
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        written = await produce(stub, topic, b"on-other", cluster="other")
        assert written.offset == 0
        # The default (first) cluster does not have that topic.
        await expect_status(
            stub.GetTopicMetadata(pb.GetTopicMetadataRq(topic=topic)), grpc.StatusCode.NOT_FOUND
        )
        message = await consume(stub, topic, group, cluster="other")
        assert message.message == b"on-other"
        await stub.Ack(pb.AckRq(cluster="other", topic=topic, group=group, partition=0, offset=0))
        await expect_status(
            stub.Ack(pb.AckRq(cluster="main", topic=topic, group=group, partition=0, offset=0)),
            grpc.StatusCode.INVALID_ARGUMENT,
        )


async def test_consume_batch_with_acks(kafka, gateway: Gateway) -> None:
    topic, group = kafka.create_topic(), unique_group()
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy, sluice = pb_grpc.KafkaPixyStub(channel), pb_grpc.SluiceGatewayStub(channel)
        for index in range(5):
            await produce(pixy, topic, b"%d" % index)
        got: list[pb.ConsRs] = []
        for _ in range(20):
            try:
                reply = await sluice.ConsumeBatch(
                    pb.ConsBatchRq(topic=topic, group=group, max_messages=10 - len(got), wait_ms=1000)
                )
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.NOT_FOUND
                continue
            got.extend(reply.messages)
            if len(got) == 5:
                break
        assert [m.offset for m in got] == [0, 1, 2, 3, 4]
        acks = [pb.PartitionOffsetRef(partition=m.partition, offset=m.offset) for m in got]
        await expect_status(
            sluice.ConsumeBatch(pb.ConsBatchRq(topic=topic, group=group, acks=acks, wait_ms=300)),
            grpc.StatusCode.NOT_FOUND,
        )

        async def all_committed() -> bool:
            reply = await pixy.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))
            return reply.offsets[0].offset == 5

        assert await eventually(all_committed, within=5)


async def test_consume_stream_respects_credit_and_acks(kafka, gateway: Gateway) -> None:
    topic, group = kafka.create_topic(), unique_group()
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy, sluice = pb_grpc.KafkaPixyStub(channel), pb_grpc.SluiceGatewayStub(channel)
        for index in range(4):
            await produce(pixy, topic, b"%d" % index)
        requests: asyncio.Queue[pb.ConsStreamRq | None] = asyncio.Queue()
        await requests.put(pb.ConsStreamRq(topic=topic, group=group, credit=2))

        async def request_stream():  # type: ignore[no-untyped-def]
            while (request := await requests.get()) is not None:
                yield request

        call = sluice.ConsumeStream(request_stream())
        inbox: list[pb.ConsRs] = []

        async def read(count: int) -> list[pb.ConsRs]:
            # A reply may carry several messages: collect until `count` came.
            while len(inbox) < count:
                reply = await asyncio.wait_for(call.read(), 30)
                assert reply is not grpc.aio.EOF
                inbox.extend(reply.messages)
            taken = inbox[:count]
            del inbox[:count]
            return taken

        first_two = await read(2)
        assert [m.offset for m in first_two] == [0, 1]
        # No credit left: nothing more arrives until granted.
        pending = asyncio.ensure_future(call.read())
        done, _ = await asyncio.wait({pending}, timeout=1.5)
        assert not done and not inbox
        acks = [pb.PartitionOffsetRef(partition=0, offset=m.offset) for m in first_two]
        await requests.put(pb.ConsStreamRq(acks=acks, credit=2))
        inbox.extend((await asyncio.wait_for(pending, 10)).messages)
        rest = await read(2)
        assert sorted(m.offset for m in rest) == [2, 3]
        await requests.put(
            pb.ConsStreamRq(acks=[pb.PartitionOffsetRef(partition=0, offset=m.offset) for m in rest])
        )
        await requests.put(None)
        assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF

        async def all_committed() -> bool:
            reply = await pixy.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))
            return reply.offsets[0].offset == 4

        assert await eventually(all_committed, within=5)


async def test_shutdown_releases_waiting_consumers_with_unavailable(kafka, make_gateway) -> None:
    gateway: Gateway = await make_gateway(long_polling_timeout="10s")
    topic, group = kafka.create_topic(), unique_group()
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        waiting = asyncio.ensure_future(
            stub.ConsumeNAck(pb.ConsNAckRq(topic=topic, group=group, no_ack=True))
        )
        await asyncio.sleep(0.5)
        stopping = asyncio.ensure_future(gateway.stop())
        error = await expect_status(waiting, grpc.StatusCode.UNAVAILABLE)
        assert "shutting down" in (error.details() or "")
        await stopping


async def test_dead_letter_after_max_retries(kafka, make_gateway) -> None:
    topic, group = kafka.create_topic(), unique_group()
    gateway: Gateway = await make_gateway(ack_timeout="1s", max_retries=0, dead_letter_topic="{topic}.dead")
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        await produce(stub, topic, b"poison")
        await produce(stub, topic, b"fine")
        poison = await consume(stub, topic, group)
        assert poison.message == b"poison"
        # Never acked and no retries allowed: it is parked, and the next one flows.
        following = await consume(stub, topic, group, within=5)
        assert following.message == b"fine"
        await stub.Ack(pb.AckRq(topic=topic, group=group, partition=0, offset=following.offset))

        async def parked_topic_exists() -> bool:
            try:
                await stub.GetTopicMetadata(pb.GetTopicMetadataRq(topic=f"{topic}.dead"))
            except grpc.aio.AioRpcError:
                return False
            return True

        assert await eventually(parked_topic_exists, within=10)

        async def everything_committed() -> bool:
            reply = await stub.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))
            return reply.offsets[0].offset == 2

        assert await eventually(everything_committed, within=5)
        parked = await consume(stub, f"{topic}.dead", unique_group())
        assert parked.message == b"poison"
        assert b"0" in dict((h.key, h.value) for h in parked.headers)["sluice-dead-letter-origin"]


async def test_dead_letter_is_committed_only_once_the_dead_letter_topic_has_it(
    kafka_without_auto_create, make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    broker = kafka_without_auto_create
    topic, group = broker.create_topic(), unique_group()
    # No auto-creation on this broker: producing to the dead-letter topic fails until the test creates it.
    gateway: Gateway = await make_gateway(
        {"default": broker}, ack_timeout="1s", max_retries=0, dead_letter_topic="{topic}.dead"
    )
    caplog.set_level(logging.ERROR, logger="sluice.gateway.service")
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        stub = pb_grpc.KafkaPixyStub(channel)
        await produce(stub, topic, b"poison")
        await produce(stub, topic, b"fine")
        poison = await consume(stub, topic, group)
        assert (poison.offset, poison.message) == (0, b"poison")
        following = await consume(stub, topic, group, within=5)
        assert following.message == b"fine"
        await stub.Ack(pb.AckRq(topic=topic, group=group, partition=0, offset=following.offset))

        def produce_failures() -> int:
            return sum(f"not produced to {topic}.dead" in record.getMessage() for record in caplog.records)

        async def failed_twice() -> bool:
            return produce_failures() >= 2  # tried again after the backoff

        assert await eventually(failed_twice, within=10, every=0.05)

        async def ack_of_fine_committed() -> pb.PartitionOffset | None:
            view = (await stub.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))).offsets[0]
            return view if view.sparse_acks else None

        view = await eventually(ack_of_fine_committed, within=5, every=0.05)
        assert view is not None
        # "fine" is acked, the un-delivered dead letter still holds the commit point.
        assert (view.offset, view.sparse_acks) == (0, "1-2")
        # Parked, not handed out again while its produce is retried.
        await expect_status(
            stub.ConsumeNAck(pb.ConsNAckRq(topic=topic, group=group, no_ack=True)), grpc.StatusCode.NOT_FOUND
        )

        broker.create_topic(name=f"{topic}.dead")

        async def everything_committed() -> bool:
            reply = await stub.GetOffsets(pb.GetOffsetsRq(topic=topic, group=group))
            return reply.offsets[0].offset == 2

        assert await eventually(everything_committed, within=10, every=0.05)
        parked = await consume(stub, f"{topic}.dead", unique_group(), within=10)
        assert parked.message == b"poison"
        assert dict((h.key, h.value) for h in parked.headers)["sluice-dead-letter-origin"] == (
            f"{topic}/0/0".encode()
        )
        labels = {"cluster": "default", "group": group, "topic": topic}
        # Counted once when given up, however often its produce was tried.
        assert (
            gateway.service.metrics.registry.get_sample_value(
                "sluice_gateway_dead_lettered_messages_total", labels
            )
            == 1.0
        )


async def test_run_gateway_serves_until_stopped(kafka) -> None:
    from sluice.gateway import config_from_dict, run_gateway

    config = config_from_dict({"proxies": {"default": {"kafka": {"seed_peers": [kafka.bootstrap]}}}})
    stop = asyncio.Event()
    serving = asyncio.ensure_future(
        run_gateway(config, grpc_listen="127.0.0.1:0", http_listen="127.0.0.1:0", stop=stop)
    )
    await asyncio.sleep(0.5)
    assert not serving.done()
    stop.set()
    await asyncio.wait_for(serving, 10)
