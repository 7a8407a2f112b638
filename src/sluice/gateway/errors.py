"""Gateway failures, named by what the caller should do about them.

The gRPC and HTTP adapters each map a `Failure` to their own status code, so a
failure reads the same whichever API reported it.
"""

from __future__ import annotations

import enum
import re


class Failure(enum.Enum):
    INVALID_ARGUMENT = "invalid argument"
    NOT_FOUND = "not found"
    # Nothing to consume before the long polling timeout: call again.
    LONG_POLL_TIMEOUT = "long polling timeout"
    # Too many waiting requests or a full producer queue: back off.
    TOO_MANY_REQUESTS = "too many requests"
    # Consuming disabled, or the gateway is shutting down.
    UNAVAILABLE = "unavailable"
    TOO_LARGE = "too large"
    INTERNAL = "internal"
    # A partition cannot be read past a corrupt record batch: move the offset past it to go on.
    DATA_LOSS = "data loss"


class GatewayError(Exception):
    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


def invalid(message: str) -> GatewayError:
    return GatewayError(Failure.INVALID_ARGUMENT, message)


# Kafka's own rule for topic names.
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_MAX_GROUP_LENGTH = 249


def validate_topic(topic: str) -> str:
    if not _TOPIC_NAME.match(topic or "") or topic in (".", ".."):
        raise invalid(f"bad topic name {topic!r}: 1-249 characters of [a-zA-Z0-9._-] expected")
    return topic


def validate_group(group: str) -> str:
    if not group:
        raise invalid("group is required")
    if len(group) > _MAX_GROUP_LENGTH or any(ch.isspace() or not ch.isprintable() for ch in group):
        raise invalid(
            f"bad group name {group!r}: up to {_MAX_GROUP_LENGTH} printable characters without spaces"
        )
    return group


def record_too_large(limit: int) -> GatewayError:
    """A produced record over the cluster's producer.max_message_bytes."""
    return GatewayError(Failure.TOO_LARGE, f"record exceeds producer.max_message_bytes={limit}")


def partition_not_found(topic: str, partition: int) -> GatewayError:
    return GatewayError(Failure.NOT_FOUND, f"Partition {partition} of {topic} not found")


def not_handed_out(group: str, topic: str, at: tuple[int, int], in_ranges: bool = False) -> GatewayError:
    """An ack of (partition, offset) that this gateway never handed out for the group and topic."""
    return invalid(
        f"ack of a message this gateway has not handed out: group={group} topic={topic} "
        f"partition={at[0]} offset={at[1]}" + (" (or a range starting there)" if in_ranges else "")
    )
