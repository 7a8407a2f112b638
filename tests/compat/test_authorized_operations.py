"""KIP-430 authorized operations: a client that asks (include_authorized_operations) is told which ACL
operations its principal has on a topic. With the ACL authorizer allowing everyone, Kafka lists all eight
topic operations; librdkafka's test 0081 (DescribeTopics with authorized operations) checks exactly that.
sluice leaves the field at "not requested" today, so the client sees none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from sluice.testing import BrokerProcess

pytestmark = pytest.mark.xfail(
    strict=True, reason="issue 31: sluice does not fill in KIP-430 authorized operations (librdkafka 0081)"
)

TOPIC_OPERATIONS = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("authorized-operations")
    config = root / "broker.yaml"
    config.write_text("authorizer: acl\nallow_everyone_if_no_acl_found: true\n")
    proc = BrokerProcess(root / "data", config=config).start()
    yield proc
    proc.stop()


def test_describe_topics_lists_the_operations_everyone_has(acl_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap})
    admin.create_topics([NewTopic("described", 1, 1)])["described"].result(10)
    (future,) = admin.describe_topics(
        TopicCollection(["described"]), include_authorized_operations=True, request_timeout=10
    ).values()
    description = future.result()
    assert set(description.authorized_operations or []) == TOPIC_OPERATIONS
