"""The driver ends the tasks' transactions over TLS and SASL, with the kafka.* settings the tasks' producers
get: against a secured sluice broker (trustme certificates, a SCRAM super user), without Spark."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.secure import SecureConnectError, connect_secure
from sluice.pipeline.kafka_io import ProduceFailedError
from sluice.pipeline.options import SinkOptions, parse_sink_options
from sluice.pipeline.transactional import TransactionalTask, check_transactions_supported, commit_prepared


def _settings(secure: Any, protocol: str, password: str | None = None) -> dict[str, Any]:
    mechanism = "SCRAM-SHA-512" if protocol == "SASL_SSL" else "SCRAM-SHA-256"
    return secure.admin_settings(mechanism, tls=protocol == "SASL_SSL", password=password)


def _options(settings: dict[str, Any], target: str) -> SinkOptions:
    return parse_sink_options(
        {
            "kafka.bootstrap.servers": settings["bootstrap.servers"],
            **{f"kafka.{k}": str(v) for k, v in settings.items() if k != "bootstrap.servers"},
            "topic": target,
            "deliveryGuarantee": "exactly-once",
        }
    )


def _topic(settings: dict[str, Any]) -> str:
    name = f"txn-secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(settings)  # must outlive the future
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def _read(settings: dict[str, Any], topic: str, isolation: str) -> list[bytes]:
    consumer = Consumer(
        {
            **settings,
            "group.id": "txn-secure-check",
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            break  # end of partition (the last stable offset for read_committed)
        values.append(message.value())
    consumer.close()
    return values


def _prepare(options: SinkOptions, prefix: str, target: str, shares: list[list[bytes]]) -> list[Any]:
    prepared = []
    for partition, values in enumerate(shares):
        task = TransactionalTask(options, prefix, batch_id=0, partition=partition, markers=False)
        assert task.begin()
        for value in values:
            task.tracker.produce(target, value=value, key=None, headers=None, partition=0, timestamp_ms=None)
        prepared.append(task.prepare())
        task.close()
    return prepared


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_prepared_transactions_are_committed_by_the_driver_over_sasl(secure: Any, protocol: str) -> None:
    settings = _settings(secure, protocol)
    target = _topic(settings)
    options = _options(settings, target)
    check_transactions_supported(options, driver_commits=True, markers=False)  # no refusal
    prefix = f"job-{target}"
    prepared = _prepare(options, prefix, target, [[b"a", b"b"], [b"c"]])
    assert _read(settings, target, "read_committed") == []
    assert _read(settings, target, "read_uncommitted") == [b"a", b"b", b"c"]
    commit_prepared(options, prepared)
    assert _read(settings, target, "read_committed") == [b"a", b"b", b"c"]


def test_a_driver_with_a_wrong_password_commits_nothing_and_a_retry_commits_all(secure: Any) -> None:
    settings = _settings(secure, "SASL_SSL")
    target = _topic(settings)
    options = _options(settings, target)
    prepared = _prepare(options, f"job-{target}", target, [[b"x"], [b"y"]])
    wrong = _options(_settings(secure, "SASL_SSL", password="not-the-password"), target)
    with pytest.raises(ProduceFailedError, match=r"cannot connect to any bootstrap server.*SaslAuthenticate"):
        commit_prepared(wrong, prepared)
    assert _read(settings, target, "read_committed") == []
    commit_prepared(options, prepared)  # the prepared transactions waited, still open
    assert _read(settings, target, "read_committed") == [b"x", b"y"]


def test_connect_secure_speaks_tls_with_a_client_certificate(secure: Any) -> None:
    settings = secure.mtls("pipeline-driver")
    host, _, port = settings["bootstrap.servers"].rpartition(":")
    with connect_secure(host, int(port), settings, 10) as client:
        reply = client.call("ApiVersions", 0, client.request_class("ApiVersions")())
    assert reply.error_code == 0 and reply.api_keys


def test_connect_secure_checks_the_brokers_certificate(secure: Any, tmp_path: Path) -> None:
    import trustme

    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    settings = {**_settings(secure, "SASL_SSL"), "ssl.ca.location": str(other)}
    host, _, port = settings["bootstrap.servers"].rpartition(":")
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        connect_secure(host, int(port), settings, 10)
    with pytest.raises(SecureConnectError, match="OAUTHBEARER"):
        connect_secure(host, int(port), {**settings, "sasl.mechanism": "OAUTHBEARER"}, 10)
