"""The exactly-once sink's Kafka side: one transaction per (batch, task), committed with a marker.

Design (the proof sketch is in README.md, "Exactly-once writes"):

- Every write task of micro-batch ``B`` and Spark partition ``k`` uses the transactional id
  ``<prefix>-<k>``. ``init_transactions`` bumps the id's epoch, which aborts whatever an earlier
  attempt of the same task left open and fences it: a zombie (speculative copy, retried task,
  a task of a driver that was killed) can no longer produce or commit.
- Still inside the transaction the task commits the offset ``B + 1`` for the consumer group
  ``<prefix>-<k>`` on partition 0 of the commit topic (``send_offsets_to_transaction``). The
  records and this marker become visible together or not at all.
- Before writing, after fencing, the task reads that group's offset (a read_committed fetch,
  which waits for a pending commit to settle). If it is already past ``B``, an earlier attempt
  committed this task's share of the batch and the task writes nothing.

So each (batch, task) share of the output is committed at most once, and Spark's own retries
and replays make sure at least once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.pipeline.kafka_io import DeliveryTracker, ProduceFailedError
from sluice.pipeline.options import PipelineOptionError, SinkOptions, client_config

log = logging.getLogger(__name__)

_MARKER_PARTITION = 0
_NO_COMMITTED_OFFSET = -1001  # librdkafka's OFFSET_INVALID
# Spark's local properties that name the running micro-batch and the query (stable across
# restarts: the id lives in the checkpoint's metadata file).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


class TransactionsUnsupportedError(PipelineOptionError):
    """The cluster cannot run Kafka transactions, so exactly-once cannot be offered."""


def transactional_id(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def marker_group(prefix: str, partition: int) -> str:
    return f"{prefix}-{partition}"


def batch_job_prefix(user_prefix: str | None) -> str:
    """A batch write has no checkpoint to resume from: its ids are unique to the job."""
    return f"{user_prefix or 'sluice-job'}-{uuid.uuid4().hex}"


def check_transactions_supported(options: SinkOptions) -> None:
    """Driver side, at query start: fail now, with a clear message, if transactions cannot work.

    Initializing a transactional producer exercises FindCoordinator(TRANSACTION) and a
    transactional InitProducerId; a broker without transactions fails one of them. The commit
    topic is created when it does not exist.
    """
    settings = {
        **client_config(options.bootstrap_servers, options.kafka_config),
        "transactional.id": f"{options.transactional_id_prefix or 'sluice'}-probe",
        "transaction.timeout.ms": options.transaction_timeout_ms,
    }
    try:
        producer = Producer(settings)
    except KafkaException as error:
        raise PipelineOptionError(f"invalid kafka.* option: {error.args[0].str()}") from None
    try:
        producer.init_transactions(options.metadata_timeout_s)
    except KafkaException as error:
        raise TransactionsUnsupportedError(
            f"deliveryGuarantee=exactly-once needs a Kafka cluster with transactions, but initializing a "
            f"transactional producer on {options.bootstrap_servers} failed: {error.args[0].str()}. "
            "Use deliveryGuarantee=at-least-once with this cluster, or check transaction.max.timeout.ms "
            f"(the sink asks for {options.transaction_timeout_ms} ms; kafka.transaction.timeout.ms sets it)."
        ) from None
    finally:
        del producer
    _ensure_commit_topic(options)


def _ensure_commit_topic(options: SinkOptions) -> None:
    settings = client_config(options.bootstrap_servers, options.kafka_config)
    admin = AdminClient(settings)
    topic = options.commit_topic
    metadata = admin.list_topics(timeout=options.metadata_timeout_s)
    if topic in metadata.topics and metadata.topics[topic].error is None:
        return
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=options.metadata_timeout_s)[
            topic
        ].result(options.metadata_timeout_s)
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise PipelineOptionError(
                f"cannot create the exactly-once commit topic {topic!r}: {error.args[0].str()}; "
                "create it (1 partition) or name another with option commitTopic"
            ) from None


@dataclass
class TaskOutcome:
    """What an exactly-once task did: the records it committed, or that a former attempt had."""

    records: int
    skipped: bool


class TransactionalTask:
    """Executor side: one task's share of one batch, in one transaction with its marker."""

    def __init__(self, options: SinkOptions, prefix: str, batch_id: int, partition: int) -> None:
        self.options = options
        self.batch_id = batch_id
        self.partition = partition
        self.txn_id = transactional_id(prefix, partition)
        self.group = marker_group(prefix, partition)
        self.tracker = DeliveryTracker(
            options.bootstrap_servers,
            options.kafka_config,
            {"transactional.id": self.txn_id, "transaction.timeout.ms": options.transaction_timeout_ms},
        )
        self._marker_reader = Consumer(
            {
                **client_config(options.bootstrap_servers, options.kafka_config),
                "group.id": self.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )

    def begin(self) -> bool:
        """Fence earlier attempts; False when one of them already committed this batch's share."""
        timeout = self.options.metadata_timeout_s
        producer = self.tracker.producer
        try:
            producer.init_transactions(max(timeout, 30.0))
            done = self._committed_batches(timeout)
        except KafkaException as error:
            raise ProduceFailedError(
                f"{self.txn_id}: cannot start the transaction: {error.args[0].str()}"
            ) from None
        if done > self.batch_id:
            log.info(
                "%s: batch %d was committed by an earlier attempt; writing nothing",
                self.txn_id,
                self.batch_id,
            )
            return False
        producer.begin_transaction()
        return True

    def _committed_batches(self, timeout: float) -> int:
        marker = TopicPartition(self.options.commit_topic, _MARKER_PARTITION)
        [committed] = self._marker_reader.committed([marker], timeout=timeout)
        if committed.error is not None:
            raise KafkaException(committed.error)
        return 0 if committed.offset == _NO_COMMITTED_OFFSET else committed.offset

    def commit(self) -> None:
        """Flush, add the marker, commit. A fenced task fails; nothing it wrote becomes visible."""
        producer = self.tracker.producer
        timeout = max(self.options.metadata_timeout_s, 60.0)
        try:
            self.tracker.flush(self.options.transaction_timeout_ms / 1000.0)
            marker = TopicPartition(self.options.commit_topic, _MARKER_PARTITION, self.batch_id + 1)
            producer.send_offsets_to_transaction(
                [marker], self._marker_reader.consumer_group_metadata(), timeout
            )
            producer.commit_transaction(timeout)
        except KafkaException as error:
            self._abort_quietly()
            raise ProduceFailedError(
                f"{self.txn_id}: batch {self.batch_id} not committed: {error.args[0].str()}"
            ) from None
        except ProduceFailedError:
            self._abort_quietly()
            raise

    def _abort_quietly(self) -> None:
        # A fenced producer cannot abort; its transaction is aborted by whoever fenced it.
        try:
            self.tracker.producer.abort_transaction(10)
        except KafkaException:
            pass

    def close(self) -> None:
        self._marker_reader.close()


def task_identity(properties: Mapping[str, Any], prefix: str | None) -> tuple[str, int]:
    """(prefix, batch id) of a task: ``prefix`` if given, else the streaming query id's."""
    batch = properties.get(BATCH_ID_PROPERTY)
    query = properties.get(QUERY_ID_PROPERTY)
    if prefix is not None:
        pass
    elif query:
        prefix = f"sluice-{query}"
    else:
        raise PipelineOptionError(
            "exactly-once: Spark did not say which streaming query this task belongs to"
        )
    return prefix, int(batch) if batch is not None else 0
