"""Topic configs: stored as Kafka does (strings), read through typed accessors with Kafka's defaults.

Only the keys storage acts on are validated; any other well-formed key is stored as given, so the broker
can keep (and DescribeConfigs can report) configs sluice does not interpret yet.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
SEGMENT_BYTES = "segment.bytes"
SEGMENT_MS = "segment.ms"
MAX_MESSAGE_BYTES = "max.message.bytes"
CLEANUP_POLICY = "cleanup.policy"
INDEX_INTERVAL_BYTES = "index.interval.bytes"
MIN_CLEANABLE_DIRTY_RATIO = "min.cleanable.dirty.ratio"
MIN_COMPACTION_LAG_MS = "min.compaction.lag.ms"
MAX_COMPACTION_LAG_MS = "max.compaction.lag.ms"
DELETE_RETENTION_MS = "delete.retention.ms"
# Read-only entries DescribeConfigs adds for compacted topics (the cleaner's view); never stored.
CLEANER_STATUS_PREFIX = "sluice.cleaner."
CLEANER_DIRTY_RATIO = CLEANER_STATUS_PREFIX + "dirty.ratio"
CLEANER_LAST_CLEANED_MS = CLEANER_STATUS_PREFIX + "last.cleaned.ms"

# Kafka's defaults (TopicConfig / LogConfig).
DEFAULT_CONFIGS: dict[str, str] = {
    RETENTION_MS: "604800000",
    RETENTION_BYTES: "-1",
    SEGMENT_BYTES: "1073741824",
    SEGMENT_MS: "604800000",
    MAX_MESSAGE_BYTES: "1048588",
    CLEANUP_POLICY: "delete",
    INDEX_INTERVAL_BYTES: "4096",
    MIN_CLEANABLE_DIRTY_RATIO: "0.5",
    MIN_COMPACTION_LAG_MS: "0",
    MAX_COMPACTION_LAG_MS: "9223372036854775807",
    DELETE_RETENTION_MS: "86400000",
}

# Kafka refuses segments smaller than 14 bytes (LegacyRecord overhead); sluice needs room for one header.
_MIN_SEGMENT_BYTES = 14
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_CLEANUP_POLICIES = frozenset({"delete", "compact"})
_CONFIG_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

# (minimum, maximum) for each integer config; -1 means "unlimited" where Kafka allows it.
_INT_RANGES: dict[str, tuple[int, int]] = {
    RETENTION_MS: (-1, _INT64_MAX),
    RETENTION_BYTES: (-1, _INT64_MAX),
    SEGMENT_BYTES: (_MIN_SEGMENT_BYTES, _INT32_MAX),
    SEGMENT_MS: (1, _INT64_MAX),
    MAX_MESSAGE_BYTES: (0, _INT32_MAX),
    INDEX_INTERVAL_BYTES: (0, _INT32_MAX),
    MIN_COMPACTION_LAG_MS: (0, _INT64_MAX),
    MAX_COMPACTION_LAG_MS: (1, _INT64_MAX),
    DELETE_RETENTION_MS: (0, _INT64_MAX),
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> str | None:
    """Return a message saying what is wrong with `configs`, or None when all values are acceptable.

    A None value means "reset to the default" and is always acceptable.
    """
    for name, value in configs.items():
        if not isinstance(name, str) or not _CONFIG_NAME.match(name):
            return f"invalid config name {name!r}"
        if name.startswith(CLEANER_STATUS_PREFIX):
            return f"config {name} is read-only (reported by the log cleaner)"
        if value is None:
            continue
        if not isinstance(value, str):
            return f"config {name} must be a string, got {type(value).__name__}"
        if name in _INT_RANGES:
            low, high = _INT_RANGES[name]
            try:
                number = int(value.strip())
            except ValueError:
                return f"config {name}={value!r} is not an integer"
            if not low <= number <= high:
                return f"config {name}={value} is outside [{low}, {high}]"
        elif name == MIN_CLEANABLE_DIRTY_RATIO:
            try:
                ratio = float(value.strip())
            except ValueError:
                return f"config {name}={value!r} is not a number"
            if not 0.0 <= ratio <= 1.0:
                return f"config {name}={value} is outside [0, 1]"
        elif name == CLEANUP_POLICY:
            # An empty list is valid (Kafka: no retention by time or size and no compaction; SUBTRACT of the
            # last policy leaves it).
            policies = [policy.strip() for policy in value.split(",")] if value.strip() else []
            unknown = [policy for policy in policies if policy not in _CLEANUP_POLICIES]
            if unknown:
                return f"config {name}={value!r}: expected a list of {sorted(_CLEANUP_POLICIES)}"
    return None


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The storage-relevant topic configs as numbers, defaults filled in."""

    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    segment_ms: int
    max_message_bytes: int
    cleanup_policy: tuple[str, ...]
    index_interval_bytes: int
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _INT64_MAX
    delete_retention_ms: int = 86_400_000

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> TopicConfig:
        """Typed view of stored configs; the caller validated them with `validate_topic_configs`."""
        merged = {**DEFAULT_CONFIGS, **{k: v for k, v in configs.items() if v is not None}}
        return cls(
            retention_ms=int(merged[RETENTION_MS]),
            retention_bytes=int(merged[RETENTION_BYTES]),
            segment_bytes=int(merged[SEGMENT_BYTES]),
            segment_ms=int(merged[SEGMENT_MS]),
            max_message_bytes=int(merged[MAX_MESSAGE_BYTES]),
            cleanup_policy=tuple(p.strip() for p in merged[CLEANUP_POLICY].split(",") if p.strip()),
            index_interval_bytes=int(merged[INDEX_INTERVAL_BYTES]),
            min_cleanable_dirty_ratio=float(merged[MIN_CLEANABLE_DIRTY_RATIO]),
            min_compaction_lag_ms=int(merged[MIN_COMPACTION_LAG_MS]),
            max_compaction_lag_ms=int(merged[MAX_COMPACTION_LAG_MS]),
            delete_retention_ms=int(merged[DELETE_RETENTION_MS]),
        )

    @property
    def deletes_old_segments(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy


DEFAULT_TOPIC_CONFIG = TopicConfig.from_configs({})
