"""A producer that writes each call's records as one record batch per partition, on its own connections.

Why it exists: a caller that is handed records in groups and must answer with each record's offset (the REST
Proxy's produce) pays, through confluent-kafka, for a `produce()` call and a delivery report per record: about
1.2 us of its loop's time per record, which caps such a front near 650k records/s on this project's machine
(bench/rest_ceiling_bench.py). Written as one batch, a group of records costs one request and one answer, and
record i's offset is the batch's base offset + i.

What it does:
* calls made in the same turn of the event loop share batches and requests: each partition's records of
  that turn go in one batch, in the order of the calls (what a librdkafka linger gathers under load, without
  the wait); a call too large to share gets batches of its own, each under `max_batch_bytes`, sent in order;
* one Produce request (v3: every Kafka from 0.11 to 4.x takes it) per leader and round, with one batch per
  partition; leaders and connections come from `cluster_links`;
* an answer that says nothing was appended (`RETRIABLE`), or a broker it could not reach, is tried again
  after `retry_backoff_s` until the call's delivery timeout; a request whose outcome is unknown (its
  connection broke after it was sent, or no answer came in time) is not, so nothing is written twice: its
  records fail with that said, as a caller-side retry might duplicate them. A retried batch may land after
  a later one of its partition (as with librdkafka without idempotence); each record's answer still names
  the offset it is at.

What it leaves to librdkafka (`settings_from_librdkafka` names it): idempotence and transactions (producer ids
and sequences), acks=0 (no answer, so no offsets), TLS, and SASL mechanisms other than PLAIN and SCRAM.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.client.broker_link import LinkLost, unsupported
from sluice.client.cluster_links import RETRIABLE, ClusterLinks, RequestFailed, error_name
from sluice.errors import ErrorCode
from sluice.protocol.compression import Codec
from sluice.protocol.messages import APIS_BY_NAME, response_codecs
from sluice.protocol.plain_batch import (
    PARTS_PER_RECORD,
    PlainRecord,
    batch_of,
    encode_plain_batch,
    encode_records,
    encode_values,
)
from sluice.protocol.produce_answer import read_one_topic_v3
from sluice.protocol.produce_request import one_topic_v3

PRODUCE_VERSION = 3
# Answers that say the broker appended nothing: trying again cannot write a record twice.
_CODECS = {
    "none": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}
# Settings whose promise this producer does not keep: at most N requests in flight per connection (it
# pipelines every turn's request), and a compression level (it compresses at each codec's default).
_KEPT_BY_LIBRDKAFKA_ONLY = (
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "compression.level",
)
_ACKS = {"all": -1, "-1": -1, "1": 1}
_PRODUCE_KEY = APIS_BY_NAME["Produce"].key
_PRODUCE_ANSWER = response_codecs(_PRODUCE_KEY)[PRODUCE_VERSION]


class ProduceFailed(RequestFailed):
    """Why a partition's records were not written, or may not have been (the message says which)."""

    @classmethod
    def of(cls, failure: RequestFailed) -> ProduceFailed:
        return (
            failure
            if isinstance(failure, ProduceFailed)
            else cls(failure.code, failure.message, retriable=failure.retriable)
        )


class QueueFull(ProduceFailed):
    """More records are waiting for their answers than `max_queued_records`: nothing of this call was sent."""


@dataclass(frozen=True)
class BatchProducerSettings:
    bootstrap: tuple[str, ...]
    # security.protocol and sasl.* as librdkafka spells them.
    security: Mapping[str, str]
    client_id: str
    acks: int = -1
    compression: int = Codec.NONE
    delivery_timeout_s: float = 300.0
    request_timeout_s: float = 30.0
    retry_backoff_s: float = 0.1
    retries: int = 2**31 - 1
    max_batch_bytes: int = 1_000_000
    # Records handed over and not yet answered, at most (librdkafka's queue.buffering.max.messages): a call
    # beyond it fails at once with `QueueFull`, so a flood of requests cannot hold unbounded memory.
    max_queued_records: int = 100_000


def settings_from_librdkafka(config: Mapping[str, Any]) -> BatchProducerSettings | str:
    """The settings a librdkafka producer configured so would use, or why this producer cannot stand in."""
    text = {key: str(value).lower() for key, value in config.items()}
    reason = unsupported({k: str(v) for k, v in config.items() if k.startswith(("security.", "sasl."))})
    if reason is not None:
        return reason
    if text.get("enable.idempotence", "false") == "true" or config.get("transactional.id"):
        return "idempotence and transactions need producer ids and sequences"
    acks = _ACKS.get(text.get("acks", text.get("request.required.acks", "all")))
    if acks is None:
        return "acks=0 answers nothing, so no offsets"
    compression = _CODECS.get(text.get("compression.type", text.get("compression.codec", "none")))
    if compression is None:
        return f"compression {text.get('compression.type', text.get('compression.codec'))}"
    unkept = [key for key in _KEPT_BY_LIBRDKAFKA_ONLY if key in config]
    if unkept:
        return f"{', '.join(unkept)} (this producer cannot keep {'it' if len(unkept) == 1 else 'them'})"
    servers = str(config.get("bootstrap.servers") or config.get("metadata.broker.list") or "")

    def number(*keys: str, default: float) -> float:
        return next((float(config[key]) for key in keys if key in config), default)

    return BatchProducerSettings(
        bootstrap=tuple(s.strip() for s in servers.split(",") if s.strip()),
        security={k: str(v) for k, v in config.items() if k.startswith(("security.", "sasl."))},
        client_id=str(config.get("client.id", "sluice-batch-producer")),
        acks=acks,
        compression=compression,
        # 0 is librdkafka's "no limit".
        delivery_timeout_s=number("message.timeout.ms", "delivery.timeout.ms", default=300_000) / 1000
        or math.inf,
        request_timeout_s=number("request.timeout.ms", default=30_000) / 1000,
        retry_backoff_s=number("retry.backoff.ms", default=100) / 1000,
        retries=int(number("retries", "message.send.max.retries", default=2**31 - 1)),
        max_batch_bytes=int(
            min(number("batch.size", default=1_000_000), number("message.max.bytes", default=1_000_000))
        ),
        max_queued_records=int(number("queue.buffering.max.messages", default=100_000)),
    )


@dataclass(slots=True)
class _Job:
    """One batch of one partition: the records of one or more calls (`slices`: the call, its first record
    in the batch, how many, and the offset delta of that first record)."""

    partition: int
    slices: list[tuple[_Call, int, int, int]]
    batch: bytes
    tries: int = 0

    def settle(self, outcome: int | ProduceFailed) -> None:
        for call, start, count, first in self.slices:
            call.settle(start, count, outcome, first)


@dataclass(slots=True)
class _Call:
    """One `produce` call's records of one partition, written with the other calls' of the same loop turn."""

    records: Sequence[PlainRecord] | Sequence[bytes]
    done: asyncio.Future[list[int] | ProduceFailed]
    offsets: list[int]
    # `records` are values alone (`produce_values`).
    values_only: bool = False
    # Batches of it not yet answered, and the first failure among them.
    unanswered: int = 0
    failure: ProduceFailed | None = None

    def settle(self, start: int, count: int, outcome: int | ProduceFailed, first: int) -> None:
        """Its records `start`..`start + count` were written from offset `outcome` + `first`, or failed."""
        if isinstance(outcome, int):
            self.offsets[start : start + count] = range(outcome + first, outcome + first + count)
        elif self.failure is None:
            self.failure = outcome
        self.unanswered -= 1
        if not self.unanswered and not self.done.done():
            self.done.set_result(self.failure or self.offsets)


class BatchProducer:
    def __init__(self, settings: BatchProducerSettings) -> None:
        self.settings = settings
        self._cluster = ClusterLinks(
            settings.bootstrap, settings.security, settings.client_id, settings.request_timeout_s
        )
        # topic -> partition -> the calls of this loop turn, sent together when it ends.
        self._gathered: dict[str, dict[int, list[_Call]]] = {}
        self._deliveries: set[asyncio.Task[None]] = set()
        self._closed = False
        self.queued_records = 0
        # The loop every call runs on (the first call's).
        self._loop: asyncio.AbstractEventLoop | None = None

    async def produce(
        self, topic: str, partitions: Mapping[int, Sequence[PlainRecord]]
    ) -> dict[int, list[int] | ProduceFailed]:
        """Write each partition's records in order; per partition, every record's offset, or why they failed
        (records of a partition that took several batches share the first failure's).

        Calls made in the same turn of the event loop share their batches and requests: each partition's
        records of that turn go in one batch (in the order of the calls), one request per leader. Under load
        that is what a librdkafka linger gathers, without the wait."""
        self._admit(sum(map(len, partitions.values())))
        calls = {
            partition: self._gather(topic, partition, records) for partition, records in partitions.items()
        }
        return {partition: await call.done for partition, call in calls.items()}

    async def produce_values(
        self, topic: str, partition: int, values: Sequence[bytes]
    ) -> list[int] | ProduceFailed:
        """`produce` of records that are a value alone (no key, no headers, none null) to one partition, read
        from the values themselves: the common produce, without a tuple per record."""
        self._admit(len(values))
        return await self._gather(topic, partition, values, values_only=True).done

    def _admit(self, count: int) -> None:
        """Count `count` more records waiting for answers, or refuse them all (QueueFull)."""
        if self.queued_records and self.queued_records + count > self.settings.max_queued_records:
            raise QueueFull(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"{self.queued_records} records are waiting for the cluster's answers "
                f"(queue.buffering.max.messages={self.settings.max_queued_records}): retry later",
            )
        self.queued_records += count

    def _release(self, count: int, _: object) -> None:
        self.queued_records -= count

    def _gather(
        self,
        topic: str,
        partition: int,
        records: Sequence[PlainRecord] | Sequence[bytes],
        values_only: bool = False,
    ) -> _Call:
        """A call's records of one partition, added to this loop turn's (sent when the turn ends)."""
        if self._closed:
            raise ProduceFailed(ErrorCode.UNKNOWN_SERVER_ERROR, "the producer is closed")
        loop = self._loop
        if loop is None:  # (asking costs a getpid() per call)
            loop = self._loop = asyncio.get_running_loop()
        if not self._gathered:
            loop.call_soon(self._deliver_gathered)
        call = _Call(records, loop.create_future(), [0] * len(records), values_only)
        # Answered (or given up by its caller): its records no longer count against max_queued_records.
        call.done.add_done_callback(functools.partial(self._release, len(records)))
        self._gathered.setdefault(topic, {}).setdefault(partition, []).append(call)
        return call

    def _deliver_gathered(self) -> None:
        gathered, self._gathered = self._gathered, {}
        for topic, calls in gathered.items():
            try:
                jobs = self._jobs(calls)
            except Exception as exc:  # records it cannot encode (a caller's bug): they fail, none hangs
                failure = ProduceFailed(ErrorCode.UNKNOWN_SERVER_ERROR, f"produce to {topic}: {exc!r}")
                for call in (call for partition_calls in calls.values() for call in partition_calls):
                    if not call.done.done():
                        call.done.set_result(failure)
                continue
            assert self._loop is not None
            delivery = self._loop.create_task(self._deliver(topic, jobs))
            self._deliveries.add(delivery)
            delivery.add_done_callback(self._deliveries.discard)

    async def _deliver(self, topic: str, jobs: list[_Job]) -> None:
        """Send `jobs` until each is written or has failed for good, and tell their calls."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.delivery_timeout_s
        try:
            while jobs:
                outcomes: list[tuple[_Job, int | ProduceFailed]] = []
                leaders = self._cluster.known_leaders(topic)
                if leaders is None:
                    try:
                        leaders = await self._cluster.leaders(topic, deadline)
                    except RequestFailed as failure:
                        outcomes = [(job, ProduceFailed.of(failure)) for job in jobs]
                if leaders is not None:
                    requests = self._requests(topic, jobs, leaders, outcomes)
                    if len(requests) == 1:  # one leader (always, on a single broker): no gather
                        outcomes.extend(await self._send(topic, *requests[0], deadline))
                    else:
                        for answered in await asyncio.gather(
                            *(self._send(topic, node, group, deadline) for node, group in requests)
                        ):
                            outcomes.extend(answered)
                retry: list[_Job] = []
                for job, outcome in outcomes:
                    if not isinstance(outcome, int) and self._again(outcome, job, deadline, loop.time()):
                        retry.append(job)
                    else:
                        job.settle(outcome)
                jobs = retry
                if jobs:
                    self._cluster.forget_leaders(topic)
                    await asyncio.sleep(self.settings.retry_backoff_s)
        except BaseException as exc:  # cancelled at close, or a bug: no call is left waiting
            failure = ProduceFailed(ErrorCode.UNKNOWN_SERVER_ERROR, f"produce to {topic} stopped: {exc!r}")
            for job in jobs:
                job.settle(failure)
            raise

    def _jobs(self, calls_by_partition: dict[int, list[_Call]]) -> list[_Job]:
        """The calls' batches: per partition, the calls' records one after the other, in as few batches as
        `max_batch_bytes` allows (a call whose records alone are more is split; a record alone may be more:
        the broker then says whether it takes it)."""
        now = int(time.time() * 1000)
        limit, compression, jobs = self.settings.max_batch_bytes, self.settings.compression, []
        for partition, calls in calls_by_partition.items():
            payloads: list[bytes] = []
            slices: list[tuple[_Call, int, int, int]] = []  # call, its first record, count, offset delta
            size = count = 0
            for call in calls:
                if not call.records:
                    if not call.done.done():  # (a caller that gave up has cancelled it)
                        call.done.set_result([])
                    continue
                encode = encode_values if call.values_only else encode_records
                payload = b"".join(encode(call.records, count))  # type: ignore[arg-type]
                if payloads and size + len(payload) > limit:
                    jobs.append(
                        _Job(partition, slices, batch_of(b"".join(payloads), count, now, compression))
                    )
                    payloads, slices, size, count = [], [], 0, 0
                    payload = b"".join(encode(call.records))  # type: ignore[arg-type]
                if len(payload) > limit:
                    jobs.extend(self._split(partition, call, now))
                    continue
                slices.append((call, 0, len(call.records), count))
                payloads.append(payload)
                size += len(payload)
                count += len(call.records)
            if payloads:
                jobs.append(_Job(partition, slices, batch_of(b"".join(payloads), count, now, compression)))
        for job in jobs:
            for call, *_ in job.slices:
                call.unanswered += 1
        return jobs

    def _split(self, partition: int, call: _Call, now: int) -> list[_Job]:
        """A call's records too many for one batch, in batches each under `max_batch_bytes`."""
        records: Sequence[PlainRecord] = (
            [(None, value, ()) for value in call.records] if call.values_only else call.records  # type: ignore[misc]
        )
        encoded = encode_records(records)
        limit, compression, jobs = self.settings.max_batch_bytes, self.settings.compression, []
        first, size = 0, 0
        for index in range(len(records)):
            length = sum(map(len, encoded[index * PARTS_PER_RECORD : (index + 1) * PARTS_PER_RECORD]))
            if size and size + length > limit:
                # Offset deltas count from each batch's first record: those after the first are written again.
                batch = encode_plain_batch(records[first:index], now, compression)
                jobs.append(_Job(partition, [(call, first, index - first, 0)], batch))
                first, size = index, 0
            size += length
        batch = encode_plain_batch(records[first:], now, compression)
        jobs.append(_Job(partition, [(call, first, len(records) - first, 0)], batch))
        return jobs

    @staticmethod
    def _requests(
        topic: str,
        jobs: list[_Job],
        leaders: dict[int, int],
        outcomes: list[tuple[_Job, int | ProduceFailed]],
    ) -> list[tuple[int, list[_Job]]]:
        """Jobs grouped into requests per leader, at most one batch of a partition per request (Kafka takes
        one batch per partition and request; later ones go in later requests on the same connection). Jobs
        with no leader to go to get their outcome now."""
        requests: dict[int, list[list[_Job]]] = defaultdict(list)
        for job in jobs:
            node = leaders.get(job.partition)
            if node is None:
                where = f"{topic} [{job.partition}]"
                outcomes.append(
                    (job, ProduceFailed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where}: not found"))
                )
            elif node < 0:
                where = f"{topic} [{job.partition}]"
                failure = ProduceFailed(ErrorCode.LEADER_NOT_AVAILABLE, f"{where}: no leader", retriable=True)
                outcomes.append((job, failure))
            else:
                slots = requests[node]
                slot = next((s for s in slots if all(j.partition != job.partition for j in s)), None)
                if slot is None:
                    slots.append([job])
                else:
                    slot.append(job)
        return [(node, group) for node, slots in requests.items() for group in slots]

    def _again(self, failure: ProduceFailed, job: _Job, deadline: float, now: float) -> bool:
        job.tries += 1
        in_time = now + self.settings.retry_backoff_s < deadline
        return failure.retriable and job.tries <= self.settings.retries and in_time

    async def _send(
        self, topic: str, node: int, jobs: list[_Job], deadline: float
    ) -> list[tuple[_Job, int | ProduceFailed]]:
        """One Produce request of `jobs` to `node`: each job's base offset or failure."""
        link = self._cluster.known_link(node)
        if link is None:
            try:
                link = await self._cluster.link(node, deadline)
            except RequestFailed as failure:
                return [(job, ProduceFailed.of(failure)) for job in jobs]
        name = topic.encode()
        timeout_ms = int(self.settings.request_timeout_s * 1000)
        request = one_topic_v3(self.settings.acks, timeout_ms, name, [(job.partition, job.batch) for job in jobs])
        try:
            answer = link.send(_PRODUCE_KEY, PRODUCE_VERSION, request)
        except LinkLost as lost:
            failure = ProduceFailed(ErrorCode.NETWORK_EXCEPTION, f"broker {node}: {lost}", retriable=True)
            return [(job, failure) for job in jobs]
        if link.congested():
            await link.drain()
        try:
            body = await answer
        except LinkLost as lost:
            unknown = f"broker {node}: {lost} after the records were sent: they may have been written"
            return [(job, ProduceFailed(ErrorCode.NETWORK_EXCEPTION, unknown)) for job in jobs]
        return self._outcomes(topic, name, jobs, body)

    def _outcomes(
        self, topic: str, name: bytes, jobs: list[_Job], body: bytes
    ) -> list[tuple[_Job, int | ProduceFailed]]:
        answered = read_one_topic_v3(body, name, len(jobs))
        if answered is None:  # not the answer's usual shape: the generated decoder reads (or refuses) it
            response, _ = _PRODUCE_ANSWER.decode(body, 0)
            answered = {
                p.index: (p.error_code, p.base_offset)
                for t in response.responses
                if t.name == topic
                for p in t.partition_responses
            }
        outcomes: list[tuple[_Job, int | ProduceFailed]] = []
        for job in jobs:
            partition = answered.get(job.partition)
            if partition is None:
                missing = f"{topic} [{job.partition}]: the broker's answer left it out: the records may have been written"
                outcomes.append((job, ProduceFailed(ErrorCode.UNKNOWN_SERVER_ERROR, missing)))
            elif partition[0]:
                code = partition[0]
                where = f"{topic} [{job.partition}]"
                outcomes.append(
                    (job, ProduceFailed(code, f"{where}: {error_name(code)}", retriable=code in RETRIABLE))
                )
            else:
                outcomes.append((job, partition[1]))
        return outcomes

    async def close(self, timeout: float) -> None:
        """Let calls under way finish for up to `timeout` seconds, then end every connection (calls still
        waiting fail, their outcome unknown)."""
        self._closed = True
        await asyncio.sleep(0)  # the calls of this loop turn are handed to deliveries
        if self._deliveries:
            await asyncio.wait(set(self._deliveries), timeout=timeout)
        for delivery in list(self._deliveries):
            delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await delivery
        await self._cluster.close()
