"""The coordinator's settings and the shape of what every call returns."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from sluice.coordinator.messages import Result
from sluice.coordinator.records import PersistRecord


@dataclass(slots=True, frozen=True)
class CoordinatorConfig:
    """Kafka's group.* / offsets.* broker settings, with Kafka's defaults."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # Kafka waits 3 s before a new group's first assignment; an embedded broker may want less.
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    # How long a member that joined but was never answered may stay (Kafka: 5 minutes, fixed).
    new_member_join_timeout_ms: int = 300_000
    offsets_retention_ms: int = 7 * 24 * 3_600_000
    offsets_retention_check_interval_ms: int = 600_000
    # offset.metadata.max.bytes; like Kafka, the limit is applied to the string's length.
    offset_metadata_max_bytes: int = 4_096
    # KIP-848 groups: group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms.
    consumer_group_session_timeout_ms: int = 45_000
    consumer_group_heartbeat_interval_ms: int = 5_000
    # Share groups: group.share.session.timeout.ms, .heartbeat.interval.ms, .max.size, .assignment.interval.ms.
    share_group_session_timeout_ms: int = 45_000
    share_group_heartbeat_interval_ms: int = 5_000
    share_group_max_size: int = 200
    share_group_assignment_interval_ms: int = 1_000


@dataclass(slots=True)
class Outcome:
    """What one event produced.

    The caller MUST append ``records`` to ``__consumer_offsets`` (in order) and have them durable
    before it sends any of ``replies``: a reply may announce a commit or an assignment those
    records carry. If the append fails, the replies must not be sent as successes.
    """

    replies: list[tuple[Hashable, Result]] = field(default_factory=list)
    records: list[PersistRecord] = field(default_factory=list)

    def reply(self, reply_to: Hashable, result: Result) -> None:
        self.replies.append((reply_to, result))
