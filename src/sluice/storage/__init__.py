"""Durable partition logs and topic metadata.

    storage = open_storage("/var/lib/sluice")      # DiskStorage; open_storage(":memory:") -> MemoryStorage
    storage.create_topic("orders", 3, {"retention.ms": "86400000"})
    log = storage.log("orders", 0)
    base = log.append(batch_bytes, parse_batch_header(batch_bytes), append_time_ms=now_ms)
    await asyncio.to_thread(log.flush)              # group commit: one fsync covers every earlier append
    data = log.read(base, max_bytes=1 << 20)        # whole batches, at least one
    storage.close(clean=True)                       # next open skips recovery scans

The data directory, file by file with every byte layout, is mapped in docs/storage.md. The modules:

    api            the interface every engine implements: a partition log, a topic metadata store
    config         topic configs: Kafka's names and defaults, validation, typed accessors
    log            the engine-independent segmented log: offsets, rolling, reads, timestamps, retention
    memory         the in-memory engine (tests, --data-dir :memory:)
    disk           the disk engine: a directory per partition, the data directory lock, the clean-stop marker
    segment        one segment on disk: <base>.log with its .index and .timeindex
    reserve        the space an active segment reserves ahead of its last batch, told from torn data
    index          the sparse offset and time indexes of a segment
    file_cache     the bounded cache of open segment files (closed least recently used first)
    files          writing a whole file durably (fsync, atomic replace, directory and file-system sync)
    loader         opening a partition directory after a crash: which segments to trust, recovering the rest
    batches        what storage checks of batch bytes (intact header, CRC, timestamps for ListOffsets)
    damage         damaged byte ranges of a segment: found by a resynchronising scan, kept in damaged.json
    verify         `sluice storage verify` and `repair`, offline
    producer_state per-partition producers: epochs, recent sequences, open transactions
    txn_index      the aborted-transaction index, a file per segment
    metadata       the rules for topics (create, grow, reconfigure, delete) and their snapshot's encoding
    topic_journal  the disk engine's topic metadata: a snapshot plus an append-only journal
    space          free space: refusing writes before the disk is full, and after it was full
    compaction/    the log cleaner (its package docstring walks through a pass, module by module)
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
