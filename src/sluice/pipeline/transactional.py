"""The exactly-once sink's Kafka side: a two-phase commit the driver finishes with EndTxn.

Design (the proof sketch is in README.md, "Exactly-once writes"):

- Every write task of micro-batch ``B`` and Spark partition ``k`` uses the transactional id
  ``<prefix>-<k>``. ``init_transactions`` bumps the id's epoch, which aborts whatever an earlier
  attempt of the same task left open and fences it: a zombie (speculative copy, retried task,
  a task of a driver that was killed) can no longer produce or commit.
- Streams: after fencing, the task reads the offset the consumer group ``<prefix>-<k>`` has
  committed on partition 0 of the commit topic (read_committed). Past ``B`` means this share
  was committed before: the task writes nothing. Otherwise it writes its records and, in the
  same transaction, the offset ``B + 1`` for that group (the marker).
- The task flushes and returns its producer id and epoch without committing ("prepared"); the
  driver's commit checks every transaction is still open under that epoch and sends EndTxn.
  librdkafka cannot finish another process's transaction, so the driver speaks EndTxn through
  sluice's wire client, as Flink's Kafka sink does through the Java client by reflection.
- Batch writes (no checkpoint, no replay) skip the marker; their abort also fences every
  task's id, so no attempt's transaction stays open: the job is all-or-nothing.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.client.secure import SecureConnectError, connect_secure, unsupported_reason
from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.pipeline.kafka_io import DeliveryTracker, ProduceFailedError
from sluice.pipeline.options import PipelineOptionError, SinkOptions, client_config

log = logging.getLogger(__name__)

_MARKER_PARTITION = 0
_NO_COMMITTED_OFFSET = -1001  # librdkafka's OFFSET_INVALID
_TRANSACTION_COORDINATOR = 1  # FindCoordinator key type
# Versions every broker with transactions since Kafka 2.4 serves (flexible; not 4.0's removed ones).
_FIND_COORDINATOR_VERSION = 3
_END_TXN_VERSION = 3
_DESCRIBE_TRANSACTIONS_VERSION = 0
# librdkafka reports its producer id and epoch only in its statistics.
_STATS_INTERVAL_MS = 50
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


def check_transactions_supported(
    options: SinkOptions, driver_commits: bool = True, markers: bool = True
) -> None:
    """Driver side, at query start: fail now, with a clear message, if transactions cannot work.

    Initializing a transactional producer exercises FindCoordinator(TRANSACTION) and a
    transactional InitProducerId; a broker without transactions fails one of them. The commit
    topic is created when it does not exist. ``driver_commits`` (batch writes): the driver must
    also reach the transaction coordinator with sluice's wire client, which speaks TLS and SASL
    PLAIN/SCRAM (the same kafka.* settings the tasks' producers get) but not GSSAPI or OAUTHBEARER.
    """
    if driver_commits:
        reason = unsupported_reason(options.kafka_config)
        if reason is not None:
            raise TransactionsUnsupportedError(
                "deliveryGuarantee=exactly-once commits the tasks' transactions from the driver "
                f"with sluice's wire client, which cannot connect with these kafka.* options: {reason}. "
                "Use deliveryGuarantee=at-least-once with this cluster."
            )
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
    if driver_commits:
        try:
            with _Coordinators(options) as coordinators:
                coordinators.client_for(f"{options.transactional_id_prefix or 'sluice'}-probe")
        except (OSError, ProduceFailedError) as error:
            raise TransactionsUnsupportedError(
                f"deliveryGuarantee=exactly-once: the driver cannot reach the transaction coordinator of "
                f"{options.bootstrap_servers}: {error}"
            ) from None
    if markers:
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


@dataclass(frozen=True)
class PreparedTransaction:
    """A task's open, flushed transaction, for the driver to commit or abort (batch writes)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class TransactionalTask:
    """Executor side: one task's share of one batch, in one transaction the driver commits.

    With ``markers`` (streams) the transaction also carries the marker "batch B done".
    """

    def __init__(
        self, options: SinkOptions, prefix: str, batch_id: int, partition: int, markers: bool = True
    ) -> None:
        self.options = options
        self.batch_id = batch_id
        self.partition = partition
        self.txn_id = transactional_id(prefix, partition)
        self.group = marker_group(prefix, partition)
        self._stats: dict[str, Any] = {}
        overrides: dict[str, Any] = {
            "transactional.id": self.txn_id,
            "transaction.timeout.ms": options.transaction_timeout_ms,
        }
        overrides["statistics.interval.ms"] = _STATS_INTERVAL_MS
        overrides["stats_cb"] = self._on_stats
        self.tracker = DeliveryTracker(options.bootstrap_servers, options.kafka_config, overrides)
        self._marker_reader: Consumer | None = None
        if markers:
            self._marker_reader = Consumer(
                {
                    **client_config(options.bootstrap_servers, options.kafka_config),
                    "group.id": self.group,
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )

    def _on_stats(self, raw: str) -> None:
        self._stats = json.loads(raw).get("eos", {})

    def begin(self) -> bool:
        """Fence earlier attempts; False when one of them already committed this batch's share."""
        timeout = self.options.metadata_timeout_s
        producer = self.tracker.producer
        try:
            producer.init_transactions(max(timeout, 30.0))
            done = self._committed_batches(timeout) if self._marker_reader is not None else 0
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
        assert self._marker_reader is not None
        marker = TopicPartition(self.options.commit_topic, _MARKER_PARTITION)
        [committed] = self._marker_reader.committed([marker], timeout=timeout)
        if committed.error is not None:
            raise KafkaException(committed.error)
        return 0 if committed.offset == _NO_COMMITTED_OFFSET else committed.offset

    def prepare(self) -> PreparedTransaction:
        """Flush (with the marker, for streams) and leave the transaction open for the driver.

        The task must not commit on its own: when something upstream of the sink fails, Spark
        closes the sink's input as if it had ended, so a task cannot tell a complete share from
        a truncated one. Only the driver knows the task succeeded.
        """
        try:
            self.tracker.flush(self.options.transaction_timeout_ms / 1000.0)
            if self._marker_reader is not None:
                marker = TopicPartition(self.options.commit_topic, _MARKER_PARTITION, self.batch_id + 1)
                self.tracker.producer.send_offsets_to_transaction(
                    [marker],
                    self._marker_reader.consumer_group_metadata(),
                    max(self.options.metadata_timeout_s, 60.0),
                )
        except KafkaException as error:
            self.abort_quietly()
            raise ProduceFailedError(
                f"{self.txn_id}: cannot prepare batch {self.batch_id}: {error.args[0].str()}"
            ) from None
        except ProduceFailedError:
            self.abort_quietly()
            raise
        # The producer id and epoch are fixed once the transaction began; librdkafka tells them
        # in the next statistics report.
        deadline = time.monotonic() + max(self.options.metadata_timeout_s, 10.0)
        while self._stats.get("txn_state") != "InTransaction" and time.monotonic() < deadline:
            self.tracker.producer.poll(_STATS_INTERVAL_MS / 1000.0)
        if self._stats.get("txn_state") != "InTransaction":
            self.abort_quietly()
            raise ProduceFailedError(
                f"{self.txn_id}: librdkafka did not report the transaction's producer id"
            )
        return PreparedTransaction(
            self.txn_id, int(self._stats["producer_id"]), int(self._stats["producer_epoch"])
        )

    def abort_quietly(self) -> None:
        """Take back what this attempt wrote now, rather than when the next attempt fences it."""
        # A fenced producer cannot abort; its transaction is aborted by whoever fenced it.
        try:
            self.tracker.producer.abort_transaction(10)
        except KafkaException:
            pass

    def close(self) -> None:
        if self._marker_reader is not None:
            self._marker_reader.close()


class _Coordinators:
    """Driver side: wire connections to the transaction coordinator of each transactional id."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.timeout = max(options.metadata_timeout_s, 10.0)
        self._bootstrap: WireClient | None = None
        self._by_address: dict[tuple[str, int], WireClient] = {}

    def __enter__(self) -> _Coordinators:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in [self._bootstrap, *self._by_address.values()]:
            if client is not None:
                client.close()

    def _connect(self, host: str, port: int) -> WireClient:
        # The same security settings the tasks' producers get from kafka.*.
        return connect_secure(host, port, self.options.kafka_config, self.timeout, client_id="sluice-driver")

    def _any_broker(self) -> WireClient:
        if self._bootstrap is None:
            errors = []
            for address in self.options.bootstrap_servers.split(","):
                try:
                    host, _, port = address.strip().rpartition(":")
                    self._bootstrap = self._connect(host, int(port))
                    break
                except (OSError, ValueError, SecureConnectError) as error:
                    errors.append(f"{address.strip()}: {error}")
            else:
                raise ProduceFailedError(f"cannot connect to any bootstrap server ({'; '.join(errors)})")
        return self._bootstrap

    def client_for(self, txn_id: str) -> WireClient:
        bootstrap = self._any_broker()
        cls = bootstrap.request_class("FindCoordinator")
        found = bootstrap.call(
            "FindCoordinator", _FIND_COORDINATOR_VERSION, cls(key=txn_id, key_type=_TRANSACTION_COORDINATOR)
        )
        if found.error_code:
            raise ProduceFailedError(
                f"{txn_id}: FindCoordinator failed: {ErrorCode(found.error_code).name} {found.error_message or ''}"
            )
        address = (found.host, found.port)
        if address not in self._by_address:
            try:
                self._by_address[address] = self._connect(found.host, found.port)
            except (OSError, SecureConnectError) as error:
                raise ProduceFailedError(
                    f"{txn_id}: cannot reach its transaction coordinator {found.host}:{found.port}: {error}"
                ) from None
        return self._by_address[address]

    def describe(self, txn_id: str) -> Any:
        client = self.client_for(txn_id)
        cls = client.request_class("DescribeTransactions")
        response = client.call(
            "DescribeTransactions", _DESCRIBE_TRANSACTIONS_VERSION, cls(transactional_ids=[txn_id])
        )
        return response.transaction_states[0]

    def end(self, prepared: PreparedTransaction, commit: bool) -> int:
        client = self.client_for(prepared.transactional_id)
        cls = client.request_class("EndTxn")
        request = cls(
            transactional_id=prepared.transactional_id,
            producer_id=prepared.producer_id,
            producer_epoch=prepared.producer_epoch,
            committed=commit,
        )
        for _ in range(50):
            error = int(client.call("EndTxn", _END_TXN_VERSION, request).error_code)
            # The coordinator is still writing the markers of a transaction this id ended before.
            if error != ErrorCode.CONCURRENT_TRANSACTIONS:
                return error
            time.sleep(0.1)
        return int(ErrorCode.CONCURRENT_TRANSACTIONS)


def commit_prepared(options: SinkOptions, prepared: Sequence[PreparedTransaction]) -> None:
    """Driver side, batch writes: make every task's transaction visible, or raise before any is.

    Each is first checked to still be open under the epoch its task reported (a task attempt
    that started later would have fenced it), so a stale one fails the job before anything
    is committed and the job is aborted whole. Only a crash between two EndTxn calls can
    leave part of a job visible.
    """
    with _Coordinators(options) as coordinators:
        for txn in prepared:
            try:
                state = coordinators.describe(txn.transactional_id)
            except (OSError, ProduceFailedError) as error:
                raise ProduceFailedError(
                    f"{txn.transactional_id}: cannot check the transaction: {error}"
                ) from None
            if state.error_code == ErrorCode.UNSUPPORTED_VERSION:
                continue  # a broker without DescribeTransactions (before Kafka 3.0): EndTxn still checks
            if (
                state.error_code
                or state.transaction_state != "Ongoing"
                or (state.producer_id, state.producer_epoch) != (txn.producer_id, txn.producer_epoch)
            ):
                raise ProduceFailedError(
                    f"{txn.transactional_id}: the task's transaction (producer {txn.producer_id}, epoch "
                    f"{txn.producer_epoch}) is no longer open (state {state.transaction_state}, epoch "
                    f"{state.producer_epoch}; timed out after kafka.transaction.timeout.ms, or fenced by "
                    "another attempt); nothing of the job was committed"
                )
        for txn in prepared:
            error = coordinators.end(txn, commit=True)
            if error:
                raise ProduceFailedError(
                    f"{txn.transactional_id}: EndTxn(commit) failed: {ErrorCode(error).name}"
                )


def abort_prepared(options: SinkOptions, prepared: Sequence[PreparedTransaction]) -> None:
    """Driver side: EndTxn(abort) for each prepared transaction, best effort."""
    try:
        with _Coordinators(options) as coordinators:
            for txn in prepared:
                coordinators.end(txn, commit=False)
    except (OSError, ProduceFailedError) as error:
        log.warning("aborting prepared transactions: %s (the next attempt fences them)", error)


def abort_job(options: SinkOptions, prefix: str, tasks: int, prepared: Sequence[PreparedTransaction]) -> None:
    """Driver side, batch writes: abort the prepared transactions, then fence every task's id.

    Fencing (InitProducerId bumps the epoch) aborts what any other attempt left open, so no
    transaction of this job holds back read_committed readers until its timeout.
    """
    try:
        with _Coordinators(options) as coordinators:
            for txn in prepared:
                coordinators.end(txn, commit=False)
    except (OSError, ProduceFailedError) as error:
        log.warning("aborting the job's transactions: %s; fencing them instead", error)
    settings = client_config(options.bootstrap_servers, options.kafka_config)
    for partition in range(tasks):
        producer = Producer({**settings, "transactional.id": transactional_id(prefix, partition)})
        try:
            producer.init_transactions(max(options.metadata_timeout_s, 30.0))
        except KafkaException as error:
            log.warning("cannot fence %s: %s", transactional_id(prefix, partition), error.args[0].str())


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
