"""Durable partition logs and topic metadata.

    storage = open_storage("/var/lib/sluice")      # DiskStorage; open_storage(":memory:") -> MemoryStorage
    storage.create_topic("orders", 3, {"retention.ms": "86400000"})
    log = storage.log("orders", 0)
    base = log.append(batch_bytes, parse_batch_header(batch_bytes), append_time_ms=now_ms)
    await asyncio.to_thread(log.flush)              # group commit: one fsync covers every earlier append
    data = log.read(base, max_bytes=1 << 20)        # whole batches, at least one
    storage.close(clean=True)                       # next open skips recovery scans

Module map: api (the interface), config (topic configs), log (engine-independent segmented log),
segment + index (disk files), loader (recovery), disk / memory (engines), metadata (topics, atomic files),
batches (CRC and record timestamps for recovery and ListOffsets).
"""

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
