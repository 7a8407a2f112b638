"""Group members from three real client libraries, each polling in its own thread.

Every member processes a message by recording (partition, offset) in a shared :class:`Ledger`, then commits
synchronously before it polls again, and commits once more when partitions are revoked. So a partition
changes hands only after everything processed on it is committed, and the group consumes each message
exactly once; a duplicate or a gap in the ledger is a broker bug (or a commit the broker refused).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

FAST_SESSION = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 300}


class Ledger:
    """Which (partition, offset) was processed how often, and by whom."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[tuple[int, int]] = Counter()
        self.by_member: Counter[str] = Counter()

    def record(self, member: str, partition: int, offset: int) -> None:
        with self.lock:
            self.counts[(partition, offset)] += 1
            self.by_member[member] += 1

    def total(self) -> int:
        with self.lock:
            return len(self.counts)

    def check_exactly_once(self, end_offsets: dict[int, int]) -> None:
        with self.lock:
            duplicates = {key: n for key, n in self.counts.items() if n > 1}
            expected = {(p, o) for p, end in end_offsets.items() for o in range(end)}
            missing = sorted(expected - set(self.counts))
            unexpected = sorted(set(self.counts) - expected)
        assert not duplicates, f"processed more than once: {sorted(duplicates.items())[:20]}"
        assert not missing, f"never processed: {missing[:20]} ({len(missing)} in all)"
        assert not unexpected, f"offsets beyond the log end: {unexpected[:20]}"


class Member:
    """Common bookkeeping: the partitions held now, how often they were revoked, errors raised."""

    kind = "member"

    def __init__(self, name: str, ledger: Ledger) -> None:
        self.name = name
        self.ledger = ledger
        self.lock = threading.Lock()
        self.held: set[int] = set()
        self.assign_events = 0
        self.revoke_events = 0
        self.revoked_partitions = 0
        self.errors: list[BaseException] = []
        self.stop_event = threading.Event()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run_guarded, name=name, daemon=True)

    def start(self) -> Member:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Close the client cleanly (which leaves the group) and wait until it has."""
        self.stop_event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.name} did not close"

    def holding(self) -> set[int]:
        with self.lock:
            return set(self.held)

    def _assigned(self, partitions: list[int], incremental: bool) -> None:
        with self.lock:
            self.held = (self.held | set(partitions)) if incremental else set(partitions)
            self.assign_events += 1

    def _revoked(self, partitions: list[int]) -> None:
        with self.lock:
            self.held -= set(partitions)
            self.revoke_events += 1
            self.revoked_partitions += len(partitions)

    def _run_guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced by the test through .errors
            self.errors.append(exc)
        finally:
            with self.lock:
                self.held = set()
            self.closed.set()

    def _run(self) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    kind = "confluent-kafka"

    def __init__(self, name: str, ledger: Ledger, bootstrap: str, group: str, topic: str, *,
                 assignor: str = "range", instance_id: str | None = None, **config: Any) -> None:
        super().__init__(name, ledger)
        self.topic = topic
        self.cooperative = assignor == "cooperative-sticky"
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "partition.assignment.strategy": assignor, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": FAST_SESSION["session_timeout_ms"],
            "heartbeat.interval.ms": FAST_SESSION["heartbeat_interval_ms"], **config,
        }
        if instance_id is not None:
            self.config["group.instance.id"] = instance_id
        self.consumer = Consumer(self._client_config())
        self.uncommitted: dict[int, int] = {}
        self.transient_errors: list[Any] = []

    def _client_config(self) -> dict[str, Any]:
        return self.config

    def _commit(self) -> None:
        if self.uncommitted:
            offsets = [TopicPartition(self.topic, p, o) for p, o in self.uncommitted.items()]
            self.consumer.commit(offsets=offsets, asynchronous=False)
            self.uncommitted.clear()

    def _on_assign(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._assigned([tp.partition for tp in partitions], incremental=self.cooperative)

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self._commit()
        self._revoked([tp.partition for tp in partitions])

    def _on_lost(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.uncommitted.clear()  # the partitions are someone else's now: committing would be refused
        self._revoked([tp.partition for tp in partitions])

    def _run(self) -> None:
        consumer = self.consumer
        consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                           on_lost=self._on_lost)
        try:
            while not self.stop_event.is_set():
                for message in consumer.consume(100, 0.1):
                    error = message.error()
                    if error is not None:
                        if error.fatal():
                            raise KafkaException(error)
                        self.transient_errors.append(error)  # e.g. the broker is down for a moment
                        continue
                    self.ledger.record(self.name, message.partition(), message.offset())
                    self.uncommitted[message.partition()] = message.offset() + 1
                self._commit()
        finally:
            consumer.close()


class ConsumerProtocolMember(ConfluentMember):
    """librdkafka speaking KIP-848 (group.protocol=consumer): the broker assigns, changes are incremental,
    and session timeout and heartbeat interval come from the broker, so they are not configured here."""

    kind = "confluent-kafka (consumer protocol)"

    def __init__(self, name: str, ledger: Ledger, bootstrap: str, group: str, topic: str, *,
                 instance_id: str | None = None, **config: Any) -> None:
        super().__init__(name, ledger, bootstrap, group, topic, instance_id=instance_id, **config)
        self.cooperative = True

    def _client_config(self) -> dict[str, Any]:
        classic_only = ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms")
        return {**{k: v for k, v in self.config.items() if k not in classic_only}, "group.protocol": "consumer"}


class KafkaPythonMember(Member):
    kind = "kafka-python"

    def __init__(self, name: str, ledger: Ledger, bootstrap: str, group: str, topic: str,
                 assignor: type | None = None) -> None:
        super().__init__(name, ledger)
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        self.topic = topic
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=name, enable_auto_commit=False,
            auto_offset_reset="earliest", partition_assignment_strategy=[assignor or RangePartitionAssignor],
            **FAST_SESSION)

    def _run(self) -> None:
        from kafka import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                # No commit here: kafka-python 3 calls listeners on its IO thread, where a blocking
                # commit is refused. Nothing is pending anyway: a rebalance only starts inside poll(),
                # and the loop commits everything it processed before polling again.
                member._revoked([tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                member._assigned([tp.partition for tp in assigned], incremental=False)

        consumer = self.consumer
        consumer.subscribe([self.topic], listener=Listener())
        # kafka-python 3.0.12 loses a leader's join when metadata for the subscribed topic arrives after its
        # first assignment: the metadata-triggered rejoin never sets rejoin_needed, so if poll() times out
        # while that SyncGroup is in flight, the result is dropped and heartbeats stay disabled until the
        # session expires. Knowing the partitions before the first join keeps the leader off that path.
        if not consumer.partitions_for_topic(self.topic):
            raise AssertionError(f"{self.name}: no partitions for {self.topic}")
        try:
            while not self.stop_event.is_set():
                batches = consumer.poll(timeout_ms=100)
                for records in batches.values():
                    for record in records:
                        self.ledger.record(self.name, record.partition, record.offset)
                if batches:
                    consumer.commit()  # the positions just past everything processed
        finally:
            consumer.close()


class AiokafkaMember(Member):
    kind = "aiokafka"

    def __init__(self, name: str, ledger: Ledger, bootstrap: str, group: str, topic: str,
                 assignor: type | None = None) -> None:
        super().__init__(name, ledger)
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.assignor = assignor

    def _run(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor

        member = self
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name, enable_auto_commit=False,
            auto_offset_reset="earliest", partition_assignment_strategy=(self.assignor or RangePartitionAssignor,),
            **FAST_SESSION)

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                await consumer.commit()
                member._revoked([tp.partition for tp in revoked])

            async def on_partitions_assigned(self, assigned: Any) -> None:
                member._assigned([tp.partition for tp in assigned], incremental=False)

        await consumer.start()
        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not self.stop_event.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for records in batches.values():
                    for record in records:
                        self.ledger.record(self.name, record.partition, record.offset)
                if batches:
                    await consumer.commit()
        finally:
            await consumer.stop()


def wait_until(condition: Callable[[], object], timeout: float, what: str, members: Sequence[Member] = ()) -> float:
    """Poll `condition()`; return the seconds it took. Fails early if any member thread died."""
    started = time.monotonic()
    while not condition():
        for member in members:
            if member.errors:
                raise AssertionError(f"{member.name} failed while waiting for {what}") from member.errors[0]
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; holdings: "
                                 + ", ".join(f"{m.name}={sorted(m.holding())}" for m in members))
        time.sleep(0.02)
    return time.monotonic() - started


def partitions_covered(members: Sequence[Member], partitions: int) -> bool:
    """True when the members between them hold every partition, each exactly once."""
    held = [p for m in members for p in m.holding()]
    return sorted(held) == list(range(partitions))
