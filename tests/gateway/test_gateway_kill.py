"""kill -9 of a `sluice gateway` process mid-stream: no acknowledged produce is lost and every message is
delivered at least once after it comes back (unacked messages are redelivered)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import grpc
from confluent_kafka.admin import AdminClient, NewTopic
from gateway_helpers import wait_for_ping

from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc
from sluice.testing import BrokerProcess, free_port


def start_gateway(config: Path, grpc_port: int, http_port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "gateway",
            "--config",
            str(config),
            "--grpc-listen",
            f"127.0.0.1:{grpc_port}",
            "--http-listen",
            f"127.0.0.1:{http_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_ping(http_port, proc)
    return proc


def produce(stub: pb_grpc.KafkaPixyStub, topic: str, values: list[bytes]) -> list[bytes]:
    acked = []
    for value in values:
        reply = stub.Produce(pb.ProdRq(topic=topic, key_value=value, message=value), timeout=30)
        assert reply.offset >= 0
        acked.append(value)
    return acked


def consume(
    stub: pb_grpc.KafkaPixyStub, topic: str, want: set[bytes], seen: set[bytes], limit: int, deadline: float
) -> None:
    """ConsumeNAck in a loop, acking each message with the next call, until `want` is covered or `limit`."""
    ack: tuple[int, int] | None = None
    taken = 0
    while taken < limit and not want <= seen and time.monotonic() < deadline:
        request = pb.ConsNAckRq(topic=topic, group="survivors")
        if ack is None:
            request.no_ack = True
        else:
            request.ack_partition, request.ack_offset = ack
        try:
            reply = stub.ConsumeNAck(request, timeout=10)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE):
                ack = None
                continue
            raise
        seen.add(reply.message)
        ack = (reply.partition, reply.offset)
        taken += 1


def test_kill_9_of_the_gateway_loses_nothing_acknowledged(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("survive", 2, 1)])["survive"].result(10)
        config = tmp_path / "gateway.yaml"
        config.write_text(
            "proxies:\n  default:\n    kafka:\n      seed_peers: ['" + broker.bootstrap + "']\n"
            "    consumer:\n      ack_timeout: 3s\n      offsets_commit_interval: 100ms\n"
            "      long_polling_timeout: 1s\n      session_timeout: 6s\n"
        )
        grpc_port, http_port = free_port(), free_port()
        gateway = start_gateway(config, grpc_port, http_port)
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = pb_grpc.KafkaPixyStub(channel)
        acked = produce(stub, "survive", [f"first-{i}".encode() for i in range(60)])
        seen: set[bytes] = set()
        consume(stub, "survive", set(acked), seen, limit=25, deadline=time.monotonic() + 60)
        assert len(seen) >= 20

        gateway.kill()  # SIGKILL mid-stream: the last message handed out was never acked
        gateway.wait(10)
        channel.close()

        gateway = start_gateway(config, grpc_port, http_port)
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
            stub = pb_grpc.KafkaPixyStub(channel)
            acked += produce(stub, "survive", [f"second-{i}".encode() for i in range(60)])
            consume(stub, "survive", set(acked), seen, limit=10_000, deadline=time.monotonic() + 120)
            channel.close()
        finally:
            gateway.kill()
            gateway.wait(10)
    missing = set(acked) - seen
    assert not missing, f"{len(missing)} acknowledged messages never delivered, e.g. {sorted(missing)[:3]}"
