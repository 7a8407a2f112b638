"""kafka-pixy's consume (gRPC and HTTP) on a partition with a corrupt record batch: what comes before it is
handed out, then callers are told where the partition cannot be read, instead of long polls ending empty."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import grpc
from confluent_kafka import Producer
from gateway_helpers import unique_group

from conftest import KafkaUnderTest
from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc
from sluice.testing import BrokerProcess, create_topic


async def test_a_corrupt_batch_is_reported_with_its_offset_once_what_precedes_it_is_consumed(
    tmp_path: Path, make_gateway, flip_a_byte: Callable[[Path], Path]
) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker.bootstrap, 1, name="bits", config={"segment.bytes": "100000"}, timeout=30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 50, "linger.ms": 5})
        for n in range(3000):
            producer.produce("bits", f"{n:06d}".encode().ljust(100, b"q"))
        assert producer.flush(30) == 0
        broker.stop()
        flip_a_byte(tmp_path / "data" / "bits-0")
        broker.restart()
        gateway = await make_gateway({"default": KafkaUnderTest(broker.bootstrap)}, initial_offset="oldest")
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
        [damage] = json.loads((tmp_path / "data" / "bits-0" / "damaged.json").read_text())["ranges"]
        assert offsets == list(range(damage["first_offset"]))
        assert stopped is not None, "long polls ended empty instead of naming the damaged offset"
        assert stopped.code() == grpc.StatusCode.DATA_LOSS, (stopped.code(), stopped.details())
        where = f"partition 0 of bits cannot be read at offset {damage['first_offset']}"
        assert where in stopped.details()
        async with (
            aiohttp.ClientSession(gateway.http_url) as http,
            http.get("/topics/bits/messages", params={"group": group}) as response,
        ):
            assert response.status == 500
            assert where in (await response.json())["error"]
    finally:
        broker.kill()
