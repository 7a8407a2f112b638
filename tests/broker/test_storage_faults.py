"""Issue #15 end to end: a real `sluice broker` process, confluent-kafka producing while the fault happens.

- restart after a clean stop and after kill -9 once segments rolled (by size and by time);
- a full disk (a small tmpfs, root only): produce refused at once with KAFKA_STORAGE_ERROR and an ERROR
  line, reads and DeleteRecords keep working, writes resume once space is back;
- an I/O error (EIO) injected under one partition: that partition goes offline, the others keep working.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from test_broker_apis import wire_fetch
from tests.groups.test_group_coordinator_unload import wire_commit

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess, read_partition

EIO_HOOK = Path(__file__).with_name("eio_hook")


def create(bootstrap: str, name: str, configs: dict[str, str], partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(timeout=30)


def produce(
    bootstrap: str, topic: str, values: list[bytes], **config: object
) -> dict[bytes, tuple[int, int] | str]:
    """value -> (partition, offset) when acknowledged, else the error's name."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 20000, **config}
    )
    outcome: dict[bytes, tuple[int, int] | str] = {}

    def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
        outcome[msg.value()] = err.name() if err is not None else (msg.partition(), msg.offset())

    for value in values:
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    return outcome


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


def consume_range(bootstrap: str, topic: str, start: int, end: int) -> dict[int, bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"range-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    seen: dict[int, bytes] = {}
    deadline = time.monotonic() + 30
    while (not seen or max(seen) < end - 1) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None and msg.offset() < end:
                seen[msg.offset()] = msg.value()
    consumer.close()
    return seen


def stop_by(proc: BrokerProcess, how: str) -> None:
    if how == "kill":
        proc.kill()
    elif how == "sigint":
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGINT)
        assert proc.proc.wait(30) == 0
    else:
        assert proc.stop() == 0


@pytest.mark.parametrize("stop", ["sigterm", "sigint", "kill"])
def test_issue_restart_after_size_rolled_segments(tmp_path: Path, stop: str) -> None:
    """The issue's reproduction: segment.bytes=1048576, 5,000 records of 200 B, stop, start again."""
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create(proc.bootstrap, "rolled", {"segment.bytes": "1048576"})
        values = [f"{n:06d}".encode().ljust(200, b"x") for n in range(5000)]
        acked = produce(proc.bootstrap, "rolled", values)
        assert all(isinstance(v, tuple) for v in acked.values())
        assert len(list((tmp_path / "data" / "rolled-0").glob("*.log"))) >= 2
        stop_by(proc, stop)
        proc.restart()
        seen = read_partition(proc.bootstrap, "rolled")
        assert {seen[offset]: (0, offset) for offset in seen} == acked
        # And once more after the restarted broker rolled again and was stopped the other way.
        more = produce(proc.bootstrap, "rolled", [v.replace(b"x", b"y") for v in values[:1000]])
        stop_by(proc, "kill" if stop != "kill" else "sigterm")
        proc.restart()
        seen = read_partition(proc.bootstrap, "rolled")
        assert {seen[offset]: (0, offset) for offset in seen} == acked | more
    finally:
        proc.stop()


def test_issue_restart_after_time_rolled_segments(tmp_path: Path) -> None:
    """segment.ms=1000, three rounds of 10 records 1.5 s apart, kill -9, restart (each sealed segment's
    .index is empty)."""
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        create(proc.bootstrap, "quiet", {"segment.ms": "1000"})
        acked: dict[bytes, tuple[int, int] | str] = {}
        for round_ in range(3):
            if round_:
                time.sleep(1.5)
            acked |= produce(proc.bootstrap, "quiet", [f"r{round_}-{n}".encode() for n in range(10)])
        indexes = sorted((tmp_path / "data" / "quiet-0").glob("*.index"))
        assert len(indexes) >= 2 and indexes[0].stat().st_size == 0  # the active one has none yet
        proc.kill()
        proc.restart()
        seen = read_partition(proc.bootstrap, "quiet")
        assert {seen[offset]: (0, offset) for offset in seen} == acked
        proc.stop()
        proc.restart()
        assert read_partition(proc.bootstrap, "quiet") == seen
    finally:
        proc.stop()


def committed_offset(bootstrap: str, topic: str) -> int:
    """Group "committer"'s committed offset for partition 0 of `topic` (negative: none)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer"})
    try:
        return reader.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
    finally:
        reader.close()


def try_commit(bootstrap: str, topic: str, offset: int) -> bool:
    """Commit `offset` for group "committer"; True when the broker confirmed it and it reads back."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "committer", "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    except KafkaException:
        return False
    finally:
        consumer.close()
    return committed_offset(bootstrap, topic) == offset


@pytest.fixture
def small_tmpfs(mount_tmpfs: Callable[[str], Path]) -> Path:
    return mount_tmpfs("24m")


@pytest.mark.parametrize("min_free_bytes", [4 << 20, 0])
def test_full_disk_refuses_produce_at_once_and_resumes_when_space_is_freed(
    small_tmpfs: Path, min_free_bytes: int
) -> None:
    """With a threshold, produce stops 4 MiB short of full; without one (0) the real ENOSPC does it."""
    proc = BrokerProcess(small_tmpfs / "data", min_free_bytes=min_free_bytes).start()
    try:
        bootstrap = proc.bootstrap
        create(bootstrap, "fill", {"segment.bytes": "1048576"})
        values = [f"{n:06d}".encode().ljust(1000, b"z") for n in range(30_000)]
        started = time.monotonic()
        outcome = produce(bootstrap, "fill", values, retries=0)
        assert time.monotonic() - started < 15, "refusals must come at once, not after a timeout"
        acked = {v: r for v, r in outcome.items() if isinstance(r, tuple)}
        refused = [r for r in outcome.values() if not isinstance(r, tuple)]
        assert 10_000 < len(acked) < 30_000
        assert refused and set(refused) == {"KAFKA_STORAGE_ERROR"}
        log = "".join(proc.output)
        if min_free_bytes:
            assert f"below min_free_bytes {min_free_bytes}; refusing writes" in log
            assert os.statvfs(small_tmpfs).f_bavail * os.statvfs(small_tmpfs).f_frsize > 2 << 20
        else:
            assert "disk full (ENOSPC); refusing writes" in log
        # Rate-limited: not one line per refused request.
        assert log.count("refusing writes") < 10
        if min_free_bytes:
            # A group commit is a write too: refused (the coordinator unloads: NOT_COORDINATOR) before it
            # changes anything. Asked on the wire: librdkafka's synchronous commit would wait for the
            # coordinator to come back, as it does with Kafka.
            with WireClient.connect(bootstrap) as client:
                assert wire_commit(client, 5, group="committer", topic="fill") == ErrorCode.NOT_COORDINATOR
            # The log line is read from the broker's output by another thread: it may come after the answer.
            deadline = time.monotonic() + 30
            while "group offset_commit refused" not in "".join(proc.output) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "group offset_commit refused" in "".join(proc.output)
        # Reads, metadata and DeleteRecords keep working.
        seen = read_partition(bootstrap, "fill")
        assert {seen[o]: (0, o) for o in seen} == acked
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert "fill" in admin.list_topics(timeout=10).topics
        end = max(offset for _, offset in acked.values()) + 1
        futures = admin.delete_records([TopicPartition("fill", 0, end - 1000)])
        assert futures[TopicPartition("fill", 0, end - 1000)].result(timeout=30).low_watermark == end - 1000
        # Space is back: writes resume on their own, and land after everything acknowledged.
        deadline = time.monotonic() + 10
        while True:
            again = produce(bootstrap, "fill", [b"after-" + str(time.monotonic()).encode()], retries=0)
            result = next(iter(again.values()))
            if isinstance(result, tuple) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert result == (0, end)
        if min_free_bytes:
            assert committed_offset(bootstrap, "fill") < 0  # the refused commit never landed
            assert try_commit(bootstrap, "fill", end)
    finally:
        proc.stop()
    # And the broker comes back from the tmpfs with what it acknowledged.
    proc.restart()
    try:
        seen = read_partition(proc.bootstrap, "fill")
        assert min(seen) == end - 1000 and max(seen) == end
    finally:
        proc.stop()


@pytest.mark.parametrize(("failing", "fsync_on_loop_below_ms"), [("all", 0.5), ("fsync", 0.5), ("fsync", 0)])
def test_io_error_takes_one_partition_offline_and_the_others_keep_working(
    tmp_path: Path, failing: str, fsync_on_loop_below_ms: float
) -> None:
    """EIO from fsync and writes under one partition's directory (injected by tests/broker/eio_hook's
    sitecustomize once a trigger file exists): its producers and consumers get KAFKA_STORAGE_ERROR and
    nothing more is acknowledged, other partitions keep working, a restart brings it back with everything
    it acknowledged. Short fsyncs run on the event loop; `fsync_on_loop_below_ms: 0` puts them all on the
    fsync thread."""
    trigger = tmp_path / "eio-now"
    env_path = os.pathsep.join([str(EIO_HOOK), *sys.path])
    config = tmp_path / "broker.yaml"
    config.write_text(f"fsync_on_loop_below_ms: {fsync_on_loop_below_ms}\n")
    proc = BrokerProcess(tmp_path / "data", config=config)
    with _environ(
        PYTHONPATH=env_path,
        SLUICE_TEST_EIO_TRIGGER=str(trigger),
        SLUICE_TEST_EIO_DIR="victim-0",
        SLUICE_TEST_EIO_OPS=failing,
    ):
        proc.start()
    try:
        bootstrap = proc.bootstrap
        create(bootstrap, "victim", {})
        create(bootstrap, "healthy", {})
        before = produce(bootstrap, "victim", [f"v{n}".encode() for n in range(200)])
        assert all(isinstance(r, tuple) for r in before.values())
        trigger.touch()
        during = produce(bootstrap, "victim", [f"w{n}".encode() for n in range(50)], retries=0)
        assert set(during.values()) == {"KAFKA_STORAGE_ERROR"}
        healthy = produce(bootstrap, "healthy", [f"h{n}".encode() for n in range(200)], retries=0)
        assert all(isinstance(r, tuple) for r in healthy.values())
        assert len(read_partition(bootstrap, "healthy")) == 200
        # Consumers are refused too: librdkafka retries KAFKA_STORAGE_ERROR quietly, so it gets nothing;
        # the raw Fetch shows the code.
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "offline", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition("victim", 0, 0)])
        got = consumer.consume(100, 2.0)
        consumer.close()
        assert [m for m in got if m.error() is None] == []
        with WireClient.connect(bootstrap) as client:
            assert wire_fetch(client, "victim", 0, max_wait_ms=0).error_code == ErrorCode.KAFKA_STORAGE_ERROR
            assert wire_fetch(client, "healthy", 0, max_wait_ms=0).error_code == ErrorCode.NONE
        assert "partition offline until restart" in "".join(proc.output)
    finally:
        proc.stop()
    trigger.unlink()
    proc.restart()
    try:
        seen = read_partition(proc.bootstrap, "victim")
        assert {seen[o]: (0, o) for o in seen if seen[o].startswith(b"v")} == before
        assert len(read_partition(proc.bootstrap, "healthy")) == 200
    finally:
        proc.stop()


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize("skip", [False, True])
def test_a_corrupt_batch_costs_that_batch_and_fetch_says_corrupt_message(
    tmp_path: Path, skip: bool, flip_a_byte: Callable[[Path], Path]
) -> None:
    """The issue's corruption case end to end: a byte flipped in a sealed segment of a stopped broker;
    after the restart every other acknowledged message is read at its offset, a Fetch of the damaged
    offsets answers CORRUPT_MESSAGE, or (skip_damaged_offsets) consumers read straight past them."""
    config = tmp_path / "broker.yaml"
    config.write_text(f"skip_damaged_offsets: {str(skip).lower()}\n")
    proc = BrokerProcess(tmp_path / "data", config=config).start()
    try:
        create(proc.bootstrap, "bits", {"segment.bytes": "100000"})
        values = [f"{n:06d}".encode().ljust(100, b"q") for n in range(6000)]
        acked = produce(proc.bootstrap, "bits", values, **{"batch.num.messages": 50})
        proc.stop()
        segment = flip_a_byte(tmp_path / "data" / "bits-0")
        proc.restart()
        with WireClient.connect(proc.bootstrap) as client:
            wire_fetch(client, "bits", 0, max_wait_ms=0)  # the partition opens, and is checked, at first use
        assert str(segment) in "".join(proc.output) and "damaged" in "".join(proc.output)
        [damage] = json.loads((tmp_path / "data" / "bits-0" / "damaged.json").read_text())["ranges"]
        first_bad, after_bad = damage["first_offset"], damage["end_offset"]
        assert 1 <= after_bad - first_bad <= 50  # one producer batch
        with WireClient.connect(proc.bootstrap) as client:
            bad = wire_fetch(client, "bits", first_bad, max_wait_ms=0)
            good = wire_fetch(client, "bits", after_bad, max_wait_ms=0)
        assert good.error_code == ErrorCode.NONE and good.records
        if skip:
            assert bad.error_code == ErrorCode.NONE and bad.records  # the batch after the damage
            seen = consume_range(proc.bootstrap, "bits", 0, 6000)
        else:
            assert bad.error_code == ErrorCode.CORRUPT_MESSAGE
            seen = consume_range(proc.bootstrap, "bits", 0, first_bad) | consume_range(
                proc.bootstrap, "bits", after_bad, 6000
            )
        assert len(seen) == 6000 - (after_bad - first_bad)
        assert all(acked[value] == (0, offset) for offset, value in seen.items())
    finally:
        proc.stop()


def test_full_disk_topic_admin_and_transactions_fail_cleanly_and_deleting_a_topic_frees_space(
    small_tmpfs: Path, fill_up: Callable[[Path], Path]
) -> None:
    """On a disk full to the last byte: CreateTopics and auto-creation answer KAFKA_STORAGE_ERROR and create
    nothing, a transaction's commit is held off (NOT_COORDINATOR, retried by the client) without
    the coordinator changing state, DeleteTopics still works and frees space, and then everything resumes:
    the commit goes through and every committed message is at its offset, also after a restart."""
    proc = BrokerProcess(small_tmpfs / "data", min_free_bytes=0).start()
    try:
        bootstrap = proc.bootstrap
        create(bootstrap, "kept", {})
        create(bootstrap, "hog", {"segment.bytes": "1048576"})
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "full-disk", "linger.ms": 5})
        txn.init_transactions(30)
        txn.begin_transaction()
        for n in range(20):
            txn.produce("kept", f"t{n}".encode())
        assert txn.flush(30) == 0
        hogged = produce(bootstrap, "hog", [b"h" * 1000] * 30_000, retries=0)
        assert "KAFKA_STORAGE_ERROR" in hogged.values()
        ballast = fill_up(small_tmpfs)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        with pytest.raises(KafkaException) as raised:
            admin.create_topics([NewTopic("late", 2, 1)])["late"].result(timeout=30)
        assert raised.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        with WireClient.connect(bootstrap) as client:  # auto-creation by a metadata request
            cls = client.request_class("Metadata")
            wanted = cls(topics=[cls.MetadataRequestTopic(name="auto")], allow_auto_topic_creation=True)
            [topic] = client.call("Metadata", 12, wanted).topics
            assert topic.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert {"late", "auto"}.isdisjoint(admin.list_topics(timeout=10).topics)
        assert not list((small_tmpfs / "data").glob("late-*")) and not list(
            (small_tmpfs / "data").glob("auto-*")
        )
        committed: list[BaseException | None] = []
        committing = threading.Thread(target=lambda: committed.append(_commit(txn)))
        committing.start()
        time.sleep(2)
        assert not committed, "a commit needs room for its markers and transaction state"
        with WireClient.connect(bootstrap) as client:
            cls = client.request_class("DescribeTransactions")
            [state] = client.call(
                "DescribeTransactions", 0, cls(transactional_ids=["full-disk"])
            ).transaction_states
            # Its coordinator unloaded when `__transaction_state` could not take the commit (issue 29):
            # NOT_COORDINATOR, as Kafka answers for a coordinator that lost its partition.
            assert state.error_code == ErrorCode.NOT_COORDINATOR
        # The operator deletes the topic that filled the disk: that works with no byte free, and frees it.
        admin.delete_topics(["hog"])["hog"].result(timeout=30)
        committing.join(30)
        assert committed == [None]
        ballast.unlink()
        after = produce(bootstrap, "kept", [b"after"], retries=0)
        assert after == {b"after": (0, 21)}  # 20 messages and the commit marker before it
        admin.create_topics([NewTopic("late", 2, 1)])["late"].result(timeout=30)
    finally:
        proc.stop()
    proc.restart()
    try:
        topics = AdminClient({"bootstrap.servers": proc.bootstrap}).list_topics(timeout=10).topics
        assert "hog" not in topics and {"kept", "late"} <= set(topics)
        seen = consume_range(proc.bootstrap, "kept", 0, 22)  # read_committed: offset 20 is the marker
        assert seen == {n: f"t{n}".encode() for n in range(20)} | {21: b"after"}
    finally:
        proc.stop()


def _commit(producer: Producer) -> BaseException | None:
    try:
        producer.commit_transaction(60)
    except KafkaException as exc:
        return exc
    return None


def test_on_a_full_disk_configs_can_change_and_retention_frees_space_so_writes_resume(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    """Below min_free_bytes an operator lowers retention.bytes (AlterConfigs is a metadata write, which the
    margin leaves room for); the retention timer deletes old segments and produce resumes by itself, at the
    offset after everything acknowledged."""
    config = tmp_path / "broker.yaml"
    config.write_text("retention_check_interval_ms: 200\n")
    proc = BrokerProcess(small_tmpfs / "data", config=config, min_free_bytes=4 << 20).start()
    try:
        bootstrap = proc.bootstrap
        create(bootstrap, "hog", {"segment.bytes": "1048576"})
        outcome = produce(
            bootstrap, "hog", [f"{n:06d}".encode().ljust(1000, b"r") for n in range(30_000)], retries=0
        )
        acked = sorted(r for r in outcome.values() if isinstance(r, tuple))
        assert "KAFKA_STORAGE_ERROR" in outcome.values() and acked
        end = acked[-1][1] + 1
        refused = produce(bootstrap, "hog", [b"still full"], retries=0)
        assert refused == {b"still full": "KAFKA_STORAGE_ERROR"}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        resource = ConfigResource(
            "topic",
            "hog",
            incremental_configs=[
                ConfigEntry("retention.bytes", "3000000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        deadline = time.monotonic() + 20
        while True:
            result = produce(bootstrap, "hog", [b"room again"], retries=0)[b"room again"]
            if isinstance(result, tuple) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert result == (0, end)
        low, high = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"}).get_watermark_offsets(
            TopicPartition("hog", 0), timeout=10
        )
        assert high == end + 1 and 0 < low < end - 2000  # retention dropped whole segments, kept the rest
        assert "accepting writes" in "".join(proc.output)
    finally:
        proc.stop()


def describe_transaction(bootstrap: str, transactional_id: str) -> str:
    with WireClient.connect(bootstrap) as client:
        cls = client.request_class("DescribeTransactions")
        [state] = client.call(
            "DescribeTransactions", 0, cls(transactional_ids=[transactional_id])
        ).transaction_states
        return state.transaction_state


def test_a_timed_out_transaction_is_aborted_only_once_its_markers_can_be_written(small_tmpfs: Path) -> None:
    """The coordinator's timers write too (abort markers, transaction state): below min_free_bytes they wait,
    so the coordinator never decides what the log cannot record; once space is back the abort happens."""
    proc = BrokerProcess(small_tmpfs / "data", min_free_bytes=4 << 20).start()
    try:
        bootstrap = proc.bootstrap
        create(bootstrap, "slow", {})
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "sleepy", "transaction.timeout.ms": 1000}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("slow", b"never committed")
        assert producer.flush(10) == 0
        stats = os.statvfs(small_tmpfs)
        ballast = small_tmpfs / "ballast"
        ballast.write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - (2 << 20)))
        time.sleep(2.5)
        assert describe_transaction(bootstrap, "sleepy") == "Ongoing"
        ballast.unlink()
        deadline = time.monotonic() + 10
        while describe_transaction(bootstrap, "sleepy") != "CompleteAbort" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert describe_transaction(bootstrap, "sleepy") == "CompleteAbort"
        with WireClient.connect(bootstrap) as client:
            fetched = wire_fetch(client, "slow", 0, max_wait_ms=0)
            assert fetched.error_code == ErrorCode.NONE and fetched.high_watermark == 2  # record + marker
    finally:
        proc.stop()


def test_a_steady_idempotent_producer_is_refused_soon_after_something_else_takes_the_free_space(
    small_tmpfs: Path,
) -> None:
    """Another program (a ballast file) takes the free space while an idempotent producer keeps writing: the
    broker notices within its probe interval, so little is written below min_free_bytes (probing once a
    second, a producer of a few MB/s ate the rest of the disk before the refusal), the refused batches land
    once space is back, and every acknowledged record is there, once."""
    floor = 4 << 20
    proc = BrokerProcess(small_tmpfs / "data", min_free_bytes=floor).start()
    try:
        bootstrap = proc.bootstrap
        create(bootstrap, "steady", {})
        producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0,
             "message.timeout.ms": 60000, "batch.size": 16384}
        )  # fmt: skip
        acked: dict[bytes, int] = {}
        failed: list[str] = []
        enough, stop = threading.Event(), threading.Event()

        def delivered(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                failed.append(err.name())
            else:
                acked[msg.value()] = msg.offset()
                if len(acked) >= 2000:
                    enough.set()

        def keep_producing() -> None:
            n = 0
            while not stop.is_set():
                try:
                    producer.produce("steady", f"{n:08d}".encode().ljust(300, b"s"), on_delivery=delivered)
                    n += 1
                except BufferError:
                    pass
                producer.poll(0.001 if n % 50 == 0 else 0)

        writer = threading.Thread(target=keep_producing, daemon=True)
        writer.start()
        assert enough.wait(60)
        # Fill in steps, measuring as the producer goes on: stop 3 MiB short of full, below the 4 MiB floor.
        ballast = small_tmpfs / "ballast"
        with ballast.open("wb") as filling:
            while (free := free_bytes(small_tmpfs)) > (3 << 20):
                filling.write(b"\0" * min(free - (3 << 20), 1 << 20))
                filling.flush()
        deadline = time.monotonic() + 30
        while "refusing writes" not in "".join(proc.output) and time.monotonic() < deadline:
            time.sleep(0.01)
        log = "".join(proc.output)
        assert f"below min_free_bytes {floor}; refusing writes" in log
        assert "ENOSPC" not in log  # refused on the floor, well before the disk was full
        # Batches of 16 KiB, at most 5 requests in flight: what was due within 256 KiB stays well below 1 MiB.
        assert free_bytes(small_tmpfs) > (2 << 20)
        stop.set()
        writer.join(30)
        ballast.unlink()
        assert producer.flush(90) == 0
        assert failed == []
        seen = read_partition(bootstrap, "steady")
        assert len(set(seen.values())) == len(seen)  # idempotence: no record twice
        assert {value: offset for offset, value in seen.items()} == acked
    finally:
        proc.kill()
