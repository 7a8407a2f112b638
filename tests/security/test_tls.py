"""TLS listeners: mutual TLS names the principal after the certificate's CN, TLS 1.2 is the floor, and
SIGHUP reloads the certificate without dropping open connections."""

from __future__ import annotations

import signal
import socket
import ssl
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker, make_certificates, start_secure_broker
from wire_auth import connect, login


def deliver(settings: dict, topic: str) -> KafkaError | None:
    results: list = []
    producer = Producer({**settings, "message.timeout.ms": 5000})
    producer.produce(topic, b"m", on_delivery=lambda err, msg: results.append(err))
    producer.flush(10)
    assert results
    return results[0]


def test_mutual_tls_principal_is_the_certificate_cn(secure_broker: SecureBroker) -> None:
    name = f"svc{uuid.uuid4().hex[:6]}"
    topic = f"mtls-{name}"
    admin = AdminClient(secure_broker.admin_settings())
    for future in admin.create_acls(
        [
            AclBinding(
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                f"User:{name}",
                "*",
                AclOperation.ALL,
                AclPermissionType.ALLOW,
            )
        ]
    ).values():
        future.result(timeout=10)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=10)
    assert deliver(secure_broker.mtls(name), topic) is None
    # Another certificate, or none (User:ANONYMOUS), gets nothing.
    assert deliver(secure_broker.mtls(f"{name}x"), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert deliver(secure_broker.mtls(None), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_tls_below_1_2_is_refused(secure_broker: SecureBroker) -> None:
    context = ssl.create_default_context(cafile=str(secure_broker.certs.ca_path))
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    with (
        socket.create_connection(("127.0.0.1", secure_broker.ports["SSL"]), timeout=5) as raw,
        pytest.raises(ssl.SSLError),
    ):
        context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_required_client_auth_refuses_a_client_without_certificate(tmp_path) -> None:
    broker = start_secure_broker(tmp_path, ssl_client_auth="required")
    try:
        errors: list = []
        producer = Producer({**broker.mtls(None), "error_cb": errors.append})
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            producer.poll(0.1)
        assert errors and errors[0].code() in (
            KafkaError._SSL,
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
        )
        assert deliver(broker.mtls("alice"), "alice-topic").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        broker.process.kill()


def test_sighup_reloads_the_certificate_without_dropping_connections(tmp_path) -> None:
    broker = start_secure_broker(tmp_path)
    try:
        old_ca = str(broker.certs.ca_path)
        with connect(broker.address("SASL_SSL"), old_ca) as open_client:
            assert login(open_client, ADMIN, ADMIN_PASSWORD).error_code == 0
            fresh = make_certificates(tmp_path / "rotated")
            broker.certs.server_cert.write_bytes(fresh.server_cert.read_bytes())
            broker.certs.server_key.write_bytes(fresh.server_key.read_bytes())
            assert broker.process.proc is not None
            broker.process.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while not any("TLS certificate reloaded" in line for line in broker.process.output):
                assert time.monotonic() < deadline, "no reload logged"
                time.sleep(0.05)
            # New connections get the new certificate: the new CA verifies it, the old one does not.
            with connect(broker.address("SASL_SSL"), str(fresh.ca_path)) as new_client:
                assert login(new_client, ADMIN, ADMIN_PASSWORD).error_code == 0
            with pytest.raises(ssl.SSLError):
                connect(broker.address("SASL_SSL"), old_ca)
            # The connection opened before the reload still works.
            answer = open_client.call("Metadata", 12, open_client.request_class("Metadata")(topics=None))
            assert answer.brokers[0].port == broker.ports["SASL_SSL"]
    finally:
        broker.process.kill()


def encrypt_key(path, password: bytes) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        )
    )


def test_an_encrypted_key_opens_with_ssl_key_password(tmp_path) -> None:
    from secure_broker import sluice_cli, write_config

    from sluice.testing import free_port

    certs = make_certificates(tmp_path / "certs")
    encrypt_key(certs.server_key, b"key-secret")
    ports = {"SSL": free_port()}
    wrong, right = tmp_path / "wrong.yaml", tmp_path / "right.yaml"
    write_config(wrong, certs, ports, ssl_key_password="not-it")
    refused = sluice_cli(
        "broker", "--config", str(wrong), "--data-dir", str(tmp_path / "d"), "--admin-listen", "off", check=False
    )
    assert refused.returncode != 0
    assert "ssl_key_password" in refused.stderr and "Traceback" not in refused.stderr
    write_config(right, certs, ports, ssl_key_password="key-secret", authorizer=None)
    from sluice.testing import BrokerProcess

    broker = BrokerProcess(tmp_path / "d", config=right).start()
    try:
        settings = {
            "bootstrap.servers": f"127.0.0.1:{ports['SSL']}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca_path),
        }
        assert deliver(settings, "encrypted-key") is None
    finally:
        broker.kill()


def test_a_broken_certificate_on_sighup_keeps_the_old_one(tmp_path) -> None:
    broker = start_secure_broker(tmp_path)
    try:
        broker.certs.server_cert.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n")
        assert broker.process.proc is not None
        broker.process.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not any("TLS certificate reload failed" in line for line in broker.process.output):
            assert time.monotonic() < deadline, "no failed reload logged"
            time.sleep(0.05)
        with connect(broker.address("SASL_SSL"), str(broker.certs.ca_path)) as client:
            assert login(client, ADMIN, ADMIN_PASSWORD).error_code == 0
    finally:
        broker.process.kill()


def test_client_auth_none_ignores_a_client_certificate(tmp_path) -> None:
    broker = start_secure_broker(tmp_path, ssl_client_auth="none")
    try:
        admin = AdminClient(broker.admin_settings())
        for future in admin.create_acls(
            [
                AclBinding(
                    ResourceType.TOPIC,
                    "carol-topic",
                    ResourcePatternType.LITERAL,
                    "User:carol",
                    "*",
                    AclOperation.ALL,
                    AclPermissionType.ALLOW,
                )
            ]
        ).values():
            future.result(timeout=10)
        admin.create_topics([NewTopic("carol-topic", 1, 1)])["carol-topic"].result(timeout=10)
        # The certificate is not asked for, so it names nobody: the connection is User:ANONYMOUS.
        assert deliver(broker.mtls("carol"), "carol-topic").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        broker.process.kill()
