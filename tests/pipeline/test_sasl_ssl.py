"""format("sluice") against a SASL_SSL broker: librdkafka's security settings pass through `kafka.*`."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.spark

_spec = importlib.util.spec_from_file_location(
    "security_fixtures", Path(__file__).resolve().parent.parent / "security" / "secure_broker.py"
)
assert _spec is not None and _spec.loader is not None
security = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = security  # dataclasses look their module up
_spec.loader.exec_module(security)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    broker = security.start_secure_broker(tmp_path_factory.mktemp("spark-secure"))
    yield broker
    broker.process.kill()


def test_read_and_write_over_sasl_ssl(spark: Any, secure: Any) -> None:
    settings = secure.sasl(security.ADMIN, security.ADMIN_PASSWORD, "SCRAM-SHA-512")
    source, sink = f"spark-in-{uuid.uuid4().hex[:6]}", f"spark-out-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(settings)
    for future in admin.create_topics([NewTopic(source, 1, 1), NewTopic(sink, 1, 1)]).values():
        future.result(timeout=10)
    producer = Producer(settings)
    for i in range(10):
        producer.produce(source, b"v%d" % i)
    assert producer.flush(10) == 0
    options = {f"kafka.{k}": v for k, v in settings.items() if k != "bootstrap.servers"}
    frame = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", settings["bootstrap.servers"])
        .options(**options)
        .option("subscribe", source)
        .load()
    )
    assert sorted(bytes(r.value) for r in frame.collect()) == sorted(b"v%d" % i for i in range(10))
    (
        frame.select("value")
        .write.format("sluice")
        .option("kafka.bootstrap.servers", settings["bootstrap.servers"])
        .options(**options)
        .option("topic", sink)
        .mode("append")
        .save()
    )
    consumer = Consumer({**settings, "group.id": sink, "auto.offset.reset": "earliest"})
    consumer.subscribe([sink])
    got: list[bytes] = []
    for _ in range(40):
        got += [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]
        if len(got) >= 10:
            break
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(10))
