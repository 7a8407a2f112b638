"""Choosing one primary among the registries that share a `_schemas` topic, through a Kafka consumer group.

Every registry joins the group (default `schema-registry`) subscribed to the one-partition `_schemas`
topic; the group's assignor hands partition 0 to exactly one member at a time, and that member is the
primary: the only one that writes. Each member's `client.id` is its own base URL, so the others find the
primary's address by describing the group (the member whose assignment holds partition 0). The assigned
partition is paused at once: this consumer only holds the seat, the store's own reader does the reading.

During a hand-over two members may both believe they are primary for a moment; the store's replay
refuses a record that would give an existing id to another schema, and the writer re-plans, so ids stay
unique (see state.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

log = logging.getLogger("sluice.registry.election")

DEFAULT_GROUP = "schema-registry"
PRIMARY_CACHE_S = 2.0
# Kafka's least allowed session by default (group.min.session.timeout.ms): a primary killed without leaving
# the group is replaced this long after its last heartbeat.
DEFAULT_SESSION_TIMEOUT_MS = 6000


class Election:
    def __init__(
        self,
        settings: Mapping[str, str],
        topic: str,
        my_url: str,
        *,
        group: str = DEFAULT_GROUP,
        timeout_s: float = 5.0,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    ) -> None:
        self.settings = dict(settings)
        self.topic = topic
        self.my_url = my_url
        self.group = group
        self.timeout_s = timeout_s
        self.session_timeout_ms = session_timeout_ms
        self.is_primary = False
        self.problem: str | None = None  # the group's last error (a session timeout the cluster refuses...)
        self._known: tuple[float, str | None] = (0.0, None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._admin = AdminClient({**self.settings, "client.id": f"{my_url} admin"})

    def start(self) -> None:
        self._consumer = Consumer(
            {
                **self.settings,
                "group.id": self.group,
                "client.id": self.my_url,
                "enable.auto.commit": False,
                "session.timeout.ms": self.session_timeout_ms,
                # A sixth of the session: a member learns of a rebalance (a dead primary's seat free) within
                # one heartbeat, and several may be lost before the session runs out.
                "heartbeat.interval.ms": max(100, self.session_timeout_ms // 6),
                # Sticky: a registry joining or leaving does not move the seat off a primary that stays.
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._thread = threading.Thread(target=self._run, name="registry-election", daemon=True)
        self._thread.start()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Cooperative rebalancing hands over increments: take them here (so they can be paused at once), and
        # count everything now held.
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.problem = None
        held = consumer.assignment()
        primary = any(p.topic == self.topic and p.partition == 0 for p in held)
        if primary != self.is_primary:
            log.info("registry %s is %s", self.my_url, "now the primary" if primary else "a secondary")
        self.is_primary = primary
        self._known = (time.monotonic(), self.my_url) if primary else (0.0, None)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if any(p.topic == self.topic and p.partition == 0 for p in partitions):
            log.info("registry %s is no longer the primary", self.my_url)
            self.is_primary = False
            self._known = (0.0, None)

    def _run(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            try:
                message = self._consumer.poll(0.2)
            except KafkaException as exc:
                message, error = None, exc.args[0]
            else:
                error = message.error() if message is not None else None
            if error is not None and str(error) != self.problem:
                self.problem = str(error)
                log.warning("election in group %s: %s", self.group, error)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._consumer is not None:
            self._consumer.close()  # leaves the group: another member takes over at once
        self.is_primary = False

    def primary_url(self) -> str | None:
        """The primary's base URL (blocking: describes the group), cached for a couple of seconds."""
        if self.is_primary:
            return self.my_url
        at, url = self._known
        if url is not None and time.monotonic() - at < PRIMARY_CACHE_S:
            return url
        try:
            description = self._admin.describe_consumer_groups([self.group], request_timeout=self.timeout_s)[
                self.group
            ].result(self.timeout_s)
        except KafkaException as exc:
            log.warning("cannot describe group %s: %s", self.group, exc)
            return None
        for member in description.members:
            assignment = member.assignment.topic_partitions if member.assignment else []
            if any(p.topic == self.topic and p.partition == 0 for p in assignment):
                self._known = (time.monotonic(), member.client_id)
                return str(member.client_id)
        return None

    def forget_primary(self) -> None:
        self._known = (0.0, None)
