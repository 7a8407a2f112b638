"""Backpressure of a gateway consumer: how much fetched, not yet handed out data a partition may buffer, and
when to hold fetching or pause the fullest partitions (tuned against librdkafka's prefetch, see below)."""

from __future__ import annotations

# A full buffer first only stops the consume() calls (librdkafka keeps its prefetch and stops fetching once
# its own queue is full); partitions are paused only when callers took nothing for this long.
# Pausing makes librdkafka drop its prefetch and fetch it all again on resume: with callers draining at full
# speed, pausing at every high-water mark cost a quarter of the stream rate (measured 363k vs 463k msg/s).
_HOLD_SECONDS = 0.1
_HOLD_MAX_SECONDS = 1.0
# Fetched, not yet handed out messages per partition. The partitions share it: fetching is held once they
# buffer this much each on average, and a partition at or above it is paused when the hold runs out
# (resumed below half). Every pause makes librdkafka drop what it prefetched for the partition and fetch it
# again on resume, so a small buffer turns fast consumption into pause/resume churn: 8,000 measured ~1.5x
# the msg/s of 2,000 with less CPU per message. The budget caps the whole consumer when it holds many
# partitions.
_BUFFER_HIGH_WATER = 8000
_BUFFER_BUDGET = 32000
# ...and in bytes (librdkafka's own prefetch default, queued.max.messages.kbytes, is the same 64 MiB), so
# that large messages cannot turn the message counts above into gigabytes.
_BUFFER_BYTES_BUDGET = 64 * 1024 * 1024


def buffer_high_water(partitions: int, message_bytes: float) -> int:
    """Fetched, not yet handed out messages a partition may buffer before it is paused."""
    partitions = max(partitions, 1)
    by_bytes = int(_BUFFER_BYTES_BUDGET / max(message_bytes, 1.0)) // partitions
    return max(min(_BUFFER_HIGH_WATER, _BUFFER_BUDGET // partitions, by_bytes), 1)


class FlowControl:
    """Backpressure state of one consumer: partitions paused, and since when fetching is held."""

    def __init__(self) -> None:
        self.paused: set[int] = set()
        # Since the last take from the buffer, and since the hold began.
        self.held_since: float | None = None
        self._hold_began = 0.0
        self._held_level = 0

    def due_for_pause(self, active: dict[int, int], high: int, now: float) -> bool:
        """Whether to pause the fullest partitions now; holds fetching while their buffer is full.

        `active` maps the partitions not paused to their buffered counts. Fetching is held while they
        use their whole budget (`high` each, shared: one busy partition may use the others' room), and
        every take restarts the wait. A hold never outlasts `_HOLD_MAX_SECONDS` even while callers
        trickle: rebalance callbacks are only served inside consume(), and the group waits for them.
        """
        level = sum(active.values())
        if not active or level < high * len(active):
            self.held_since = None
            return False
        if self.held_since is None:
            self.held_since = self._hold_began = now
        elif level < self._held_level:
            self.held_since = now
        self._held_level = level
        if now - self.held_since < _HOLD_SECONDS and now - self._hold_began < _HOLD_MAX_SECONDS:
            return False
        self.held_since = None
        return True
