"""Durable partition logs and topic metadata. Open an engine with `open_storage(path_or_":memory:")`."""

from sluice.storage.api import NO_TIMESTAMP, PartitionLog, Storage, TopicMeta
from sluice.storage.config import DEFAULT_CONFIGS, DEFAULT_TOPIC_CONFIG, TopicConfig, validate_topic_configs
from sluice.storage.disk import DiskPartitionLog, DiskStorage, open_storage
from sluice.storage.memory import MemoryPartitionLog, MemoryStorage

__all__ = [
    "DEFAULT_CONFIGS",
    "DEFAULT_TOPIC_CONFIG",
    "NO_TIMESTAMP",
    "DiskPartitionLog",
    "DiskStorage",
    "MemoryPartitionLog",
    "MemoryStorage",
    "PartitionLog",
    "Storage",
    "TopicConfig",
    "TopicMeta",
    "open_storage",
    "validate_topic_configs",
]
