"""Exactly-once tasks against the real broker, without Spark: attempts racing, stale commits.

Spark runs a task's attempts (retries, speculative copies, the tasks of a driver that was killed)
as separate processes; here they are separate producers in one process, interleaved at the
points that matter, which Spark cannot be made to hit on demand.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from sluice.pipeline.kafka_io import ProduceFailedError
from sluice.pipeline.options import SinkOptions, parse_sink_options
from sluice.pipeline.transactional import (
    TransactionalTask,
    TransactionsUnsupportedError,
    abort_job,
    check_transactions_supported,
    commit_prepared,
)


def _options(kafka: Any, target: str, **extra: str) -> SinkOptions:
    return parse_sink_options(
        {
            "kafka.bootstrap.servers": kafka.bootstrap,
            "topic": target,
            "deliveryGuarantee": "exactly-once",
            "commitTopic": "sluice-test-sink-commits",
            **extra,
        }
    )


def _produce(task: TransactionalTask, topic: str, values: list[bytes]) -> None:
    for value in values:
        task.tracker.produce(topic, value=value, key=None, headers=None, partition=0, timestamp_ms=None)


def _committed(kafka: Any, topic: str) -> list[bytes]:
    return [m.value() for m in _read(kafka, topic, "read_committed")]


def _read(kafka: Any, topic: str, isolation: str) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": "txn-task-check",
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    messages = []
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            break  # end of partition (the last stable offset for read_committed)
        messages.append(message)
    consumer.close()
    return messages


def _open_transactions(kafka: Any, prefix: str) -> list[str]:
    from sluice.client.wire import WireClient

    with WireClient.connect(kafka.bootstrap) as client:
        listed = client.call(
            "ListTransactions", 1, client.request_class("ListTransactions")(state_filters=[])
        )
        ids = [t.transactional_id for t in listed.transaction_states if t.transactional_id.startswith(prefix)]
        if not ids:
            return []
        cls = client.request_class("DescribeTransactions")
        states = client.call("DescribeTransactions", 0, cls(transactional_ids=ids)).transaction_states
    return [s.transactional_id for s in states if s.transaction_state == "Ongoing"]


def test_racing_attempts_of_a_streaming_task_commit_its_share_once(kafka: Any) -> None:
    _prepare_commit_topic(kafka)
    target = kafka.new_topic("txn-race")
    options = _options(kafka, target)
    prefix = f"race-{target}"
    first = TransactionalTask(options, prefix, batch_id=4, partition=0)
    second = TransactionalTask(options, prefix, batch_id=4, partition=0)  # a speculative copy
    try:
        assert first.begin()
        _produce(first, target, [b"first"])
        first.tracker.flush(10)  # on the log, inside the first attempt's transaction
        assert second.begin()  # fences the first attempt and aborts what it wrote
        _produce(second, target, [b"second"])
        with pytest.raises(ProduceFailedError):
            first.prepare()
        commit_prepared(options, [second.prepare()])  # the driver got the second's result
    finally:
        first.close()
        second.close()
    replay = TransactionalTask(options, prefix, batch_id=4, partition=0)  # after a driver crash
    try:
        assert not replay.begin(), "the replayed task must find the marker and write nothing"
    finally:
        replay.close()
    nxt = TransactionalTask(options, prefix, batch_id=5, partition=0)
    try:
        assert nxt.begin(), "the next batch is not taken for done"
        _produce(nxt, target, [b"next"])
        prepared = nxt.prepare()
        assert _committed(kafka, target) == [b"second"]  # prepared is not visible
        commit_prepared(options, [prepared])
    finally:
        nxt.close()
    assert _committed(kafka, target) == [b"second", b"next"]
    assert [m.value() for m in _read(kafka, target, "read_uncommitted")] == [b"first", b"second", b"next"]


def _prepare_commit_topic(kafka: Any) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    if "sluice-test-sink-commits" not in admin.list_topics(timeout=10).topics:
        futures = admin.create_topics([NewTopic("sluice-test-sink-commits", 1, 1)])
        try:
            futures["sluice-test-sink-commits"].result(10)
        except Exception:
            pass  # created meanwhile


def test_batch_tasks_stay_invisible_until_the_driver_commits_them(kafka: Any) -> None:
    target = kafka.new_topic("txn-2pc")
    options = _options(kafka, target)
    prefix = f"job-{target}"
    prepared = []
    for partition, values in enumerate([[b"a", b"b"], [b"c"]]):
        task = TransactionalTask(options, prefix, batch_id=0, partition=partition, markers=False)
        assert task.begin()
        _produce(task, target, values)
        prepared.append(task.prepare())
        task.close()
        del task  # the task's process may end: its transaction stays open
    assert _committed(kafka, target) == []
    assert sorted(_open_transactions(kafka, prefix)) == [f"{prefix}-0", f"{prefix}-1"]
    commit_prepared(options, prepared)
    assert _committed(kafka, target) == [b"a", b"b", b"c"]
    assert _open_transactions(kafka, prefix) == []


def test_batch_commit_refuses_a_fenced_task_before_committing_anything(kafka: Any) -> None:
    target = kafka.new_topic("txn-stale")
    options = _options(kafka, target)
    prefix = f"job-{target}"
    tasks = [TransactionalTask(options, prefix, 0, p, markers=False) for p in (0, 1)]
    prepared = []
    for task in tasks:
        assert task.begin()
        _produce(task, target, [b"p%d" % task.partition])
        prepared.append(task.prepare())
    # A late speculative attempt of task 1 fences the attempt whose result the driver holds.
    late = TransactionalTask(options, prefix, 0, 1, markers=False)
    assert late.begin()
    _produce(late, target, [b"late"])
    late.prepare()
    with pytest.raises(ProduceFailedError, match=f"{prefix}-1.*no longer open"):
        commit_prepared(options, prepared)
    assert _committed(kafka, target) == []  # task 0's share was not committed either
    abort_job(options, prefix, 2, prepared)  # what Spark calls next
    assert _open_transactions(kafka, prefix) == []
    assert _committed(kafka, target) == []
    assert len(_read(kafka, target, "read_uncommitted")) == 3


@pytest.mark.parametrize("mechanism", ["GSSAPI", "OAUTHBEARER"])
def test_batch_exactly_once_with_a_sasl_mechanism_the_driver_cannot_speak_is_refused_at_start(
    kafka: Any, mechanism: str
) -> None:
    # TLS and SASL PLAIN/SCRAM work (test_transactional_secured.py); these need Kerberos or tokens.
    options = _options(
        kafka, "t", **{"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": mechanism}
    )
    with pytest.raises(TransactionsUnsupportedError, match=f"sasl.mechanism {mechanism} is not one of"):
        check_transactions_supported(options, driver_commits=True)
