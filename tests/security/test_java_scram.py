"""The official Java client (tests/java's SluiceJavaClient in SCRAM mode) over SASL_SSL with SCRAM: its admin
manages SCRAM users (KIP-554), and a user it created produces and consumes under ACLs."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS / "java"), str(TESTS / "groups")]

from java_driver import VERSIONS, JavaClient, JavaError, build  # noqa: E402


def scram_settings(broker: SecureBroker, user: str, password: str, mechanism: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(broker.certs.ca_path),
    }


@pytest.fixture(scope="module")
def classpaths() -> dict[str, str]:
    if shutil.which("javac") is None:
        pytest.skip("a JDK (javac) is needed for the Java client tests")
    return build([VERSIONS[-1]])


@pytest.fixture
def java_admin(
    classpaths: dict[str, str], secure_broker: SecureBroker, tmp_path: Path
) -> Iterator[JavaClient]:
    version = VERSIONS[-1]
    client = JavaClient(
        version,
        classpaths[version],
        secure_broker.address("SASL_SSL"),
        tmp_path / "stderr.log",
        scram_settings(secure_broker, ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512"),
    )
    yield client
    client.close()


def test_java_client_manages_users_and_works_over_scram(
    java_admin: JavaClient, secure_broker: SecureBroker, classpaths: dict[str, str], tmp_path: Path
) -> None:
    user = f"java{uuid.uuid4().hex[:6]}"
    topic = f"java-{user}"
    assert java_admin.call("scram-upsert", user, "SCRAM-SHA-256", 4096, "j-secret") is True
    assert java_admin.call("scram-describe", user) == {user: ["SCRAM-SHA-256"]}
    java_admin.call("create-topic", topic, 1)
    admin = AdminClient(secure_broker.admin_settings())
    for future in admin.create_acls(
        [
            AclBinding(
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                f"User:{user}",
                "*",
                AclOperation.ALL,
                AclPermissionType.ALLOW,
            )
        ]
    ).values():
        future.result(timeout=10)
    version = VERSIONS[-1]
    as_user = JavaClient(
        version,
        classpaths[version],
        secure_broker.address("SASL_SSL"),
        tmp_path / "user.log",
        scram_settings(secure_broker, user, "j-secret", "SCRAM-SHA-256"),
    )
    try:
        lines = tmp_path / "records.txt"
        lines.write_text(
            "".join(f"0 - {f'k{i}'.encode().hex()} {f'v{i}'.encode().hex()} -\n" for i in range(5))
        )
        produced = as_user.call("produce", topic, str(lines))
        assert [offset for _, offset, _ in produced] == [0, 1, 2, 3, 4]
        consumed = as_user.call("consume", topic, 0, 0, 5)
        assert len(consumed) == 5
        # The user may not touch the admin's world: listing SCRAM users needs the cluster.
        with pytest.raises(JavaError) as denied:
            as_user.call("scram-describe", user)
        assert "ClusterAuthorization" in denied.value.error
    finally:
        as_user.close()


def test_java_client_with_a_wrong_password_is_refused(
    classpaths: dict[str, str], secure_broker: SecureBroker, tmp_path: Path
) -> None:
    version = VERSIONS[-1]
    client = JavaClient(
        version,
        classpaths[version],
        secure_broker.address("SASL_SSL"),
        tmp_path / "bad.log",
        scram_settings(secure_broker, ADMIN, "wrong", "SCRAM-SHA-256"),
    )
    try:
        with pytest.raises(JavaError) as refused:
            client.call("list-topics", timeout=60)
        assert "SaslAuthentication" in refused.value.error
    finally:
        client.close()


def test_java_client_without_acls_is_denied_and_sees_no_topics(
    java_admin: JavaClient, secure_broker: SecureBroker, classpaths: dict[str, str], tmp_path: Path
) -> None:
    user = f"javano{uuid.uuid4().hex[:6]}"
    topic = f"java-denied-{user}"
    assert java_admin.call("scram-upsert", user, "SCRAM-SHA-512", 4096, "n-secret") is True
    java_admin.call("create-topic", topic, 1)
    version = VERSIONS[-1]
    as_user = JavaClient(
        version,
        classpaths[version],
        secure_broker.address("SASL_SSL"),
        tmp_path / "denied.log",
        scram_settings(secure_broker, user, "n-secret", "SCRAM-SHA-512"),
    )
    try:
        assert topic in java_admin.call("list-topics", timeout=60)
        assert topic not in as_user.call("list-topics", timeout=60)
        lines = tmp_path / "one.txt"
        lines.write_text(f"0 - {b'k'.hex()} {b'v'.hex()} -\n")
        with pytest.raises(JavaError) as denied:
            as_user.call("produce", topic, str(lines), timeout=60)
        assert "TopicAuthorization" in denied.value.error
    finally:
        as_user.close()
