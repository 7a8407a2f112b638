"""Consumer group states as Kafka prints them, for the tools that read them through librdkafka (the CLI and
the console): one table, so both spell a state the same way."""

from __future__ import annotations

from typing import Any

# librdkafka's enum names -> Kafka's spelling of the group state.
_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "UNKNOWN": "Unknown",
    "UNKOWN": "Unknown",  # librdkafka's old misspelling, still an alias
}
# Offsets may only be reset while nobody consumes: an active member would overwrite them at its next
# commit, so Kafka refuses a reset in any other state.
RESETTABLE_STATES = frozenset({"Empty", "Dead"})


def state_name(state: Any) -> str:
    """Kafka's name of a group state given as a librdkafka enum (or already as a name)."""
    name = getattr(state, "name", None) or str(state)
    return _STATE_NAMES.get(name, name)
