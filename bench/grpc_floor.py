"""The floor under any one-message-per-call gRPC API on this machine: a kafka-pixy servicer that does nothing.

`python bench/grpc_floor.py PORT` serves KafkaPixy.ConsumeNAck on 127.0.0.1:PORT with grpc.aio, the same
stack as the gateway, and answers every call with one fixed 100-byte message: no Kafka, no bookkeeping.
gateway_bench.py calls it exactly as it calls the gateway's ConsumeNAck, so the two rows differ only by the
gateway's own work, and the floor's calls/s bounds what any grpc.aio service can reach here.
"""

from __future__ import annotations

import asyncio
import sys

from grpc import aio

from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc


class DoNothingServicer(pb_grpc.KafkaPixyServicer):
    def __init__(self, payload_size: int) -> None:
        self.reply = pb.ConsRs(partition=0, offset=0, key_undefined=True, message=b"f" * payload_size)

    async def ConsumeNAck(self, request: pb.ConsNAckRq, context: aio.ServicerContext) -> pb.ConsRs:
        return self.reply


async def serve(port: int, payload_size: int) -> None:
    server = aio.server()
    pb_grpc.add_KafkaPixyServicer_to_server(DoNothingServicer(payload_size), server)
    if not server.add_insecure_port(f"127.0.0.1:{port}"):
        raise OSError(f"cannot listen on 127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 100))
