"""Connects the pure group coordinator to the broker: its records go through the broker's own log.

Group metadata and committed offsets live in the internal `__consumer_offsets` topic, as in Kafka. The
coordinator hands out records to persist; they are appended here, and every reply of the same outcome is
released only after the group commit made them durable. At startup the topic is read back into the
coordinator. The topic is compacted by the log cleaner like any `cleanup.policy=compact` topic (offsets
kept), which keeps that read short.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from sluice.broker.broker import OFFSETS_TOPIC, Broker, read_internal_records
from sluice.coordinator import CoordinatorConfig, GroupCoordinator, Outcome
from sluice.errors import ErrorCode, KafkaError
from sluice.protocol.records import Record, encode_batch, parse_batch_header
from sluice.storage.log import DiskFull

log = logging.getLogger("sluice.groups")

READ_CHUNK_BYTES = 1 << 20
Converter = Callable[[Any], Any]
# Coordinator calls that never write __consumer_offsets: they keep working on a full disk.
_READ_ONLY_CALLS = frozenset(
    {"consumer_group_describe", "describe_groups", "heartbeat", "list_groups", "offset_fetch"}
)


class GroupService:
    """Runs coordinator calls for the handlers and turns their outcomes into durable replies."""

    def __init__(self, broker: Broker, coordinator: GroupCoordinator) -> None:
        self.broker = broker
        self.coordinator = coordinator
        # How to turn a coordinator result into the Kafka response each parked request expects.
        self.converters: dict[Hashable, Converter] = {}

    def call(self, method: str, request: Any, now_ms: int, token: Hashable, convert: Converter) -> None:
        if method not in _READ_ONLY_CALLS and (refusal := self.broker.write_refusal(now_ms)):
            # Refused before the coordinator changes anything, so its state never runs ahead of the log.
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"group {method} refused: {refusal}")
        self.converters[token] = convert
        outcome = getattr(self.coordinator, method)(request, now_ms, token)
        self.apply(outcome, now_ms)

    def apply(self, outcome: Outcome, now_ms: int) -> None:
        durable = bool(outcome.records)
        if durable:
            self.persist([(r.key, r.value) for r in outcome.records], now_ms)
        for token, result in outcome.replies:
            convert = self.converters.pop(token, None)
            if convert is not None:
                self.broker.ready_replies.append((token, convert(result), durable))

    def persist(self, records: list[tuple[bytes, bytes | None]], now_ms: int) -> None:
        try:
            _append_records(self.broker, records, now_ms)
        except DiskFull:
            if self.broker.free_space is not None:
                self.broker.free_space.disk_full(now_ms)
            raise

    # ----- sluice's group management (the admin HTTP API calls these on the event loop) -----

    def create_group(
        self, name: str, session_timeout_ms: int | None, ephemeral: bool, now: int
    ) -> dict[str, Any] | None:
        outcome = self.coordinator.create_group(name, session_timeout_ms, ephemeral, now)
        if outcome is None:
            return None
        self.apply(outcome, now)
        return {"name": name, "session_timeout_ms": session_timeout_ms, "ephemeral": ephemeral}

    def delete_group(self, name: str, force: bool, now: int) -> None:
        self.apply(self.coordinator.delete_group(name, force, now), now)

    def rewind(self, name: str, offsets: dict[tuple[str, int], int], live: bool, now: int) -> None:
        self.apply(self.coordinator.rewind(name, offsets, live, now), now)

    def next_deadline(self) -> int | None:
        return self.coordinator.next_deadline()

    def tick(self, now_ms: int) -> None:
        self.apply(self.coordinator.tick(now_ms), now_ms)


def _append_records(broker: Broker, records: list[tuple[bytes, bytes | None]], now_ms: int) -> None:
    batch = encode_batch(
        [Record(i, 0, key, value, []) for i, (key, value) in enumerate(records)], base_timestamp=now_ms
    )
    state = broker.partition(OFFSETS_TOPIC, 0)
    broker._append_validated(state, batch, [parse_batch_header(batch)], now_ms)


def _read_offsets_topic(broker: Broker) -> Iterator[tuple[bytes, bytes | None]]:
    return read_internal_records(broker.partition(OFFSETS_TOPIC, 0).log, OFFSETS_TOPIC, READ_CHUNK_BYTES)


def attach_group_coordinator(broker: Broker, now_ms: int) -> GroupService:
    config = broker.config
    if broker.storage.topic(OFFSETS_TOPIC) is None:
        broker.create_topic(
            OFFSETS_TOPIC,
            1,
            {"cleanup.policy": "compact", "segment.bytes": str(config.offsets_topic_segment_bytes)},
            internal=True,
        )
    coordinator = GroupCoordinator(
        CoordinatorConfig(
            group_min_session_timeout_ms=config.group_min_session_timeout_ms,
            group_max_session_timeout_ms=config.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            group_max_size=config.group_max_size,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            consumer_group_session_timeout_ms=config.consumer_group_session_timeout_ms,
            consumer_group_heartbeat_interval_ms=config.consumer_group_heartbeat_interval_ms,
        )
    )
    records = list(_read_offsets_topic(broker))
    coordinator.load(records, now_ms)
    log.info("loaded %d group records from %s", len(records), OFFSETS_TOPIC)
    service = GroupService(broker, coordinator)
    broker.groups = service
    return service
