"""Share groups under ACLs, on the wire as a SASL user: Read on the group lets a member in, Read on each topic
lets it fetch or acknowledge that topic's records; what is denied answers GROUP_ or TOPIC_AUTHORIZATION_FAILED
(a share session's partitions are checked every time they are read, not only when named)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType
from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker
from test_acls import allow, make_topic, make_user
from wire_auth import connect, login

from sluice.errors import ErrorCode


@pytest.fixture(scope="module")
def admin(secure_broker: SecureBroker) -> AdminClient:
    return AdminClient(secure_broker.admin_settings())


def share_fetch(client, group: str, member: str, topic_id: uuid.UUID) -> object:
    cls = client.request_class("ShareFetch")
    return client.call("ShareFetch", 1, cls(
        group_id=group, member_id=member, share_session_epoch=0, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
        max_records=100, batch_size=100,
        topics=[cls.FetchTopic(topic_id=topic_id, partitions=[cls.FetchPartition(partition_index=0)])]))


def test_share_group_reads_need_read_on_the_group_and_on_each_topic(secure_broker: SecureBroker,
                                                                    admin: AdminClient) -> None:
    user = make_user(admin)
    topic, hidden = make_topic(admin), make_topic(admin)
    group = f"share-{uuid.uuid4().hex[:6]}"
    producer = Producer(secure_broker.admin_settings())
    for name in (topic, hidden):
        producer.produce(name, b"x")
    producer.flush(10)
    with connect(secure_broker.address("SASL_PLAINTEXT")) as client:
        assert login(client, user, "pw").error_code == 0
        metadata = client.call("Metadata", 12, client.request_class("Metadata")(topics=None))
        assert metadata.topics == []  # nothing allowed yet, so nothing seen
        with connect(secure_broker.address("SASL_PLAINTEXT")) as root:
            assert login(root, ADMIN, ADMIN_PASSWORD).error_code == 0
            listed = root.call("Metadata", 12, root.request_class("Metadata")(topics=None))
            ids = {t.name: t.topic_id for t in listed.topics}
        assert share_fetch(client, group, "m1", ids[topic]).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        allow(admin, user, ResourceType.GROUP, group, AclOperation.READ)
        allow(admin, user, ResourceType.TOPIC, topic, AclOperation.READ)
        allowed = share_fetch(client, group, "m1", ids[topic])
        assert allowed.error_code == ErrorCode.NONE
        assert allowed.responses[0].partitions[0].error_code == ErrorCode.NONE
        denied = share_fetch(client, group, "m2", ids[hidden])
        assert denied.error_code == ErrorCode.NONE
        part = denied.responses[0].partitions[0]
        assert part.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not part.acquired_records

