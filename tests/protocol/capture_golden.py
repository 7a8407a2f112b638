"""Capture real clients' requests as golden files: `python tests/protocol/capture_golden.py`.

A loopback proxy sits between each client and a sluice broker and keeps the first request of every
(API, version) a client sends, byte for byte, under tests/protocol/golden/<client>/. test_golden_clients.py
then checks that sluice decodes each one and re-encodes it to the identical bytes.
"""

from __future__ import annotations

import asyncio
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from sluice.testing import BrokerProcess

GOLDEN = Path(__file__).parent / "golden"


class CaptureProxy:
    def __init__(self, upstream_port: int, out_dir: Path) -> None:
        self.upstream_port = upstream_port
        self.out_dir = out_dir
        self.seen: set[tuple[int, int]] = set()
        self.port = 0

    async def start(self) -> None:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def client_to_broker() -> None:
            try:
                while True:
                    size_bytes = await reader.readexactly(4)
                    body = await reader.readexactly(struct.unpack(">i", size_bytes)[0])
                    api_key, version = struct.unpack_from(">hh", body)
                    if (api_key, version) not in self.seen:
                        self.seen.add((api_key, version))
                        (self.out_dir / f"{api_key:02d}-v{version}.bin").write_bytes(body)
                    up_writer.write(size_bytes + body)
                    await up_writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                up_writer.close()

        async def broker_to_client() -> None:
            try:
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except ConnectionError:
                pass
            writer.close()

        await asyncio.gather(client_to_broker(), broker_to_client())


def run_proxy(upstream_port: int, out_dir: Path) -> CaptureProxy:
    proxy = CaptureProxy(upstream_port, out_dir)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(proxy.start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    ready.wait()
    return proxy


def confluent_flow(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("golden", 1, 1)])["golden"].result(10)
    admin.create_partitions([NewPartitions("golden", 2)])["golden"].result(10)
    resource = ConfigResource("topic", "golden")
    admin.describe_configs([resource])[resource].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4"})
    producer.produce("golden", key=b"k", value=b"v", headers=[("h", b"x")])
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "golden-cf", "auto.offset.reset": "earliest"})
    consumer.subscribe(["golden"])
    deadline = time.time() + 20
    while time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            break
    consumer.commit(asynchronous=False)
    consumer.offsets_for_times([TopicPartition("golden", 0, 0)], timeout=10)
    consumer.close()
    admin.list_consumer_groups().result(10)
    admin.describe_consumer_groups(["golden-cf"])["golden-cf"].result(10)
    admin.delete_topics(["golden"])["golden"].result(10)


def kafka_python_flow(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("golden-kp", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    producer.send("golden-kp", key=b"k", value=b"v", headers=[("h", b"x")]).get(10)
    producer.close()
    consumer = KafkaConsumer("golden-kp", bootstrap_servers=bootstrap, group_id="golden-kp",
                             auto_offset_reset="earliest", consumer_timeout_ms=8000)
    for _ in consumer:
        break
    consumer.commit()
    consumer.close()
    admin.close()


def aiokafka_flow(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, compression_type="zstd")
        await producer.start()
        await producer.send_and_wait("golden-aio", key=b"k", value=b"v", headers=[("h", b"x")])
        await producer.stop()
        consumer = AIOKafkaConsumer("golden-aio", bootstrap_servers=bootstrap, group_id="golden-aio",
                                    auto_offset_reset="earliest")
        await consumer.start()
        await asyncio.wait_for(consumer.getone(), 20)
        await consumer.commit()
        await consumer.stop()

    asyncio.run(run())


FLOWS = {"confluent-kafka": confluent_flow, "kafka-python": kafka_python_flow, "aiokafka": aiokafka_flow}


def main() -> None:
    for name, flow in FLOWS.items():
        out_dir = GOLDEN / name
        out_dir.mkdir(parents=True, exist_ok=True)
        # The broker advertises the proxy, so every connection a client opens goes through it.
        proxy = run_proxy(0, out_dir)
        with tempfile.TemporaryDirectory() as data, BrokerProcess(
            Path(data), extra_args=["--advertise", f"127.0.0.1:{proxy.port}"]
        ) as broker:
            proxy.upstream_port = broker.port
            flow(f"127.0.0.1:{proxy.port}")
        print(f"{name}: captured {len(proxy.seen)} request kinds", file=sys.stderr)


if __name__ == "__main__":
    main()
