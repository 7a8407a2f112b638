"""A real `sluice gateway` process serving the REST Proxy API, and plain-HTTP helpers for its tests."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests
from confluent_kafka import Consumer, Message, TopicPartition

from sluice.testing import free_port

V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
JSON = "application/vnd.kafka.json.v2+json"


class RestGateway:
    """`sluice gateway` with only its REST listener: `source` is ("--bootstrap", HOST:PORT) or ("--config", FILE)."""

    def __init__(self, *source: str, auth: tuple[str, str] | None = None, ca_file: str | None = None) -> None:
        self.port = free_port()
        self.url = f"{'https' if ca_file else 'http'}://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sluice",
                "gateway",
                *source,
                "--grpc-listen",
                "",
                "--http-listen",
                "",
                "--rest-listen",
                f"127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.wait_ready(auth=auth, verify=ca_file or True)

    def wait_ready(self, timeout: float = 60.0, **kwargs: Any) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the gateway exited with {self.proc.returncode}"
            try:
                requests.get(f"{self.url}/brokers", timeout=2, **kwargs)
                return
            except requests.ConnectionError:
                time.sleep(0.1)
        self.proc.kill()
        raise TimeoutError("the REST Proxy API never answered")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@contextmanager
def rest_gateway(
    bootstrap: str, *extra: str, auth: tuple[str, str] | None = None, ca_file: str | None = None
) -> Iterator[RestGateway]:
    """A gateway in front of `bootstrap`; `extra` options go after it (e.g. "--config", FILE instead)."""
    source = extra if extra and extra[0] == "--config" else ("--bootstrap", bootstrap, *extra)
    gateway = RestGateway(*source, auth=auth, ca_file=ca_file)
    try:
        yield gateway
    finally:
        gateway.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def cluster_id(url: str) -> str:
    return requests.get(f"{url}/v3/clusters", timeout=30).json()["data"][0]["cluster_id"]


def create_topic(url: str, name: str, partitions: int = 1, **configs: str) -> None:
    body = {
        "topic_name": name,
        "partitions_count": partitions,
        "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()],
    }
    reply = requests.post(f"{url}/v3/clusters/{cluster_id(url)}/topics", json=body, timeout=30)
    assert reply.status_code == 201, reply.text


def produce_json(url: str, topic: str, values: list[Any]) -> list[dict[str, Any]]:
    reply = requests.post(
        f"{url}/topics/{topic}",
        json={"records": [{"value": v} for v in values]},
        headers={"Content-Type": JSON},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["offsets"]


def new_consumer(url: str, group: str, **settings: Any) -> str:
    """Create a consumer instance; its base URI."""
    reply = requests.post(f"{url}/consumers/{group}", json=settings, headers={"Content-Type": V2}, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()["base_uri"]


def records_until(
    base: str, count: int, *, fmt: str = JSON, within: float = 30.0, session: Any = requests
) -> list[dict[str, Any]]:
    """GET records until `count` have come (a new member needs a moment to join its group)."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + within
    while len(found) < count and time.monotonic() < deadline:
        reply = session.get(f"{base}/records", params={"timeout": 500}, headers={"Accept": fmt}, timeout=30)
        assert reply.status_code == 200, reply.text
        found.extend(reply.json())
    return found


def reader_at(url: str, topic: str, fmt: str, offset: int = 0) -> str:
    """A consumer instance of the embedded format `fmt` on partition 0 of `topic`, at `offset`: its base URI."""
    base = new_consumer(url, unique(f"{fmt}-reader"), format=fmt)
    partition = {"topic": topic, "partition": 0}
    for path, body in (
        ("assignments", {"partitions": [partition]}),
        ("positions", {"offsets": [{**partition, "offset": offset}]}),
    ):
        reply = requests.post(f"{base}/{path}", json=body, headers={"Content-Type": V2}, timeout=30)
        assert reply.status_code == 204, reply.text
    return base


def read_formatted(url: str, topic: str, fmt: str, count: int, offset: int = 0) -> list[dict[str, Any]]:
    """The first `count` records of partition 0 of `topic` from `offset` on, through a consumer instance of the
    embedded format `fmt` (deleted afterwards)."""
    base = reader_at(url, topic, fmt, offset)
    try:
        return records_until(base, count, fmt=f"application/vnd.kafka.{fmt}.v2+json")
    finally:
        requests.delete(base, timeout=30)


def direct_messages(bootstrap: str, topic: str, count: int, partition: int = 0) -> list[Message]:
    """The first `count` messages of a partition, read by a plain confluent-kafka consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("direct")})
    found: list[Message] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        for _ in range(15):
            found.extend(m for m in consumer.consume(count - len(found), timeout=2) if m.error() is None)
            if len(found) >= count:
                break
    finally:
        consumer.close()
    return found


@contextmanager
def registry_process(bootstrap: str, port: int = 0, name: str = "") -> Iterator[str]:
    """`sluice registry` on its own `_schemas` topic and election group (`name`, or a new one): its URL once it
    takes writes. Started again with the same port and name, it is the same registry."""
    port = port or free_port()
    name = name or unique("_schemas-rest")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sluice", "registry", "--bootstrap", bootstrap, "--listen", f"127.0.0.1:{port}",
         "--topic", name, "--group", f"{name}-group"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"the registry exited with {proc.returncode}"
            try:
                # A write answers once this registry is the primary.
                reply = requests.put(f"{url}/config/probe", json={"compatibility": "BACKWARD"}, timeout=5)
                if reply.status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the registry never took a write"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
