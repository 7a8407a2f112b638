"""Client-side helpers shared by the gateway end-to-end tests."""

from __future__ import annotations

import asyncio
import subprocess
import time
import urllib.request
import uuid
from typing import Any

import grpc

from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc

# A new group member needs a few seconds to join (Tansu delays the first rebalance ~3 s).
JOIN_SECONDS = 20.0


def wait_for_ping(http_port: int, proc: subprocess.Popen[Any], timeout: float = 60.0) -> None:
    """Wait until the gateway child process `proc` answers GET /_ping; kill it if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the gateway process exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/_ping", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError("the gateway did not answer /_ping")


def unique_group(prefix: str = "g") -> str:
    # Groups are never shared between tests: a broker may keep a stale member around.
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def consume(
    stub: pb_grpc.KafkaPixyStub,
    topic: str,
    group: str,
    *,
    cluster: str = "",
    ack: tuple[int, int] | None = None,
    auto_ack: bool = False,
    within: float = JOIN_SECONDS,
) -> pb.ConsRs:
    """ConsumeNAck, calling again on NotFound (long poll ended empty) until `within` runs out."""
    request = pb.ConsNAckRq(cluster=cluster, topic=topic, group=group)
    if ack is not None:
        request.ack_partition, request.ack_offset = ack
    elif auto_ack:
        request.auto_ack = True
    else:
        request.no_ack = True
    deadline = time.monotonic() + within
    while True:
        try:
            return await stub.ConsumeNAck(request)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
        # The ack, if any, went through with the first call.
        request = pb.ConsNAckRq(
            cluster=cluster, topic=topic, group=group, no_ack=not auto_ack, auto_ack=auto_ack
        )


async def consume_n(
    stub: pb_grpc.KafkaPixyStub, topic: str, group: str, count: int, *, cluster: str = ""
) -> list[pb.ConsRs]:
    return [await consume(stub, topic, group, cluster=cluster) for _ in range(count)]


async def produce(
    stub: pb_grpc.KafkaPixyStub, topic: str, value: bytes, key: bytes | None = None, *, cluster: str = ""
) -> pb.ProdRs:
    request = pb.ProdRq(cluster=cluster, topic=topic, message=value)
    if key is None:
        request.key_undefined = True
    else:
        request.key_value = key
    return await stub.Produce(request)


async def expect_status(call: object, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        assert error.code() == code, (error.code(), error.details())
        return error
    raise AssertionError(f"expected {code}, the call succeeded")


async def eventually(check: object, within: float = 15.0, every: float = 0.2) -> object:
    """Await `check()` until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        result = await check()  # type: ignore[operator]
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(every)
