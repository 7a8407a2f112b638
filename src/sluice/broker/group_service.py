"""The group service: connects the pure group coordinator (sluice.coordinator) to the broker. The Kafka
APIs reach it through sluice.broker.handlers.groups.

Group metadata and committed offsets live in the internal `__consumer_offsets` topic, as in Kafka (a
`LocalStateTopic`: sluice.state_topic). The coordinator hands out records to persist; they are appended
here, and every reply is released only once the group commit made every group record appended so far
durable. At startup the topic is read back into the coordinator. The topic is compacted by the log cleaner
like any `cleanup.policy=compact` topic (offsets kept), which keeps that read short.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

from sluice.broker.broker import OFFSETS_TOPIC, Broker
from sluice.broker.config import BrokerConfig
from sluice.coordinator import CoordinatorConfig, GroupCoordinator, Outcome
from sluice.coordinator.refusals import refused_result
from sluice.errors import ErrorCode, KafkaError
from sluice.state_topic.local import StateTopicService
from sluice.storage.log import DiskFull

log = logging.getLogger("sluice.groups")

Converter = Callable[[Any], Any]
# Coordinator calls that never write __consumer_offsets: they keep working on a full disk.
_READ_ONLY_CALLS = frozenset(
    {"consumer_group_describe", "describe_groups", "heartbeat", "list_groups", "offset_fetch"}
)


class GroupService(StateTopicService[GroupCoordinator]):
    """Runs coordinator calls for the handlers and turns their outcomes into durable replies."""

    def __init__(self, broker: Broker) -> None:
        super().__init__(
            broker,
            OFFSETS_TOPIC,
            broker.config.offsets_topic_segment_bytes,
            lambda: GroupCoordinator(_coordinator_config(broker.config)),
        )
        self.broker = broker
        # The parked calls still waiting for their answer: their call, request, and how to turn a coordinator
        # result into the Kafka response the request expects.
        self.pending: dict[Hashable, tuple[str, Any, Converter]] = {}
        self.durable_key = (OFFSETS_TOPIC, 0)
        # Deleted topics whose offsets could not be forgotten yet (the topic could not be written): done at
        # the next load, before the coordinator answers anything.
        self.owed_deletions: set[str] = set()

    def call(self, method: str, request: Any, now_ms: int, token: Hashable, convert: Converter) -> None:
        self.pending[token] = (method, request, convert)
        if not self.ensure_loaded(now_ms):
            self._refuse(token)
            return
        if method not in _READ_ONLY_CALLS and (refusal := self.refusal(now_ms)):
            # Refused before the coordinator changes anything, so its state never runs ahead of the log.
            self.unload(f"group {method} refused: {refusal}")
            return
        outcome = getattr(self.coordinator, method)(request, now_ms, token)
        self.apply(outcome, now_ms)

    def apply(self, outcome: Outcome, now_ms: int) -> None:
        if outcome.records:
            try:
                self.persist([(r.key, r.value) for r in outcome.records], now_ms)
            except (KafkaError, DiskFull, OSError) as exc:
                # The machine has changed but the log has not: drop the state, read it back later.
                self.unload(str(exc))
                return
        # Every answer waits until the group records appended so far are durable, these and earlier ones, as
        # Kafka's coordinator holds a write operation's answer: a follower's SyncGroup that comes after its
        # leader's is answered with the assignment the leader's call appended, so it goes out with the
        # leader's answer, never before (with nothing unflushed it goes at once).
        for token, result in outcome.replies:
            waiting = self.pending.pop(token, None)
            if waiting is not None:
                self.broker.ready_replies.append((token, waiting[2](result), self.durable_key))

    def on_loaded(self, now_ms: int) -> None:
        configs = self.broker.group_configs
        for group_id in configs.groups:
            self.coordinator.consumer.group_overrides[group_id] = configs.coordinator_overrides(group_id)
            self.coordinator.share.group_overrides[group_id] = configs.share_overrides(group_id)
        if self.owed_deletions:
            self._forget_owed_deletions(now_ms)

    def topics_deleted(self, topics: list[str], now_ms: int) -> bool:
        """DeleteTopics removed `topics`: every group's offsets on them go, as tombstones in the topic
        (Kafka's onPartitionsDeleted), so a topic made again under the same name starts with no offsets.
        True when records were appended: the DeleteTopics answer then waits until they are durable."""
        self.owed_deletions.update(topics)
        if not self.ensure_loaded(now_ms):
            return False  # owed: written once the topic can be written and the state is loaded again
        if refusal := self.refusal(now_ms):
            # Keeping the offsets in memory would answer OffsetFetch with offsets of a topic that is gone.
            self.unload(f"forgetting the offsets of deleted topics refused: {refusal}")
            return False
        return self._forget_owed_deletions(now_ms)

    def _forget_owed_deletions(self, now_ms: int) -> bool:
        topics, self.owed_deletions = self.owed_deletions, set()
        outcome = self.coordinator.topics_deleted(topics, now_ms)
        self.apply(outcome, now_ms)
        if not self.loaded:  # the append failed: the offsets come back at the next load, and go again then
            self.owed_deletions |= topics
            return False
        if outcome.records:
            log.info("forgot %d committed offsets of deleted topics %s", len(outcome.records), sorted(topics))
        return bool(outcome.records)

    def on_unloaded(self) -> None:
        """Every parked call hears NOT_COORDINATOR; the state is gone until the topic is replayed again."""
        for token in list(self.pending):
            self._refuse(token)

    def _refuse(self, token: Hashable) -> None:
        method, request, convert = self.pending.pop(token)
        result = refused_result(method, request, ErrorCode.NOT_COORDINATOR)
        self.broker.ready_replies.append((token, convert(result), None))

    def _require_loaded(self, now_ms: int) -> None:
        if not self.ensure_loaded(now_ms):
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{self.topic.name} cannot be written now")

    # ----- sluice's group management (the admin HTTP API calls these on the event loop) -----

    def create_group(
        self, name: str, session_timeout_ms: int | None, ephemeral: bool, now: int
    ) -> dict[str, Any] | None:
        self._require_loaded(now)
        outcome = self.coordinator.create_group(name, session_timeout_ms, ephemeral, now)
        if outcome is None:
            return None
        self.apply(outcome, now)
        self._require_loaded(now)
        return {"name": name, "session_timeout_ms": session_timeout_ms, "ephemeral": ephemeral}

    def delete_group(self, name: str, force: bool, now: int) -> None:
        self._require_loaded(now)
        self.apply(self.coordinator.delete_group(name, force, now), now)
        self._require_loaded(now)

    def rewind(self, name: str, offsets: dict[tuple[str, int], int], live: bool, now: int) -> None:
        self._require_loaded(now)
        self.apply(self.coordinator.rewind(name, offsets, live, now), now)
        self._require_loaded(now)

    def share_group_for_offsets(self, group_id: str, create: bool, now: int) -> None:
        """Check that an admin may alter or delete this share group's offsets (creating the group when
        `create` and it does not exist yet); raises KafkaError with Kafka's answer."""
        self._require_loaded(now)
        _, records = self.coordinator.share_group_for_offsets(group_id, create=create)
        if records:
            self.apply(Outcome(records=records), now)
            self._require_loaded(now)

    def next_deadline(self) -> int | None:
        return self.coordinator.next_deadline()

    def tick(self, now_ms: int) -> None:
        if self.ensure_loaded(now_ms):
            self.apply(self.coordinator.tick(now_ms), now_ms)


def _coordinator_config(config: BrokerConfig) -> CoordinatorConfig:
    return CoordinatorConfig(
        group_min_session_timeout_ms=config.group_min_session_timeout_ms,
        group_max_session_timeout_ms=config.group_max_session_timeout_ms,
        group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        group_max_size=config.group_max_size,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        consumer_group_session_timeout_ms=config.consumer_group_session_timeout_ms,
        consumer_group_heartbeat_interval_ms=config.consumer_group_heartbeat_interval_ms,
        share_group_session_timeout_ms=config.group_share_session_timeout_ms,
        share_group_heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        share_group_max_size=config.group_share_max_size,
        share_group_assignment_interval_ms=config.group_share_assignment_interval_ms,
    )


def attach_group_coordinator(broker: Broker, now_ms: int) -> GroupService:
    service = GroupService(broker)
    broker.groups = service
    broker.services.append(service)
    service.load(now_ms)
    return service
