"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka's share consumer) against the real
broker: each record goes to one member at a time, acknowledgements decide what comes back, locks and the
delivery limit bound how often."""

from __future__ import annotations

import time
from collections import Counter

from confluent_kafka import AcknowledgeType
from share_helpers import drain, produce, quiet_for, set_group_configs, share_consumer, start_offset

from sluice.testing import BrokerProcess


def test_implicit_mode_delivers_every_record_once(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name, partitions=3)
    set_group_configs(bootstrap, "implicit-g", share_auto_offset_reset="earliest")
    sent = produce(bootstrap, topic_name, 3000)
    consumer = share_consumer(bootstrap, "implicit-g")
    consumer.subscribe([topic_name])
    got = drain(consumer, 3000)
    results = consumer.commit_sync(10)  # implicit mode: accepts what the last poll returned
    consumer.close()
    assert results and all(error is None for error in results.values())
    assert sorted(m.value() for m in got) == sorted(sent)
    assert {m.delivery_count() for m in got} == {1}
    # Accepted (by each next poll, then the commit): a new member of the group gets nothing.
    later = share_consumer(bootstrap, "implicit-g")
    later.subscribe([topic_name])
    assert quiet_for(later, 2.5) == []  # past its first assignment (an interval after it joins) and fetches
    later.close()


def test_latest_is_the_default_start(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    produce(bootstrap, topic_name, 20, prefix="before")
    consumer = share_consumer(bootstrap, "latest-g")
    consumer.subscribe([topic_name])
    got: list[object] = []
    deadline = time.monotonic() + 15
    while start_offset(bootstrap, "latest-g", topic_name) != 20:  # its first fetch starts it at the end
        assert time.monotonic() < deadline, "the share-partition never started"
        got += list(consumer.poll(0.2))
    assert got == []
    after = produce(bootstrap, topic_name, 7, prefix="after")
    assert sorted(m.value() for m in drain(consumer, 7)) == sorted(after)
    consumer.close()


def test_explicit_acks_release_comes_back_reject_never(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    set_group_configs(bootstrap, "explicit-g", share_auto_offset_reset="earliest")
    produce(bootstrap, topic_name, 30)
    consumer = share_consumer(bootstrap, "explicit-g", explicit=True)
    consumer.subscribe([topic_name])
    decided: dict[int, AcknowledgeType] = {}

    def decide(message: object) -> None:
        kind = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT)[message.offset() % 3]
        decided[message.offset()] = kind
        consumer.acknowledge(message, kind)

    first = drain(consumer, 30, on_message=decide)
    assert len(first) == 30 and {m.delivery_count() for m in first} == {1}
    results = consumer.commit_sync(10)
    assert results and all(error is None for error in results.values())
    released = sorted(o for o, kind in decided.items() if kind is AcknowledgeType.RELEASE)
    again = drain(consumer, len(released), on_message=lambda m: consumer.acknowledge(m))
    assert sorted(m.offset() for m in again) == released
    assert {m.delivery_count() for m in again} == {2}
    consumer.commit_sync(10)
    assert quiet_for(consumer, 1.0) == []  # accepted and rejected records never come back
    consumer.close()


def test_four_members_share_one_partition_without_duplicates(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    set_group_configs(bootstrap, "four-g", share_auto_offset_reset="earliest")
    consumers = [share_consumer(bootstrap, "four-g", **{"max.poll.records": 20}) for _ in range(4)]
    for consumer in consumers:
        consumer.subscribe([topic_name])
    sent = produce(bootstrap, topic_name, 400, per_batch=10)
    seen: Counter[bytes] = Counter()
    by_member = Counter()
    deadline = time.monotonic() + 40
    while sum(seen.values()) < 400 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            for message in consumer.poll(0.1):
                assert message.error() is None
                seen[message.value()] += 1
                by_member[index] += 1
    for consumer in consumers:
        consumer.close()
    assert sorted(seen) == sorted(sent) and set(seen.values()) == {1}
    assert len(by_member) >= 2  # one partition, read by several members at once


def test_release_up_to_the_delivery_limit_then_archived(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    set_group_configs(bootstrap, "limit-g", share_auto_offset_reset="earliest", share_delivery_count_limit="3")
    produce(bootstrap, topic_name, 1)
    consumer = share_consumer(bootstrap, "limit-g", explicit=True)
    consumer.subscribe([topic_name])
    counts = []
    for _ in range(3):
        (message,) = drain(consumer, 1)
        counts.append(message.delivery_count())
        consumer.acknowledge(message, AcknowledgeType.RELEASE)
        consumer.commit_sync(10)
    assert counts == [1, 2, 3]
    assert quiet_for(consumer, 1.5) == []  # archived at the limit
    consumer.close()


def test_lock_expiry_brings_records_back_within_the_lock_duration(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    set_group_configs(bootstrap, "lock-g", share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
    produce(bootstrap, topic_name, 5)
    holder = share_consumer(bootstrap, "lock-g", explicit=True)
    holder.subscribe([topic_name])
    held = drain(holder, 5)
    assert len(held) == 5
    taken_at = time.monotonic()
    other = share_consumer(bootstrap, "lock-g")
    other.subscribe([topic_name])
    again = drain(other, 5, timeout=10)
    waited = time.monotonic() - taken_at
    assert sorted(m.offset() for m in again) == sorted(m.offset() for m in held)
    assert {m.delivery_count() for m in again} == {2}
    assert waited < 1.0 + 1.0 + 0.5  # the lock, a second of slack, and the poll in between
    other.close()
    holder.close()


def test_a_closed_member_gives_back_what_it_held(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    set_group_configs(bootstrap, "close-g", share_auto_offset_reset="earliest")
    produce(bootstrap, topic_name, 50)
    first = share_consumer(bootstrap, "close-g", explicit=True)
    first.subscribe([topic_name])
    held = drain(first, 50)
    first.close()  # never acknowledged: released at once (the lock is the default 30 s)
    second = share_consumer(bootstrap, "close-g")
    second.subscribe([topic_name])
    again = drain(second, 50, timeout=10)
    assert sorted(m.offset() for m in again) == sorted(m.offset() for m in held)
    second.close()
