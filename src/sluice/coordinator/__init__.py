"""The classic consumer-group coordinator: pure state machine, time passed in, records handed out.

Entry point: :class:`GroupCoordinator` (see :mod:`sluice.coordinator.coordinator`); inputs and
outputs are the dataclasses in :mod:`sluice.coordinator.messages`; the ``__consumer_offsets``
record format is in :mod:`sluice.coordinator.records`.
"""

from sluice.coordinator.coordinator import GroupCoordinator
from sluice.coordinator.outcome import CoordinatorConfig, Outcome
from sluice.coordinator.records import PersistRecord

__all__ = ["CoordinatorConfig", "GroupCoordinator", "Outcome", "PersistRecord"]
