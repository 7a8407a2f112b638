"""Flow control of the consume path: buffering, pausing and resuming partitions, range acks and batches."""

from __future__ import annotations

import time

import grpc
import pytest
from confluent_kafka import Producer
from gateway_helpers import unique_group

from sluice.gateway import Gateway, consumer
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc


def fill(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index in range(count):
        producer.produce(topic, b"%d" % index, partition=index % partitions)
    assert producer.flush(30) == 0


async def consume_batches(
    sluice: pb_grpc.SluiceGatewayStub, topic: str, group: str, total: int, within: float = 60.0
) -> tuple[list[tuple[int, int]], float]:
    """ConsumeBatch until `total` messages came, acking each batch with the next call.

    Returns (partition, offset) in the order handed out and the seconds from the first batch to the last.
    """
    got: list[tuple[int, int]] = []
    acks: list[pb.PartitionOffsetRef] = []
    first_at = 0.0
    deadline = time.monotonic() + within
    while len(got) < total and time.monotonic() < deadline:
        try:
            reply = await sluice.ConsumeBatch(
                pb.ConsBatchRq(topic=topic, group=group, acks=acks, max_messages=200, wait_ms=1000)
            )
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
            acks = []
            continue
        if not got:
            first_at = time.monotonic()
        got.extend((m.partition, m.offset) for m in reply.messages)
        acks = [pb.PartitionOffsetRef(partition=m.partition, offset=m.offset) for m in reply.messages]
    return got, time.monotonic() - first_at


async def test_resumed_partitions_fetch_again_at_once(
    kafka, make_gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small buffer makes the gateway pause and resume the partition every few hundred messages.
    # librdkafka used to notice each resume only about a second later; 5,000 messages are ~10 such
    # cycles, so the old stall would take ~10 s where a prompt resume takes well under one.
    monkeypatch.setattr(consumer, "_BUFFER_HIGH_WATER", 50)
    gateway: Gateway = await make_gateway(max_pending_messages=1000)
    topic, group, total = kafka.create_topic(), unique_group(), 5000
    fill(kafka.bootstrap, topic, total)
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        got, seconds = await consume_batches(pb_grpc.SluiceGatewayStub(channel), topic, group, total)
    assert sorted(offset for _, offset in got) == list(range(total))
    assert seconds < 5.0, f"{total} messages took {seconds:.1f} s: resumed partitions stall"
