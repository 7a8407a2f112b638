"""KIP-467 per-record produce errors: a record whose CreateTime timestamp is outside the topic's
message.timestamp.before.max.ms/after.max.ms (KIP-937) fails by index in record_errors; librdkafka fails
just those records with INVALID_RECORD and the rest of the batch with _INVALID_DIFFERENT_RECORD, so they can
be sent again and succeed. Nothing of a refused batch is appended."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, encode_batch

HOUR_MS = 3_600_000


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            values.append(message.value())
    consumer.close()
    return values


def test_librdkafka_fails_just_the_records_with_bad_timestamps(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    config = {"message.timestamp.before.max.ms": str(HOUR_MS), "message.timestamp.after.max.ms": str(HOUR_MS)}
    ck_admin.create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "enable.idempotence": False})
    reports: dict[bytes, int] = {}

    def report(error: KafkaError | None, message: object) -> None:
        reports[message.value()] = error.code() if error else 0  # type: ignore[attr-defined]

    now = int(time.time() * 1000)
    stamps = {b"r0": now, b"r1": now, b"old": now - 2 * HOUR_MS, b"r3": now, b"future": now + 2 * HOUR_MS}
    for value, stamp in stamps.items():
        producer.produce(topic_name, value=value, timestamp=stamp, on_delivery=report)
    assert producer.flush(20) == 0
    assert reports == {
        b"r0": KafkaError._INVALID_DIFFERENT_RECORD,
        b"r1": KafkaError._INVALID_DIFFERENT_RECORD,
        b"old": ErrorCode.INVALID_RECORD,
        b"future": ErrorCode.INVALID_RECORD,
        b"r3": KafkaError._INVALID_DIFFERENT_RECORD,
    }
    # The good records go through when sent again; nothing of the refused batch was stored.
    for value in (b"r0", b"r1", b"r3"):
        producer.produce(topic_name, value=value, timestamp=now, on_delivery=report)
    assert producer.flush(20) == 0
    assert [reports[v] for v in (b"r0", b"r1", b"r3")] == [0, 0, 0]
    assert _consume_all(bootstrap, topic_name, 3) == [b"r0", b"r1", b"r3"]


def test_record_errors_on_the_wire(ck_admin: AdminClient, bootstrap: str, topic_name: str) -> None:
    """The Produce response names each bad record's index with a message, under INVALID_TIMESTAMP."""
    ck_admin.create_topics(
        [NewTopic(topic_name, 1, 1, config={"message.timestamp.difference.max.ms": "60000"})]
    )[topic_name].result(10)
    now = int(time.time() * 1000)
    records = [
        Record(offset_delta=i, timestamp_delta=delta, key=None, value=b"v")
        for i, delta in enumerate([0, 0, -120_000, 0, 120_000])
    ]
    batch = encode_batch(records, base_timestamp=now)
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("Produce")
        request = R(
            acks=-1,
            timeout_ms=10_000,
            topic_data=[
                R.TopicProduceData(
                    name=topic_name, partition_data=[R.PartitionProduceData(index=0, records=batch)]
                )
            ],
        )
        response = wire.call("Produce", 9, request)
    (part,) = response.responses[0].partition_responses
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP and part.error_message
    assert [e.batch_index for e in part.record_errors] == [2, 4]
    assert all("out of range" in e.batch_index_error_message for e in part.record_errors)
    assert ck_admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0].id == 0


def test_log_append_time_topics_skip_the_check(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """With LogAppendTime the broker stamps the time itself, so Kafka does not check producer timestamps."""
    config = {"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1000"}
    ck_admin.create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name].result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    errors: list[object] = []
    producer.produce(topic_name, value=b"old", timestamp=1_000, on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(20) == 0 and errors == [None]


def _produce_raw(bootstrap: str, topic: str, batch: bytes) -> object:
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("Produce")
        request = R(
            acks=-1,
            timeout_ms=10_000,
            topic_data=[
                R.TopicProduceData(
                    name=topic, partition_data=[R.PartitionProduceData(index=0, records=batch)]
                )
            ],
        )
        (part,) = wire.call("Produce", 9, request).responses[0].partition_responses
    return part


def test_records_without_a_timestamp_pass_the_bounds(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """LogValidator.validateTimestamp checks only records that carry a timestamp: -1 (NO_TIMESTAMP) is let
    through on a CreateTime topic with tight bounds, while a dated record out of range still fails."""
    ck_admin.create_topics(
        [NewTopic(topic_name, 1, 1, config={"message.timestamp.difference.max.ms": "60000"})]
    )[topic_name].result(10)
    undated = encode_batch(
        [Record(offset_delta=0, timestamp_delta=0, key=None, value=b"undated")], base_timestamp=-1
    )
    part = _produce_raw(bootstrap, topic_name, undated)
    assert part.error_code == ErrorCode.NONE and part.base_offset == 0  # type: ignore[attr-defined]
    stale = encode_batch(
        [Record(offset_delta=0, timestamp_delta=0, key=None, value=b"stale")], base_timestamp=1_000
    )
    part = _produce_raw(bootstrap, topic_name, stale)
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP  # type: ignore[attr-defined]
    assert [e.batch_index for e in part.record_errors] == [0]  # type: ignore[attr-defined]
    assert _consume_all(bootstrap, topic_name, 1) == [b"undated"]


def test_producer_batches_may_not_claim_log_append_time(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """KIP-467 with LogValidator's rule that only the broker sets LogAppendTime: on a LogAppendTime topic a
    producer batch flagged LogAppendTime fails every record by index under INVALID_TIMESTAMP, and nothing of it
    is stored; an ordinary CreateTime batch to the same topic is appended."""
    config = {"message.timestamp.type": "LogAppendTime"}
    ck_admin.create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name].result(10)
    now = int(time.time() * 1000)
    records = [Record(offset_delta=i, timestamp_delta=0, key=None, value=b"claimed") for i in range(3)]
    flagged = encode_batch(records, base_timestamp=now, timestamp_type_log_append=True)
    part = _produce_raw(bootstrap, topic_name, flagged)
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP and part.error_message  # type: ignore[attr-defined]
    assert [e.batch_index for e in part.record_errors] == [0, 1, 2]  # type: ignore[attr-defined]
    assert all("LogAppendTime" in e.batch_index_error_message for e in part.record_errors)  # type: ignore[attr-defined]
    plain = encode_batch(
        [Record(offset_delta=0, timestamp_delta=0, key=None, value=b"plain")], base_timestamp=now
    )
    part = _produce_raw(bootstrap, topic_name, plain)
    assert part.error_code == ErrorCode.NONE and part.base_offset == 0  # type: ignore[attr-defined]
    assert _consume_all(bootstrap, topic_name, 1) == [b"plain"]


def test_keyless_records_to_a_compacted_topic_fail_by_index(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """KIP-467 as Kafka's LogValidator.validateKey answers it: on a compacted topic each record without a key
    is named in record_errors under INVALID_RECORD; nothing of the batch is stored, and librdkafka fails just
    those records, so the keyed ones go through when sent again. (With a single record error librdkafka
    reports the partition's error for every record of the batch, by its own design, so two are sent.)"""
    ck_admin.create_topics([NewTopic(topic_name, 1, 1, config={"cleanup.policy": "compact"})])[
        topic_name
    ].result(10)
    now = int(time.time() * 1000)
    records = [
        Record(offset_delta=i, timestamp_delta=0, key=key, value=b"v")
        for i, key in enumerate([b"a", None, b"c", None])
    ]
    part = _produce_raw(bootstrap, topic_name, encode_batch(records, base_timestamp=now))
    assert part.error_code == ErrorCode.INVALID_RECORD and part.error_message  # type: ignore[attr-defined]
    assert [e.batch_index for e in part.record_errors] == [1, 3]  # type: ignore[attr-defined]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100, "enable.idempotence": False})
    reports: dict[bytes, int] = {}

    def report(error: KafkaError | None, message: object) -> None:
        reports[message.value()] = error.code() if error else 0  # type: ignore[attr-defined]

    for key, value in [(b"k1", b"one"), (None, b"keyless"), (b"k3", b"three"), (None, b"keyless too")]:
        producer.produce(topic_name, key=key, value=value, on_delivery=report)
    assert producer.flush(20) == 0
    assert reports == {
        b"one": KafkaError._INVALID_DIFFERENT_RECORD,
        b"keyless": ErrorCode.INVALID_RECORD,
        b"three": KafkaError._INVALID_DIFFERENT_RECORD,
        b"keyless too": ErrorCode.INVALID_RECORD,
    }
    for key, value in [(b"k1", b"one"), (b"k3", b"three")]:
        producer.produce(topic_name, key=key, value=value, on_delivery=report)
    assert producer.flush(20) == 0 and reports[b"one"] == reports[b"three"] == 0
    assert _consume_all(bootstrap, topic_name, 2) == [b"one", b"three"]


def test_a_batch_failing_both_checks_names_every_bad_record(
    ck_admin: AdminClient, bootstrap: str, topic_name: str
) -> None:
    """LogValidator.processRecordErrors: a record keeps its first error (the key check comes before the
    timestamp check), every bad record is listed, and INVALID_TIMESTAMP wins as the partition's error."""
    config = {"cleanup.policy": "compact", "message.timestamp.before.max.ms": str(HOUR_MS)}
    ck_admin.create_topics([NewTopic(topic_name, 1, 1, config=config)])[topic_name].result(10)
    now = int(time.time() * 1000)
    layout = [(None, 0), (b"k", -2 * HOUR_MS), (None, -2 * HOUR_MS), (b"ok", 0)]
    records = [
        Record(offset_delta=i, timestamp_delta=delta, key=key, value=b"v")
        for i, (key, delta) in enumerate(layout)
    ]
    part = _produce_raw(bootstrap, topic_name, encode_batch(records, base_timestamp=now))
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP  # type: ignore[attr-defined]
    errors = [(e.batch_index, e.batch_index_error_message) for e in part.record_errors]  # type: ignore[attr-defined]
    assert [i for i, _ in errors] == [0, 1, 2]
    assert "key" in errors[0][1] and "out of range" in errors[1][1] and "key" in errors[2][1]
    keyless_only = [Record(offset_delta=0, timestamp_delta=0, key=None, value=b"v")]
    part = _produce_raw(bootstrap, topic_name, encode_batch(keyless_only, base_timestamp=now))
    assert part.error_code == ErrorCode.INVALID_RECORD  # type: ignore[attr-defined]
