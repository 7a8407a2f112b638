"""Client quotas: DescribeClientQuotas/AlterClientQuotas (KIP-546) with Kafka's entity rules and matching,
kept across a clean restart and a kill -9, and enforced on produce/fetch byte rates with throttle_time_ms and
a muted connection (KIP-219: the broker answers at once, then reads nothing from the client for that long)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, encode_batch
from sluice.testing import BrokerProcess

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def alter(
    wire: WireClient,
    entity: list[tuple[str, str | None]],
    ops: list[tuple[str, float, bool]],
    validate_only: bool = False,
) -> tuple[int, str | None]:
    R = wire.request_class("AlterClientQuotas")
    entry = R.EntryData(
        entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[R.OpData(key=k, value=v, remove=r) for k, v, r in ops],
    )
    (result,) = wire.call("AlterClientQuotas", 1, R(entries=[entry], validate_only=validate_only)).entries
    return result.error_code, result.error_message


def describe(wire: WireClient, components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
    R = wire.request_class("DescribeClientQuotas")
    request = R(
        components=[R.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=strict,
    )
    return wire.call("DescribeClientQuotas", 1, request)


def as_dict(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert response.error_code == 0, response.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def test_alter_and_describe_follow_kafkas_rules(bootstrap: str, topic_name: str) -> None:
    user = f"u-{topic_name}"
    with WireClient.connect(bootstrap) as wire:
        assert alter(wire, [("user", user)], [("producer_byte_rate", 1024.0, False)]) == (0, None)
        assert (
            alter(
                wire,
                [("user", user), ("client-id", "app")],
                [("consumer_byte_rate", 2048.0, False), ("request_percentage", 12.5, False)],
            )[0]
            == 0
        )
        assert alter(wire, [("client-id", None)], [("producer_byte_rate", 4096.0, False)])[0] == 0
        exact = as_dict(describe(wire, [("user", EXACT, user)]))
        assert exact == {
            (("user", user),): {"producer_byte_rate": 1024.0},
            (("client-id", "app"), ("user", user)): {
                "consumer_byte_rate": 2048.0,
                "request_percentage": 12.5,
            },
        }
        assert as_dict(describe(wire, [("user", EXACT, user)], strict=True)) == {
            (("user", user),): {"producer_byte_rate": 1024.0}
        }
        assert (("client-id", None),) in as_dict(describe(wire, [("client-id", DEFAULT, None)]))
        # Kafka's validation: unknown keys, non-whole byte rates, ip mixed with users, repeated types.
        assert (
            alter(wire, [("user", user)], [("bytes_per_fortnight", 1.0, False)])[0]
            == ErrorCode.INVALID_REQUEST
        )
        assert (
            alter(wire, [("user", user)], [("producer_byte_rate", 10.5, False)])[0]
            == ErrorCode.INVALID_REQUEST
        )
        assert (
            alter(wire, [("user", user)], [("producer_byte_rate", -1.0, False)])[0]
            == ErrorCode.INVALID_REQUEST
        )
        assert alter(wire, [("user", user), ("ip", "1.2.3.4")], [("producer_byte_rate", 1.0, False)])[0] == (
            ErrorCode.INVALID_REQUEST
        )
        assert alter(wire, [("user", user), ("user", "x")], [("producer_byte_rate", 1.0, False)])[0] == (
            ErrorCode.INVALID_REQUEST
        )
        assert (
            alter(wire, [("group", "g")], [("producer_byte_rate", 1.0, False)])[0]
            == ErrorCode.UNSUPPORTED_VERSION
        )
        # validate_only changes nothing; removing the last value removes the entity.
        assert alter(wire, [("user", user)], [("producer_byte_rate", 9.0, False)], validate_only=True)[0] == 0
        assert as_dict(describe(wire, [("user", EXACT, user)], strict=True))[(("user", user),)] == {
            "producer_byte_rate": 1024.0
        }
        assert alter(wire, [("user", user)], [("producer_byte_rate", 0.0, True)])[0] == 0
        assert as_dict(describe(wire, [("user", EXACT, user)], strict=True)) == {}
        assert alter(wire, [("client-id", None)], [("producer_byte_rate", 0.0, True)])[0] == 0
        assert (
            alter(
                wire,
                [("user", user), ("client-id", "app")],
                [("consumer_byte_rate", 0, True), ("request_percentage", 0, True)],
            )[0]
            == 0
        )
        bad = describe(wire, [("user", EXACT, "a"), ("user", EXACT, "b")])
        assert bad.error_code == ErrorCode.INVALID_REQUEST and bad.entries is None


def test_quotas_survive_restart_and_kill(data_dir: Path) -> None:
    broker = BrokerProcess(data_dir).start()
    try:
        with WireClient.connect(broker.bootstrap) as wire:
            assert alter(wire, [("user", "alice")], [("consumer_byte_rate", 5000.0, False)])[0] == 0
        broker.stop()
        broker.start()
        with WireClient.connect(broker.bootstrap) as wire:
            assert as_dict(describe(wire, [("user", SPECIFIED, None)])) == {
                (("user", "alice"),): {"consumer_byte_rate": 5000.0}
            }
            assert alter(wire, [("client-id", "bob")], [("producer_byte_rate", 7000.0, False)])[0] == 0
        broker.kill()
        broker.start()
        with WireClient.connect(broker.bootstrap) as wire:
            assert as_dict(describe(wire, [])) == {
                (("user", "alice"),): {"consumer_byte_rate": 5000.0},
                (("client-id", "bob"),): {"producer_byte_rate": 7000.0},
            }
    finally:
        broker.stop()


def _produce(wire: WireClient, topic: str, payload: int) -> tuple[Any, float]:
    batch = encode_batch(
        [Record(offset_delta=0, timestamp_delta=0, key=None, value=b"x" * payload)],
        base_timestamp=int(time.time() * 1000),
    )
    R = wire.request_class("Produce")
    request = R(
        acks=1,
        timeout_ms=10_000,
        topic_data=[
            R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=0, records=batch)])
        ],
    )
    started = time.monotonic()
    response = wire.call("Produce", 9, request)
    return response, time.monotonic() - started


@pytest.mark.parametrize("entity", [("client-id", "throttled-app"), ("user", "ANONYMOUS")])
def test_produce_over_its_byte_rate_is_throttled(
    bootstrap: str, topic_name: str, entity: tuple[str, str]
) -> None:
    with WireClient.connect(bootstrap) as admin:
        assert alter(admin, [entity], [("producer_byte_rate", 100_000.0, False)])[0] == 0
    try:
        with WireClient.connect(bootstrap, client_id="throttled-app") as wire:
            R = wire.request_class("CreateTopics")
            wire.call(
                "CreateTopics",
                7,
                R(
                    topics=[R.CreatableTopic(name=topic_name, num_partitions=1, replication_factor=1)],
                    timeout_ms=10_000,
                ),
            )
            first, _ = _produce(wire, topic_name, 300_000)
            (part,) = first.responses[0].partition_responses
            assert part.error_code == 0
            # 300 kB in the first second against 100 kB/s: about two seconds of throttle, answered at once.
            assert 1_000 <= first.throttle_time_ms <= 11_000
            # The connection is muted meanwhile: the next request waits out the throttle time.
            _, waited = _produce(wire, topic_name, 10)
            assert waited * 1000 >= first.throttle_time_ms * 0.8
        with WireClient.connect(bootstrap, client_id="another-app") as other:
            response, _ = _produce(other, topic_name, 10)
            expected_unthrottled = entity[0] == "client-id"
            assert (response.throttle_time_ms == 0) == expected_unthrottled
    finally:
        with WireClient.connect(bootstrap) as admin:
            assert alter(admin, [entity], [("producer_byte_rate", 0.0, True)])[0] == 0


def test_fetch_over_its_byte_rate_is_throttled(bootstrap: str, topic_name: str) -> None:
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("CreateTopics")
        wire.call(
            "CreateTopics",
            7,
            R(
                topics=[R.CreatableTopic(name=topic_name, num_partitions=1, replication_factor=1)],
                timeout_ms=10_000,
            ),
        )
        _produce(wire, topic_name, 200_000)
        assert alter(wire, [("client-id", "slow-reader")], [("consumer_byte_rate", 50_000.0, False)])[0] == 0
    try:
        with WireClient.connect(bootstrap, client_id="slow-reader") as reader:
            F = reader.request_class("Fetch")
            fetch = F(
                replica_id=-1,
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=10_000_000,
                isolation_level=0,
                topics=[
                    F.FetchTopic(
                        topic=topic_name,
                        partitions=[
                            F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1_000_000)
                        ],
                    )
                ],
            )
            response = reader.call("Fetch", 12, fetch)
            assert response.responses[0].partitions[0].records
            assert response.throttle_time_ms >= 1_000
    finally:
        with WireClient.connect(bootstrap) as admin:
            assert alter(admin, [("client-id", "slow-reader")], [("consumer_byte_rate", 0.0, True)])[0] == 0


def _create(
    wire: WireClient, version: int, topics: list[tuple[str, int]], validate_only: bool = False
) -> Any:
    R = wire.request_class("CreateTopics")
    request = R(
        topics=[R.CreatableTopic(name=n, num_partitions=p, replication_factor=1) for n, p in topics],
        timeout_ms=10_000,
        validate_only=validate_only,
    )
    return wire.call("CreateTopics", version, request)


def test_controller_mutation_rate_refuses_topics_once_the_bucket_is_spent(
    bootstrap: str, topic_name: str
) -> None:
    """KIP-599: controller_mutation_rate is a token bucket of partitions per second holding eleven seconds'
    worth. With CreateTopics v6+ and DeleteTopics v5+ a topic is refused with THROTTLING_QUOTA_EXCEEDED while
    the bucket is below zero (a request may take it there), with the time to recover in throttle_time_ms;
    validate_only costs nothing; older versions create everything and only report the throttle time."""
    strict, permissive = f"strict-{topic_name}"[:80], f"permissive-{topic_name}"[:80]
    with WireClient.connect(bootstrap) as admin:
        for client in (strict, permissive):
            assert alter(admin, [("client-id", client)], [("controller_mutation_rate", 2.0, False)])[0] == 0
    try:
        with WireClient.connect(bootstrap, client_id=strict) as wire:
            checked = _create(wire, 7, [(f"{topic_name}-v", 22)], validate_only=True)
            assert checked.topics[0].error_code == 0 and checked.throttle_time_ms == 0
            # 22 tokens: 20 leave 2, the next 5 take the bucket to -3, the third topic is refused.
            first = _create(
                wire, 7, [(f"{topic_name}-a", 20), (f"{topic_name}-b", 5), (f"{topic_name}-c", 1)]
            )
            codes = {t.name: t.error_code for t in first.topics}
            assert codes == {
                f"{topic_name}-a": 0,
                f"{topic_name}-b": 0,
                f"{topic_name}-c": ErrorCode.THROTTLING_QUOTA_EXCEEDED,
            }
            assert 1_000 <= first.throttle_time_ms <= 1_600  # 3 tokens at 2 a second
        with WireClient.connect(bootstrap, client_id=strict) as wire:
            R = wire.request_class("DeleteTopics")
            request = R(topics=[R.DeleteTopicState(name=f"{topic_name}-a")], timeout_ms=10_000)
            (refused,) = wire.call("DeleteTopics", 6, request).responses
            assert refused.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
            M = wire.request_class("Metadata")
            names = [M.MetadataRequestTopic(name=f"{topic_name}-{s}") for s in "abc"]
            metadata = wire.call("Metadata", 12, M(topics=names, allow_auto_topic_creation=False))
            assert [t.error_code for t in metadata.topics] == [0, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        with WireClient.connect(bootstrap, client_id=permissive) as wire:
            old = _create(wire, 5, [(f"{topic_name}-d", 20), (f"{topic_name}-e", 5), (f"{topic_name}-f", 1)])
            assert [t.error_code for t in old.topics] == [0, 0, 0] and old.throttle_time_ms >= 1_000
    finally:
        with WireClient.connect(bootstrap) as admin:
            for client in (strict, permissive):
                assert (
                    alter(admin, [("client-id", client)], [("controller_mutation_rate", 0.0, True)])[0] == 0
                )


def _metadata(wire: WireClient) -> tuple[Any, float]:
    R = wire.request_class("Metadata")
    started = time.monotonic()
    response = wire.call("Metadata", 12, R(topics=None, allow_auto_topic_creation=False))
    return response, time.monotonic() - started


def _assert_busy_app_is_throttled(bootstrap: str) -> None:
    """Client id busy-app, held to 1% of a thread, crosses it in a tight loop and is then muted."""
    with WireClient.connect(bootstrap, client_id="busy-app") as busy:
        throttle = 0
        deadline = time.monotonic() + 30
        sent = 0
        # 1% of a thread is 10 ms of handler time a second: a tight loop of requests crosses it.
        sent_at = time.monotonic()
        while throttle == 0 and time.monotonic() < deadline:
            sent_at = time.monotonic()
            response, _ = _metadata(busy)
            throttle = response.throttle_time_ms
            sent += 1
        assert 0 < throttle <= 11_000, f"no throttle after {sent} requests"
        _metadata(busy)
        # The broker mutes the connection for `throttle` ms from the moment it answered, which is after
        # `sent_at`: the next answer cannot come sooner, however slow or fast the machine is.
        assert (time.monotonic() - sent_at) * 1000 >= throttle, throttle


def test_a_client_over_its_request_percentage_is_throttled(bootstrap: str) -> None:
    """KIP-124: request_percentage is the share of one request thread's time a client may use. Over it, the
    answer carries throttle_time_ms and the connection is muted that long; other clients are not."""
    with WireClient.connect(bootstrap) as admin:
        assert alter(admin, [("client-id", "busy-app")], [("request_percentage", 1.0, False)])[0] == 0
    try:
        _assert_busy_app_is_throttled(bootstrap)
        with WireClient.connect(bootstrap, client_id="calm-app") as calm:
            for _ in range(20):
                response, _ = _metadata(calm)
                assert response.throttle_time_ms == 0
    finally:
        with WireClient.connect(bootstrap) as admin:
            assert alter(admin, [("client-id", "busy-app")], [("request_percentage", 0.0, True)])[0] == 0


def _connects(bootstrap: str) -> bool:
    """Does a new connection get an ApiVersions answer?"""
    try:
        with WireClient.connect(bootstrap) as wire:
            R = wire.request_class("ApiVersions")
            wire.call("ApiVersions", 3, R(client_software_name="q", client_software_version="1"))
        return True
    except (ConnectionError, OSError, EOFError):
        return False


def _assert_new_connections_are_refused(bootstrap: str) -> None:
    """Under a connection_creation_rate of 5 on 127.0.0.1, a loop of new connections is soon refused."""
    outcomes = []
    started = time.monotonic()
    for _ in range(40):
        outcomes.append(_connects(bootstrap))
        if not outcomes[-1]:
            break
    assert outcomes[0] and not outcomes[-1], outcomes
    assert time.monotonic() - started < 30


def test_connections_over_the_ip_connection_creation_rate_are_held_then_closed(bootstrap: str) -> None:
    """KIP-612: past its IP's connection_creation_rate a new connection is not served but held for the throttle
    time and closed; connections made before keep working, and once the quota is removed new ones are served
    again."""
    with WireClient.connect(bootstrap) as admin:  # opened before the quota: it stays served
        assert alter(admin, [("ip", "127.0.0.1")], [("connection_creation_rate", 5.0, False)])[0] == 0
        try:
            _assert_new_connections_are_refused(bootstrap)
        finally:
            assert alter(admin, [("ip", "127.0.0.1")], [("connection_creation_rate", 0.0, True)])[0] == 0
    assert all(_connects(bootstrap) for _ in range(20))


def test_request_and_connection_quotas_are_enforced_after_kill_9(data_dir: Path) -> None:
    """The two quotas enforced since they were only stored: still set, and still enforced, after kill -9."""
    broker = BrokerProcess(data_dir).start()
    try:
        with WireClient.connect(broker.bootstrap) as wire:
            assert alter(wire, [("client-id", "busy-app")], [("request_percentage", 1.0, False)])[0] == 0
            assert alter(wire, [("ip", "127.0.0.1")], [("connection_creation_rate", 5.0, False)])[0] == 0
        broker.kill()
        broker.start()
        with WireClient.connect(broker.bootstrap) as admin:  # the first connection after the restart
            _assert_busy_app_is_throttled(broker.bootstrap)
            _assert_new_connections_are_refused(broker.bootstrap)
            assert alter(admin, [("ip", "127.0.0.1")], [("connection_creation_rate", 0.0, True)])[0] == 0
    finally:
        broker.stop()
