"""Transactions against the ACL authorizer with a real client (confluent-kafka over SASL_SSL): a transactional
producer needs Write on its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, no hang), Write on
the topics it adds to the transaction, and Read on the group whose offsets it commits; DENY on the
transactional id wins over a prefixed ALLOW."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from secure_broker import SecureBroker

LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@pytest.fixture(scope="module")
def admin(secure_broker: SecureBroker) -> AdminClient:
    return AdminClient(secure_broker.admin_settings())


def grant(
    admin: AdminClient,
    user: str,
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    permission: AclPermissionType = ALLOW,
    pattern: ResourcePatternType = LITERAL,
) -> None:
    binding = AclBinding(rtype, name, pattern, f"User:{user}", "*", op, permission)
    for future in admin.create_acls([binding]).values():
        future.result(timeout=10)


@pytest.fixture
def user_and_topic(secure_broker: SecureBroker, admin: AdminClient) -> tuple[str, str]:
    user, topic = f"tx{uuid.uuid4().hex[:6]}", f"txn-acl-{uuid.uuid4().hex[:8]}"
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"tx-pw"
    )
    admin.alter_user_scram_credentials([upsert])[user].result(timeout=10)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    return user, topic


def producer(broker: SecureBroker, user: str, transactional_id: str) -> Producer:
    return Producer(
        {**broker.sasl(user, "tx-pw"), "transactional.id": transactional_id, "transaction.timeout.ms": 10_000}
    )


def init_error(p: Producer) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(10)
    return raised.value.args[0]


def test_a_transactional_producer_needs_write_on_its_transactional_id(
    secure_broker: SecureBroker, admin: AdminClient, user_and_topic: tuple[str, str]
) -> None:
    user, topic = user_and_topic
    txn_id = f"{user}-app"
    grant(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE)
    assert init_error(producer(secure_broker, user, txn_id)).code() == (
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )

    grant(admin, user, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    p = producer(secure_broker, user, txn_id)
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"committed")
    p.commit_transaction(10)

    consumer = Consumer(
        {
            **secure_broker.admin_settings(),
            "group.id": f"check-{user}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = None
    for _ in range(30):
        got = consumer.poll(0.5)
        if got is not None and got.error() is None:
            break
    consumer.close()
    assert got is not None and got.value() == b"committed"


def test_offsets_in_a_transaction_need_read_on_the_group(
    secure_broker: SecureBroker, admin: AdminClient, user_and_topic: tuple[str, str]
) -> None:
    user, topic = user_and_topic
    txn_id, group = f"{user}-eos", f"{user}-group"
    grant(admin, user, ResourceType.TOPIC, topic, AclOperation.WRITE)
    grant(admin, user, ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)
    p = producer(secure_broker, user, txn_id)
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"x")

    consumer = Consumer({**secure_broker.sasl(user, "tx-pw"), "group.id": group})
    with pytest.raises(KafkaException) as raised:
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), 10)
    assert raised.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    consumer.close()


def test_deny_on_the_transactional_id_wins_over_a_prefixed_allow(
    secure_broker: SecureBroker, admin: AdminClient, user_and_topic: tuple[str, str]
) -> None:
    user, _ = user_and_topic
    grant(admin, user, ResourceType.TRANSACTIONAL_ID, f"{user}-", AclOperation.WRITE, pattern=PREFIXED)
    grant(admin, user, ResourceType.TRANSACTIONAL_ID, f"{user}-blocked", AclOperation.WRITE, permission=DENY)
    assert init_error(producer(secure_broker, user, f"{user}-blocked")).code() == (
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )
    producer(secure_broker, user, f"{user}-open").init_transactions(10)
