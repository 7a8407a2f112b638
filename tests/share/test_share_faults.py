"""Share groups through faults, on the real broker with confluent-kafka's ShareConsumer: a broker kill -9 and a
clean restart with records acquired (nothing acknowledged comes back, everything acquired does, counted), a
member killed holding records, a topic deleted and made again, and a disk that fills while the share state
is written."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from share_helpers import (
    WireShareMember,
    acquired,
    drain,
    produce,
    set_group_configs,
    share_config,
    share_consumer,
    topic_id,
)
from tests.transactions.test_txn_faults import fill_below

from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

MIN_FREE = 4 << 20


@pytest.mark.parametrize("how", ["kill -9", "clean stop"])
def test_a_broker_restart_keeps_acknowledgements_and_brings_back_acquired_records(
    tmp_path: Path, how: str
) -> None:
    with BrokerProcess(tmp_path / "data", config=share_config(tmp_path)) as broker:
        broker.create_topic("q")
        set_group_configs(broker.bootstrap, "g", share_auto_offset_reset="earliest")
        produce(broker.bootstrap, "q", 200, per_batch=10)
        tp = (topic_id(broker.bootstrap, "q"), 0)
        member = WireShareMember(broker.bootstrap, "g")
        member.join(["q"])
        assert acquired(member.fetch([tp], max_records=100))[tp] == [(0, 99, 1)]
        # Accept the even tens, release nothing: the odd tens stay acquired when the broker goes.
        answer = member.acknowledge({tp: [(first, first + 9, [1]) for first in range(0, 100, 20)]})
        assert answer.responses[0].partitions[0].error_code == ErrorCode.NONE  # acknowledged: must hold
        member.close()
        if how == "kill -9":
            broker.kill()
        else:
            broker.stop()
        broker.restart()
        consumer = share_consumer(broker.bootstrap, "g")
        consumer.subscribe(["q"])
        again = drain(consumer, 150, timeout=30)
        consumer.commit_sync(10)
        consumer.close()
    counts = {m.offset(): m.delivery_count() for m in again}
    assert len(again) == len(counts) == 150
    accepted = {o for first in range(0, 100, 20) for o in range(first, first + 10)}
    assert not accepted & set(counts)  # nothing acknowledged is delivered again
    held = set(range(100)) - accepted
    assert {counts[o] for o in held} == {2}  # held at the crash: back, their delivery counted
    assert {counts[o] for o in range(100, 200)} == {1}


def test_a_member_killed_holding_records_gives_them_back_at_once(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    share_broker.create_topic(topic_name)
    set_group_configs(bootstrap, f"{topic_name}-g", share_auto_offset_reset="earliest")
    produce(bootstrap, topic_name, 40)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from confluent_kafka import ShareConsumer
        c = ShareConsumer({{"bootstrap.servers": "{bootstrap}", "group.id": "{topic_name}-g",
                           "share.acknowledgement.mode": "explicit"}})
        c.subscribe(["{topic_name}"])
        got = 0
        while got < 40:
            got += len(c.poll(0.5))
        print("held", got, flush=True)
        import time; time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held 40"
        holder.kill()  # the lock is Kafka's default 30 s: these must come back with the connection
        holder.wait()
        started = time.monotonic()
        other = share_consumer(bootstrap, f"{topic_name}-g")
        other.subscribe([topic_name])
        again = drain(other, 40, timeout=15)
        other.close()
    finally:
        holder.kill()
    assert len(again) == 40 and {m.delivery_count() for m in again} == {2}
    assert time.monotonic() - started < 10


def test_a_topic_deleted_and_made_again_starts_afresh(share_broker: BrokerProcess, topic_name: str) -> None:
    bootstrap = share_broker.bootstrap
    group = f"{topic_name}-g"
    share_broker.create_topic(topic_name)
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest")
    produce(bootstrap, topic_name, 30)
    old_id = topic_id(bootstrap, topic_name)
    member = WireShareMember(bootstrap, group)
    member.join([topic_name])
    assert acquired(member.fetch([(old_id, 0)], max_records=10))[(old_id, 0)][0][:2] == (0, 29)
    member.acknowledge({(old_id, 0): [(0, 29, [1])]})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic_name])[topic_name].result(30)
    # The deleted topic's partitions answer UNKNOWN_TOPIC_ID; the session lives on.
    gone = member.fetch([(old_id, 0)], max_wait_ms=0)
    assert gone.error_code == ErrorCode.NONE
    assert gone.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    member.close()
    share_broker.create_topic(topic_name)
    produce(bootstrap, topic_name, 5, prefix="new")
    consumer = share_consumer(bootstrap, group)
    consumer.subscribe([topic_name])
    fresh = drain(consumer, 5)
    consumer.close()
    assert [m.offset() for m in sorted(fresh, key=lambda m: m.offset())] == [0, 1, 2, 3, 4]
    assert {m.delivery_count() for m in fresh} == {1} and {m.value()[:3] for m in fresh} == {b"new"}


def test_a_full_disk_refuses_share_fetches_cleanly_and_keeps_every_acknowledgement(
    mount_tmpfs: Callable[[str], Path],
) -> None:
    disk = mount_tmpfs("24m")
    broker = BrokerProcess(disk / "data", config=share_config(disk), min_free_bytes=MIN_FREE).start()
    try:
        bootstrap = broker.bootstrap
        broker.create_topic("q")
        set_group_configs(bootstrap, "g", share_auto_offset_reset="earliest")
        produce(bootstrap, "q", 100, per_batch=10)
        tp = (topic_id(bootstrap, "q"), 0)
        member = WireShareMember(bootstrap, "g")
        member.join(["q"])
        assert acquired(member.fetch([tp], max_records=10))[tp] == [(0, 9, 1)]
        assert member.acknowledge({tp: [(0, 9, [1])]}).responses[0].partitions[0].error_code == ErrorCode.NONE
        filler = fill_below(disk, MIN_FREE // 2)
        deadline = time.monotonic() + 30
        # The broker measures free space about once a second. An empty ShareAcknowledge, which changes
        # nothing, waits for it (fetching would acquire records meanwhile, and giving them back raises their
        # delivery counts towards the limit, where they are archived).
        while (probe := member.acknowledge({})).error_code == ErrorCode.NONE:
            assert time.monotonic() < deadline, "share acknowledgements still taken on a full disk"
        assert probe.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        answer = member.fetch([tp], max_records=10, max_wait_ms=0)
        assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR and not answer.responses
        member.session_epoch = 0
        filler.unlink()
        deadline = time.monotonic() + 30
        while (answer := member.fetch([tp], max_records=10, max_wait_ms=0)).error_code != ErrorCode.NONE:
            assert time.monotonic() < deadline, f"share fetches still refused once space is back: {answer}"
        # 0-9 were acknowledged before the disk filled: never again.
        assert acquired(answer)[tp] == [(10, 19, 1)]
        member.close()
        broker.kill()
        broker.restart()
        survivor = WireShareMember(broker.bootstrap, "g")
        survivor.join(["q"])
        assert acquired(survivor.fetch([tp], max_records=10))[tp][0][0] == 10
        survivor.close()
    finally:
        broker.stop()


def test_the_share_state_log_stays_bounded_by_compaction_and_survives_kill_9(tmp_path: Path) -> None:
    config = share_config(tmp_path, share_coordinator_state_topic_segment_bytes=4096, log_cleaner_backoff_ms=100)
    with BrokerProcess(tmp_path / "data", config=config) as broker:
        broker.create_topic("q")
        set_group_configs(broker.bootstrap, "g", share_auto_offset_reset="earliest")
        produce(broker.bootstrap, "q", 300)
        tp = (topic_id(broker.bootstrap, "q"), 0)
        member = WireShareMember(broker.bootstrap, "g")
        member.join(["q"])
        for _ in range(150):  # 300 state writes: an acquisition and an acknowledgement each time
            got = member.fetch([tp], max_records=1, version=2, share_acquire_mode=1)  # one record at a time
            [(first, last, _count)] = acquired(got)[tp]
            member.acknowledge({tp: [(first, last, [1])]})
        member.close()
        deadline = time.monotonic() + 30
        # One share-partition: the cleaner keeps its latest snapshot in closed segments, plus the active one.
        while len(state_records(broker.bootstrap)) >= 100:
            assert time.monotonic() < deadline, "__share_group_state is not compacted"
            time.sleep(0.2)
        broker.kill()
        broker.restart()
        after = WireShareMember(broker.bootstrap, "g")
        after.join(["q"])
        first, _last, count = acquired(after.fetch([tp], max_records=1))[tp][0]
        assert (first, count) == (150, 1)  # the 150 acknowledged before the kill are gone for good
        after.close()


def state_records(bootstrap: str) -> list[int]:
    """Offsets of the records __share_group_state still holds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "inspect", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("__share_group_state", 0), timeout=10)
        consumer.assign([TopicPartition("__share_group_state", 0, low)])
        offsets: list[int] = []
        while consumer.position([TopicPartition("__share_group_state", 0)])[0].offset < high:
            offsets += [m.offset() for m in consumer.consume(500, 0.5) if not m.error()]
        return offsets
    finally:
        consumer.close()
