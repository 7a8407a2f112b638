"""kafka-pixy's consume (gRPC and HTTP) on a partition with a corrupt record batch: what comes before it is
handed out, then callers are told where the partition cannot be read, instead of long polls ending empty."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp
import grpc
from gateway_helpers import unique_group

from conftest import KafkaUnderTest
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc


async def test_a_corrupt_batch_is_reported_with_its_offset_once_what_precedes_it_is_consumed(
    make_gateway,
    corrupt_batch: Callable[[int], Any],  # tests/conftest.py's CorruptBatch
) -> None:
    damaged = corrupt_batch(1)
    gateway = await make_gateway(
        {"default": KafkaUnderTest(damaged.broker.bootstrap)}, initial_offset="oldest"
    )
    group = unique_group()
    offsets: list[int] = []
    stopped: grpc.aio.AioRpcError | None = None
    empty_polls = 0
    async with grpc.aio.insecure_channel(gateway.grpc_address) as channel:
        pixy = pb_grpc.KafkaPixyStub(channel)
        deadline = time.monotonic() + 120
        # Joining the group may take a few empty polls; after the first record, five in a row mean stuck.
        while stopped is None and time.monotonic() < deadline and not (offsets and empty_polls >= 5):
            try:
                reply = await pixy.ConsumeNAck(pb.ConsNAckRq(topic="bits", group=group, auto_ack=True))
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:  # a long poll that ended empty
                    empty_polls += 1
                else:
                    stopped = error
                continue
            assert reply.message.startswith(b"%06d" % reply.offset)
            offsets.append(reply.offset)
            empty_polls = 0
    first_bad, _ = damaged.damage()
    assert offsets == list(range(first_bad))
    assert stopped is not None, "long polls ended empty instead of naming the damaged offset"
    assert stopped.code() == grpc.StatusCode.DATA_LOSS, (stopped.code(), stopped.details())
    where = f"partition 0 of bits cannot be read at offset {first_bad}"
    assert where in stopped.details()
    async with (
        aiohttp.ClientSession(gateway.http_url) as http,
        http.get("/topics/bits/messages", params={"group": group}) as response,
    ):
        assert response.status == 500
        assert where in (await response.json())["error"]
