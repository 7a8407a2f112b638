"""`sluice serve`, as `make serve` runs it: the broker and the gateway in one process, stopped together."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
from confluent_kafka import Consumer, TopicPartition
from gateway_helpers import wait_for_ping

from sluice.gateway.proto import kafkapixy_pb2 as pb
from sluice.gateway.proto import kafkapixy_pb2_grpc as pb_grpc
from sluice.testing import free_port


def test_serve_runs_broker_and_gateway_together_and_stops_on_sigterm(tmp_path: Path) -> None:
    kafka_port, grpc_port, http_port, admin_port = free_port(), free_port(), free_port(), free_port()
    rest_port, registry_port = free_port(), free_port()
    data_dir = tmp_path / "sluice-data"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "serve",
            "--kafka-listen",
            f"127.0.0.1:{kafka_port}",
            "--grpc-listen",
            f"127.0.0.1:{grpc_port}",
            "--http-listen",
            f"127.0.0.1:{http_port}",
            "--data-dir",
            str(data_dir),
            # Its own port for the web console `sluice serve` starts too (the default 8080 may be taken).
            "--console-listen",
            f"127.0.0.1:{free_port()}",
            "--metrics-listen",
            f"127.0.0.1:{admin_port}",
            "--rest-listen",
            f"127.0.0.1:{rest_port}",
            "--registry-listen",
            f"127.0.0.1:{registry_port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_ping(http_port, proc)
        request = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/topics/served/messages?key=k&sync",
            data=b"over http",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            http_ack = json.loads(reply.read())
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = pb_grpc.KafkaPixyStub(channel)
            grpc_ack = stub.Produce(
                pb.ProdRq(topic="served", key_value=b"k", message=b"over grpc"), timeout=30
            )
            # The same key picks the same partition, so the two land one after the other.
            assert (grpc_ack.partition, grpc_ack.offset) == (http_ack["partition"], http_ack["offset"] + 1)
            handed = stub.ConsumeNAck(pb.ConsNAckRq(topic="served", group="g", no_ack=True), timeout=30)
            assert (handed.partition, handed.offset, handed.message) == (
                http_ack["partition"],
                0,
                b"over http",
            )

        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{kafka_port}", "group.id": "direct"})
        try:
            consumer.assign([TopicPartition("served", http_ack["partition"], 0)])
            values = [m.value() for m in consumer.consume(2, timeout=20)]
        finally:
            consumer.close()
        assert values == [b"over http", b"over grpc"]
        # The REST Proxy API beside them reads the same topic.
        with urllib.request.urlopen(
            f"http://127.0.0.1:{rest_port}/topics/served/partitions/{http_ack['partition']}/offsets",
            timeout=30,
        ) as reply:
            assert json.loads(reply.read()) == {"beginning_offset": 0, "end_offset": 2}
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=30) as reply:
            assert 'sluice_topic_messages_in_total{topic="served"} 2.0' in reply.read().decode()
        # The gateway knows its broker's admin listener: setting offsets is a (live) rewind that says
        # where the offset landed (clamped to the log's end).
        rewind = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/topics/served/offsets?group=g",
            data=json.dumps([{"partition": http_ack["partition"], "offset": 50}]).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(rewind, timeout=30) as reply:
            assert json.loads(reply.read()) == {
                "offsets": [{"partition": http_ack["partition"], "requested": 50, "actual": 2}]
            }
        # The REST Proxy API writes avro through the registry served beside it.
        avro = urllib.request.Request(
            f"http://127.0.0.1:{rest_port}/topics/served",
            data=json.dumps({"value_schema": '"string"', "records": [{"value": "typed"}]}).encode(),
            method="POST",
            headers={"Content-Type": "application/vnd.kafka.avro.v2+json"},
        )
        # The registry starts after the gateway (it first reads its topic): until it is attached, the schema
        # formats are refused with 415, which a loaded machine can show here.
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(avro, timeout=30) as reply:
                    schema_id = json.loads(reply.read())["value_schema_id"]
                break
            except urllib.error.HTTPError as exc:
                if exc.code != 415 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with urllib.request.urlopen(
            f"http://127.0.0.1:{registry_port}/schemas/ids/{schema_id}", timeout=30
        ) as reply:
            assert json.loads(json.loads(reply.read())["schema"]) == "string"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            raise AssertionError(f"sluice serve ignored SIGTERM:\n{output}") from None
    assert proc.returncode == 0, output
    assert "shutting down" in output
    assert (data_dir / f"served-{http_ack['partition']}").is_dir()
