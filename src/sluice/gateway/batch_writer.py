"""Groups of records written as one record batch per partition: the REST Proxy's v2 produce path.

A v2 produce answers with every record's offset. Through confluent-kafka that is a `produce()` call and a
delivery report per record, which held the REST Proxy to about a quarter of a direct producer's records/s
(bench/rest_ceiling_bench.py); `sluice.client.batch_producer` writes each request's records of a partition as
one batch instead, and record i's offset is the batch's base offset + i.

It takes the cluster's librdkafka producer settings (so `-X` and the config file's producer section apply the
same way) and stands in only where it behaves as librdkafka would with them: `for_cluster` gives None, and the
gateway keeps confluent-kafka, for idempotence, transactions, acks=0, TLS and SASL mechanisms other than
PLAIN and SCRAM. Records are checked and placed as `ClusterClient.enqueue_many` does: the same size limit,
murmur2 of the key (as Confluent's REST Proxy, a Java producer, places them), and a null key's records
kept together on one partition per request, the next request's on the next (the sticky partitioner's unit
is a batch, and here a request is one).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

from sluice.client.batch_producer import BatchProducer, ProduceFailed, QueueFull, settings_from_librdkafka
from sluice.errors import ErrorCode

from .config import ClusterConfig
from .errors import Failure, GatewayError, partition_not_found, record_too_large
from .metrics import GatewayMetrics
from .partitioners import murmur2_partition

log = logging.getLogger(__name__)

Record = tuple[bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes]]]
Outcome = tuple[int, int] | GatewayError


@dataclass(slots=True)
class Written:
    """Every record of a call written to one partition: their offsets, in the records' order (the common
    answer, kept whole so that it is written out without a tuple per record)."""

    partition: int
    offsets: list[int]


_NOT_FOUND = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
_TOO_LARGE = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})
# Records the broker refuses for what they hold (a keyless record to a compacted topic: INVALID_RECORD, or
# CORRUPT_MESSAGE from brokers before 2.4) or for where they go (an internal topic such as
# __consumer_offsets: INVALID_TOPIC_EXCEPTION, which Confluent's proxy answers 400): the caller's to fix, not
# the cluster's failure.
_REFUSED_RECORD = frozenset(
    {ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_TOPIC_EXCEPTION}
)


class BatchWriter:
    def __init__(self, cluster: ClusterConfig, producer: BatchProducer, metrics: GatewayMetrics) -> None:
        self.cluster = cluster
        self._producer = producer
        self._produced = metrics.produced.labels(cluster.name, "sync")
        self._next_sticky: dict[str, int] = {}

    @classmethod
    def for_cluster(
        cls, cluster: ClusterConfig, client_id: str, metrics: GatewayMetrics
    ) -> BatchWriter | None:
        """A writer with `cluster`'s producer settings, or None (logged) where librdkafka must do it."""
        settings = settings_from_librdkafka(cluster.producer_config(client_id))
        if isinstance(settings, str):
            log.info("cluster %s: REST produce goes through librdkafka (%s)", cluster.name, settings)
            return None
        return cls(cluster, BatchProducer(settings), metrics)

    async def write(
        self, topic: str, records: Sequence[Record], partition_count: int
    ) -> Written | list[Outcome]:
        """Each record's (partition, offset) once written, or why it was not, in the records' order; `Written`
        when every record went to one partition and was written."""
        partition = self._one_partition(topic, records, partition_count)
        self._produced.inc(len(records))
        if partition is not None:
            try:
                result = (await self._producer.produce(topic, {partition: records}))[partition]
            except QueueFull as full:
                return [_too_many(topic, full)] * len(records)
            if isinstance(result, ProduceFailed):
                return [_failure(topic, result)] * len(records)
            return Written(partition, result)
        return await self._write_each(topic, records, partition_count)

    async def write_values(
        self, topic: str, values: Sequence[bytes], partition: int | None, partition_count: int
    ) -> Written | list[Outcome]:
        """`write` of records that are a value alone (the common v2 produce: no key, no headers, none null),
        all to `partition` or, with None, together to the next sticky one: no tuple per record."""
        limit = self.cluster.producer.max_message_bytes
        if max(map(len, values)) > limit or (partition is not None and not 0 <= partition < partition_count):
            return await self.write(
                topic, [(None, value, partition, ()) for value in values], partition_count
            )
        if partition is None:
            partition = self._sticky(topic, partition_count)
        self._produced.inc(len(values))
        try:
            result = await self._producer.produce_values(topic, partition, values)
        except QueueFull as full:
            return [_too_many(topic, full)] * len(values)
        if isinstance(result, ProduceFailed):
            return [_failure(topic, result)] * len(values)
        return Written(partition, result)

    def _one_partition(self, topic: str, records: Sequence[Record], partition_count: int) -> int | None:
        """The partition every record goes to when that is one and none is too large (a few passes in C, no
        Python step per record), else None: `_write_each` places and checks them one by one."""
        partitions = {record[2] for record in records}
        if len(partitions) != 1:
            return None
        (partition,) = partitions
        keys = {record[0] for record in records}
        longest_key = max(map(len, keys - {None}), default=0)
        longest_value = max(map(len, filter(None, map(itemgetter(1), records))), default=0)
        if longest_key + longest_value > self.cluster.producer.max_message_bytes:
            return None
        if partition is not None:
            return partition if 0 <= partition < partition_count else None
        if keys == {None}:
            return self._sticky(topic, partition_count)
        if len(keys) == 1:
            return murmur2_partition(records[0][0], partition_count)
        return None

    def _sticky(self, topic: str, partition_count: int) -> int:
        """The partition of a request's null-key records: each request's on the next."""
        partition = self._next_sticky.get(topic, 0) % partition_count
        self._next_sticky[topic] = partition + 1
        return partition

    async def _write_each(self, topic: str, records: Sequence[Record], partition_count: int) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(records)
        limit = self.cluster.producer.max_message_bytes
        by_partition: dict[int, list[int]] = defaultdict(list)
        sticky = -1
        for index, (key, value, partition, _) in enumerate(records):
            if len(value or b"") + len(key or b"") > limit:
                outcomes[index] = record_too_large(limit)
                continue
            if partition is None:
                if key is not None:
                    partition = murmur2_partition(key, partition_count)
                else:
                    if sticky < 0:
                        sticky = self._sticky(topic, partition_count)
                    partition = sticky
            elif not 0 <= partition < partition_count:
                outcomes[index] = partition_not_found(topic, partition)
                continue
            by_partition[partition].append(index)
        if by_partition:
            try:
                written = await self._producer.produce(
                    topic, {p: [records[i] for i in indexes] for p, indexes in by_partition.items()}
                )
            except QueueFull as full:
                written = dict.fromkeys(by_partition, full)
            for partition, indexes in by_partition.items():
                result = written[partition]
                if isinstance(result, ProduceFailed):
                    failure = _failure(topic, result)
                    for index in indexes:
                        outcomes[index] = failure
                else:
                    for index, offset in zip(indexes, result, strict=True):
                        outcomes[index] = (partition, offset)
        return outcomes  # type: ignore[return-value]  # every index got its outcome above

    async def close(self) -> None:
        await self._producer.close(self.cluster.producer.shutdown_flush_seconds)


def _too_many(topic: str, full: QueueFull) -> GatewayError:
    """As librdkafka's full queue is answered (BufferError): back off and retry."""
    return GatewayError(Failure.TOO_MANY_REQUESTS, f"produce to {topic}: {full.message}")


def _failure(topic: str, failed: ProduceFailed) -> GatewayError:
    if isinstance(failed, QueueFull):
        return _too_many(topic, failed)
    if failed.code in _NOT_FOUND:
        kind = Failure.NOT_FOUND
    elif failed.code in _TOO_LARGE:
        kind = Failure.TOO_LARGE
    elif failed.code in _REFUSED_RECORD:
        kind = Failure.INVALID_ARGUMENT
    else:
        kind = Failure.INTERNAL
    return GatewayError(kind, f"produce to {topic}: {failed.message}")
