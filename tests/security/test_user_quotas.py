"""Client quotas by authenticated user (KIP-546 entities, KIP-219 throttling): a SASL user's quota applies
to that user's connections, the user named without the principal type (User:admin is user "admin") as
Kafka's quota entities are."""

from __future__ import annotations

import time
from typing import Any

from secure_broker import ADMIN, ADMIN_PASSWORD, SecureBroker
from wire_auth import connect, login

from sluice.client.wire import WireClient
from sluice.protocol.records import Record, encode_batch


def _alter(wire: WireClient, user: str, value: float | None) -> int:
    R = wire.request_class("AlterClientQuotas")
    op = R.OpData(key="producer_byte_rate", value=value or 0.0, remove=value is None)
    entry = R.EntryData(entity=[R.EntityData(entity_type="user", entity_name=user)], ops=[op])
    (result,) = wire.call("AlterClientQuotas", 1, R(entries=[entry], validate_only=False)).entries
    return result.error_code


def _produce(wire: WireClient, topic: str, size: int) -> Any:
    batch = encode_batch(
        [Record(offset_delta=0, timestamp_delta=0, key=None, value=b"x" * size)],
        base_timestamp=int(time.time() * 1000),
    )
    R = wire.request_class("Produce")
    data = [R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=0, records=batch)])]
    response = wire.call("Produce", 9, R(acks=1, timeout_ms=10_000, topic_data=data))
    assert response.responses[0].partition_responses[0].error_code == 0
    return response


def test_a_sasl_users_quota_throttles_that_user_only(secure_broker: SecureBroker, topic_name: str) -> None:
    with connect(secure_broker.address("SASL_PLAINTEXT")) as admin:
        assert login(admin, ADMIN, ADMIN_PASSWORD).error_code == 0
        R = admin.request_class("CreateTopics")
        topic = R.CreatableTopic(name=topic_name, num_partitions=1, replication_factor=1)
        assert admin.call("CreateTopics", 7, R(topics=[topic], timeout_ms=10_000)).topics[0].error_code == 0
        assert _alter(admin, ADMIN, 100_000.0) == 0
        try:
            first = _produce(admin, topic_name, 300_000)
            # 300 kB in the first second against 100 kB/s: about two seconds of throttle.
            assert 1_000 <= first.throttle_time_ms <= 11_000
            # The connection is muted meanwhile: its next request waits out the throttle time.
            started = time.monotonic()
            _produce(admin, topic_name, 10)
            assert (time.monotonic() - started) * 1000 >= first.throttle_time_ms * 0.8
        finally:
            assert _alter(admin, ADMIN, None) == 0
