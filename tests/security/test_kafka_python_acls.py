"""kafka-python's admin client manages ACLs over SASL_SSL (its ACL integration test needs CreateAcls,
DescribeAcls and DeleteAcls), and kafka-python clients are held to those ACLs: denied without them,
served with them, denied again once they are deleted. Without an authorizer the ACL APIs answer
SECURITY_DISABLED, which kafka-python turns into its SecurityDisabledError."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import NoError, SecurityDisabledError, TopicAuthorizationFailedError
from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker

from sluice.testing import BrokerProcess


def settings(broker: SecureBroker, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": broker.address("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "ssl_cafile": str(broker.certs.ca_path),
    }


@pytest.fixture(scope="module")
def kp_admin(secure_broker: SecureBroker):
    admin = KafkaAdminClient(**settings(secure_broker, ADMIN, ADMIN_PASSWORD))
    yield admin
    admin.close()


def new_user(broker: SecureBroker) -> tuple[str, str]:
    user, password = f"kp{uuid.uuid4().hex[:6]}", "kp-secret"
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    admin = AdminClient(broker.admin_settings())  # kept alive until the future resolves
    admin.alter_user_scram_credentials([upsert])[user].result(timeout=10)
    return user, password


def topic_acl(user: str, topic: str, operation: ACLOperation, permission=ACLPermissionType.ALLOW) -> ACL:
    pattern = ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
    return ACL(f"User:{user}", "*", operation, permission, pattern)


def user_filter(user: str) -> ACLFilter:
    pattern = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
    return ACLFilter(f"User:{user}", None, ACLOperation.ANY, ACLPermissionType.ANY, pattern)


def produce(broker: SecureBroker, user: str, password: str, topic: str) -> None:
    producer = KafkaProducer(**settings(broker, user, password), max_block_ms=5000, retries=0)
    try:
        producer.send(topic, b"v").get(timeout=10)
    finally:
        producer.close(timeout=5)


def test_kafka_python_admin_creates_describes_and_deletes_acls(
    secure_broker: SecureBroker, kp_admin: KafkaAdminClient
) -> None:
    user, password = new_user(secure_broker)
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    kp_admin.create_topics([NewTopic(topic, 1, 1)])

    with pytest.raises(TopicAuthorizationFailedError):
        produce(secure_broker, user, password, topic)

    wanted = [topic_acl(user, topic, ACLOperation.WRITE), topic_acl(user, topic, ACLOperation.READ)]
    created = kp_admin.create_acls(wanted)
    assert created["failed"] == [] and len(created["succeeded"]) == 2
    acls, error = kp_admin.describe_acls(user_filter(user))
    assert error is NoError
    assert sorted(a.operation.name for a in acls) == ["READ", "WRITE"]
    assert {a.resource_pattern.resource_name for a in acls} == {topic}

    produce(secure_broker, user, password, topic)
    consumer = KafkaConsumer(
        topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        **settings(secure_broker, user, password),
    )
    try:
        assert next(iter(consumer)).value == b"v"
    finally:
        consumer.close()

    [(_, deleted, error)] = kp_admin.delete_acls([user_filter(user)])
    assert error is NoError and len(deleted) == 2
    assert kp_admin.describe_acls(user_filter(user))[0] == []
    with pytest.raises(TopicAuthorizationFailedError):
        produce(secure_broker, user, password, topic)


def test_kafka_python_sees_security_disabled_without_an_authorizer(tmp_path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            with pytest.raises(SecurityDisabledError):
                admin.describe_acls(user_filter("anyone"))
        finally:
            admin.close()
    finally:
        broker.kill()
