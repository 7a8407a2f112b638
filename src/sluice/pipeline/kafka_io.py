"""Everything that talks to Kafka: driver-side metadata, executor-side range reads and produces.

All clients are confluent-kafka (librdkafka). Readers build pyarrow batches column by column from
each ``consume()`` call instead of one Python tuple per row, which roughly doubles throughput.
"""

from __future__ import annotations

import gc
import logging
import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np  # comes with pandas, which the pipeline extra requires
import pyarrow as pa
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from sluice.pipeline.options import PipelineOptionError, Subscription, client_config
from sluice.pipeline.planning import (
    DataLossError,
    OffsetRange,
    PartitionOffsets,
    Watermarks,
)
from sluice.pipeline.planning import TopicPartition as TP

log = logging.getLogger(__name__)

# librdkafka's timestamp types are Kafka's shifted by one (0 = not available).
_KAFKA_TIMESTAMP_TYPE_OFFSET = 1
_TIMESTAMP_NOT_AVAILABLE = 0
_READER_GROUP_ID = "sluice-pipeline-reader"


class KafkaUnavailableError(RuntimeError):
    """The broker could not be reached or did not answer in time."""


def _librdkafka_logger() -> logging.Logger:
    # Routes librdkafka's own connection chatter through Python logging instead of raw stderr.
    return logging.getLogger("sluice.pipeline.librdkafka")


# librdkafka settings of every reader that kafka.* options may override (the bench gives its
# ceiling consumer the same ones, so the comparison is like for like).
READER_DEFAULTS: dict[str, Any] = {
    "group.id": _READER_GROUP_ID,
    # librdkafka stops fetching once its local queue passes queued.min.messages and then waits this
    # long before fetching again (default 1000 ms). A task drains 100k queued messages in well
    # under a second, so the default left it idle most of the time: ~200k rows/s per partition
    # instead of ~1M on loopback, with the same CPU per row.
    "fetch.queue.backoff.ms": 10,
    # Records of aborted or still-open transactions are never rows (librdkafka's default, spelled
    # out because Spark's own connector reads uncommitted by default). kafka.isolation.level=
    # read_uncommitted restores that, and "latest" then means the high watermark, not the LSO.
    "isolation.level": "read_committed",
}


def _consumer_config(bootstrap: str, kafka_config: Mapping[str, str]) -> dict[str, Any]:
    config: dict[str, Any] = {**READER_DEFAULTS, **client_config(bootstrap, kafka_config)}
    config.update(
        {
            # Offsets live in Spark's checkpoint; the group (if any) only mirrors them for lag tools.
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # Out-of-range must surface as data loss, never as a silent jump to another offset.
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "logger": _librdkafka_logger(),
        }
    )
    return config


class KafkaMetadata:
    """Driver-side view of the cluster: partitions, watermarks, offsets for times, group commits."""

    def __init__(self, bootstrap: str, kafka_config: Mapping[str, str], timeout_s: float) -> None:
        self._bootstrap = bootstrap
        self._timeout_s = timeout_s
        settings = {**client_config(bootstrap, kafka_config), "logger": _librdkafka_logger()}
        settings.pop("group.id", None)
        try:
            self._admin = AdminClient(settings)
        except KafkaException as error:
            raise PipelineOptionError(f"invalid kafka.* option: {error.args[0].str()}") from None
        self._consumer_config = _consumer_config(bootstrap, kafka_config)
        self._consumer: Consumer | None = None
        # "latest" must be what the readers' consumers can reach: the last stable offset when they
        # read committed (librdkafka's default), so open transactions do not stall a range.
        uncommitted = str(kafka_config.get("isolation.level", "")).lower() == "read_uncommitted"
        self._isolation = IsolationLevel.READ_UNCOMMITTED if uncommitted else IsolationLevel.READ_COMMITTED

    def _unavailable(self, what: str, error: object) -> KafkaUnavailableError:
        return KafkaUnavailableError(
            f"Kafka at {self._bootstrap} did not answer {what} within {self._timeout_s:g}s: {error}"
        )

    def topic_partitions(self) -> dict[str, int]:
        """Partition count of every non-internal topic."""
        try:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
        except KafkaException as error:
            raise self._unavailable("a metadata request", error.args[0]) from None
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and not name.startswith("__")
        }

    def subscribed_partitions(self, subscription: Subscription) -> tuple[list[TP], list[str]]:
        """The partitions matching ``subscription`` and the explicitly named topics that do not exist."""
        counts = self.topic_partitions()
        if subscription.assigned:
            missing = sorted({t for t, p in subscription.assigned if p >= counts.get(t, 0)})
            return [tp for tp in subscription.assigned if tp[1] < counts.get(tp[0], 0)], missing
        if subscription.pattern is not None:
            found = [(t, p) for t, n in counts.items() if subscription.matches(t) for p in range(n)]
            return sorted(found), []
        missing = [t for t in subscription.topics if t not in counts]
        return sorted((t, p) for t in subscription.topics for p in range(counts.get(t, 0))), missing

    def _list_offsets(self, partitions: Sequence[TP], spec: OffsetSpec, what: str) -> PartitionOffsets:
        if not partitions:
            return {}
        request = {TopicPartition(t, p): spec for t, p in partitions}
        try:
            futures = self._admin.list_offsets(
                request, isolation_level=self._isolation, request_timeout=self._timeout_s
            )
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except KafkaException as error:
            raise self._unavailable(what, error.args[0]) from None

    def watermarks(self, partitions: Sequence[TP]) -> dict[TP, tuple[int, int]]:
        low = self._list_offsets(partitions, OffsetSpec.earliest(), "an earliest-offsets request")
        high = self._list_offsets(partitions, OffsetSpec.latest(), "a latest-offsets request")
        return {tp: (low[tp], high[tp]) for tp in partitions}

    def offsets_for_timestamp(self, partitions: list[TP], timestamp_ms: int) -> PartitionOffsets:
        return self._list_offsets(partitions, OffsetSpec.for_timestamp(timestamp_ms), "an offsets-for-time request")

    def commit_to_group(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        """Mirror Spark's progress into a consumer group so lag tools can see it; best effort."""
        if self._consumer is None:
            self._consumer = Consumer({**self._consumer_config, "group.id": group_id})
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False
            )
        except KafkaException as error:
            log.warning("could not commit progress to consumer group %s: %s", group_id, error)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def read_range(
    bootstrap: str,
    kafka_config: Mapping[str, str],
    offset_range: OffsetRange,
    schema: pa.Schema,
    poll_timeout_s: float,
    fail_on_data_loss: bool,
    max_batch_rows: int = 10_000,
) -> Iterator[pa.RecordBatch]:
    """Yield ``offset_range`` as Arrow batches, read with assign + seek (no group membership)."""
    consumer = Consumer(_consumer_config(bootstrap, kafka_config))
    topic, partition = offset_range.topic, offset_range.partition
    try:
        start, end = _readable_part(consumer, offset_range, poll_timeout_s, fail_on_data_loss)
        if start >= end:
            return
        consumer.assign([TopicPartition(topic, partition, start)])
        last_progress = time.monotonic()
        next_offset = start
        while next_offset < end:
            with _cyclic_gc_paused():
                messages = consumer.consume(num_messages=max_batch_rows, timeout=1.0)
                records, next_offset = _records_in_range(
                    consumer, messages, offset_range, next_offset, end, fail_on_data_loss
                )
                batch = records_to_batch(records, topic, partition, schema) if records else None
                # Freed by reference counting while the collector is off, so it never scans them.
                del messages, records
            if batch is not None:
                last_progress = time.monotonic()
                yield batch
            elif time.monotonic() - last_progress > poll_timeout_s:
                raise KafkaUnavailableError(
                    f"no data from {topic}-{partition} at offset {next_offset} (range ends at {end}) "
                    f"within {poll_timeout_s:g}s; raise kafkaConsumer.pollTimeoutMs if the broker is slow"
                )
    finally:
        consumer.close()


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Keep Python's cycle collector out of one consume() and the batch built from it.

    A consume() makes up to 10k GC-tracked Message objects at once; with the collector on, the
    allocations trigger collections that walk them (and, as they get promoted, every long-lived
    object of the worker), which measured ~1 us per row: more than building the batch. Nothing
    here creates reference cycles, and the collector is back on before the batch is yielded.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _readable_part(
    consumer: Consumer, offset_range: OffsetRange, timeout_s: float, fail_on_data_loss: bool
) -> tuple[int, int]:
    """The part of the planned range still on the broker; raise or warn about the rest."""
    topic, partition, start, end = offset_range.topic, offset_range.partition, offset_range.start, offset_range.end
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
    except KafkaException as error:
        raise KafkaUnavailableError(f"cannot get the offsets of {topic}-{partition}: {error.args[0]}") from None
    problems = []
    if start < low:
        problems.append(f"offsets {start}..{min(low, end) - 1} were deleted (earliest available is {low})")
    if high < end:
        # Spark planned this range when the partition reached ``end``; it only shrinks when the
        # topic was deleted and recreated or truncated.
        problems.append(f"offsets {max(start, high)}..{end - 1} are gone (the partition now ends at {high})")
    if problems:
        message = f"{topic}-{partition}: " + "; ".join(problems)
        if fail_on_data_loss:
            raise DataLossError(message + ". Set option failOnDataLoss=false to skip it with a warning.")
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return max(start, low), min(end, high)


def _skip_lost_offsets(consumer: Consumer, offset_range: OffsetRange, at: int, fail_on_data_loss: bool) -> int:
    topic, partition = offset_range.topic, offset_range.partition
    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    message = (
        f"{topic}-{partition}: offset {at} is no longer on the broker (earliest available {low}); "
        "data was deleted before Spark read it"
    )
    if fail_on_data_loss:
        raise DataLossError(message + ". Set option failOnDataLoss=false to skip it with a warning.")
    resume = max(at, low)
    log.warning("%s; skipping to %d (failOnDataLoss=false)", message, resume)
    if resume < offset_range.end:
        consumer.assign([TopicPartition(topic, partition, resume)])
    return min(resume, offset_range.end)


def _records_in_range(
    consumer: Consumer,
    messages: list[Message],
    offset_range: OffsetRange,
    next_offset: int,
    end: int,
    fail_on_data_loss: bool,
) -> tuple[Sequence[Message], int]:
    """The data messages of one ``consume()`` below ``end``, and the offset to read next."""
    if not messages:
        return [], next_offset
    # Error events (EOF, lost offsets) are rare: one C call per message finds out whether there
    # are any, and only then is the batch walked message by message in Python.
    if any([message.error() for message in messages]):
        return _sift_events(consumer, messages, offset_range, next_offset, end, fail_on_data_loss)
    last = messages[-1].offset()
    if last < end:
        return messages, last + 1
    # One partition's offsets only grow within a consume(), so the cut is found by bisection.
    cut = bisect_left(messages, end, key=Message.offset)
    return messages[:cut], end


def _sift_events(
    consumer: Consumer,
    messages: list[Message],
    offset_range: OffsetRange,
    next_offset: int,
    end: int,
    fail_on_data_loss: bool,
) -> tuple[list[Message], int]:
    """Message-by-message path for a ``consume()`` that holds error events."""
    topic, partition = offset_range.topic, offset_range.partition
    records: list[Message] = []
    for message in messages:
        error = message.error()
        if error is None:
            if message.offset() >= end:
                return records, end
            records.append(message)
            next_offset = message.offset() + 1
        elif error.code() == KafkaError._PARTITION_EOF:
            # The end offset can sit past transaction markers that are never delivered.
            if message.offset() >= end:
                next_offset = end
        elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            next_offset = _skip_lost_offsets(consumer, offset_range, next_offset, fail_on_data_loss)
        else:
            raise KafkaUnavailableError(f"reading {topic}-{partition} at offset {next_offset}: {error}")
    return records, next_offset


def records_to_batch(records: Sequence[Message], topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """Build one Arrow batch column by column; types come from ``schema`` so Spark accepts it as is.

    Per record only the accessors that carry per-record data are called (key, value, timestamp,
    headers) and each result goes straight into a list handed to Arrow; everything else is built
    in bulk: topic and partition are repeated scalars, contiguous offsets a range, timestamps are
    split and scaled with numpy, and a batch without headers gets a null column without
    converting ``None`` per row.
    """
    count = len(records)
    if count == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    first_offset = records[0].offset()
    if records[-1].offset() - first_offset == count - 1:
        # Offsets strictly increase, so an equal span means no gaps (no compaction, no markers).
        offsets = pa.array(np.arange(first_offset, first_offset + count, dtype=np.int64), schema.field("offset").type)
    else:
        offsets = pa.array([record.offset() for record in records], schema.field("offset").type)
    kinds, millis = zip(*[record.timestamp() for record in records], strict=True)
    kind_array = np.array(kinds, dtype=np.int32)
    no_timestamp = kind_array == _TIMESTAMP_NOT_AVAILABLE
    timestamps = pa.array(
        np.array(millis, dtype=np.int64) * 1000,
        schema.field("timestamp").type,
        mask=no_timestamp if no_timestamp.any() else None,
    )
    columns: dict[str, pa.Array] = {
        "key": pa.array([record.key() for record in records], schema.field("key").type),
        "value": pa.array([record.value() for record in records], schema.field("value").type),
        "topic": pa.repeat(pa.scalar(topic, schema.field("topic").type), count),
        "partition": pa.repeat(pa.scalar(partition, schema.field("partition").type), count),
        "offset": offsets,
        "timestamp": timestamps,
        "timestampType": pa.array(kind_array - _KAFKA_TIMESTAMP_TYPE_OFFSET, schema.field("timestampType").type),
    }
    if "headers" in schema.names:
        headers = [record.headers() for record in records]
        header_type = schema.field("headers").type
        columns["headers"] = (
            pa.nulls(count, header_type) if headers.count(None) == count else pa.array(headers, header_type)
        )
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


class ProduceFailedError(RuntimeError):
    """Messages could not be delivered; the Spark task fails and is retried (at-least-once)."""


class DeliveryTracker:
    """Produce with back-pressure and remember the first delivery error."""

    def __init__(
        self, bootstrap: str, kafka_config: Mapping[str, str], overrides: Mapping[str, Any] | None = None
    ) -> None:
        settings = {**client_config(bootstrap, kafka_config), "logger": _librdkafka_logger(), **(overrides or {})}
        self.producer = self._producer = Producer(settings)
        self._first_error: KafkaError | None = None
        self.delivered = 0

    def _on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            if self._first_error is None:
                self._first_error = error
        else:
            self.delivered += 1

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        partition: int | None,
        timestamp_ms: int | None,
    ) -> None:
        extra: dict[str, Any] = {}
        if partition is not None:
            extra["partition"] = partition
        if timestamp_ms is not None:
            extra["timestamp"] = timestamp_ms
        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, headers=headers, on_delivery=self._on_delivery, **extra
                )
                break
            except BufferError:
                # Local queue full: serve delivery reports until librdkafka has room again.
                self._producer.poll(0.05)
            except KafkaException as error:
                raise ProduceFailedError(f"cannot produce to {topic}: {error.args[0]}") from None
        self._producer.poll(0)
        self._raise_if_failed()

    def flush(self, timeout_s: float) -> None:
        remaining = self._producer.flush(timeout_s)
        self._raise_if_failed()
        if remaining:
            raise ProduceFailedError(f"{remaining} messages were not delivered within {timeout_s:g}s")

    def _raise_if_failed(self) -> None:
        if self._first_error is not None:
            raise ProduceFailedError(f"delivery failed: {self._first_error}")


def describe_watermarks(watermarks: Watermarks) -> str:
    return ", ".join(f"{t}-{p}: {low}..{high}" for (t, p), (low, high) in sorted(watermarks.items()))
