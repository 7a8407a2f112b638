"""Broker settings: each limit is named, with Kafka's default where Kafka has one."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml


@dataclass
class BrokerConfig:
    node_id: int = 1
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    # What clients are told to connect to; defaults to the listen address (the bound port when it was 0).
    advertised_host: str | None = None
    advertised_port: int | None = None
    # None keeps everything in memory (tests, throwaway brokers).
    data_dir: Path | None = Path("sluice-data")
    auto_create_topics: bool = True
    default_partitions: int = 1
    # Acknowledge acks=1/-1 produce only after fsync (group commit). False trades durability for speed.
    fsync_before_ack: bool = True
    # socket.request.max.bytes
    max_request_bytes: int = 100 * 1024 * 1024
    # message.max.bytes: largest record batch accepted (topic max.message.bytes can lower or raise it).
    max_message_bytes: int = 1024 * 1024 + 12
    # fetch.max.bytes: largest fetch response the broker assembles, whatever the client asks.
    fetch_max_bytes: int = 55 * 1024 * 1024
    # Requests decoded but not yet answered, per connection, before the broker stops reading from it.
    max_in_flight_per_connection: int = 64
    max_connections: int = 1000
    # connections.max.idle.ms: a connection with nothing received and nothing owed for this long is closed.
    connections_max_idle_ms: int = 600_000
    # A client that sent part of a request and then nothing for this long is cut off.
    partial_request_timeout_ms: int = 30_000
    # Long-poll ceiling even if the client asks for longer.
    max_fetch_wait_ms: int = 30_000
    retention_check_interval_ms: int = 60_000
    # Offsets whose bytes recovery found damaged (see `sluice storage verify`) answer Fetch with
    # CORRUPT_MESSAGE, as Kafka does; True lets consumers skip over them instead.
    skip_damaged_offsets: bool = False
    # Produce is refused with KAFKA_STORAGE_ERROR while the data dir's filesystem has less free space than
    # this (Redpanda's storage_min_free_bytes); None means max(1 GiB, 5% of the filesystem), 0 disables it.
    # Fetch, metadata, DeleteRecords, DeleteTopics and retention keep working, so space can be freed.
    min_free_bytes: int | None = None
    # Group coordinator
    group_initial_rebalance_delay_ms: int = 300
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 1_000
    # KIP-848 consumer groups (group.protocol=consumer): the broker, not the client, sets these.
    consumer_group_session_timeout_ms: int = 45_000
    consumer_group_heartbeat_interval_ms: int = 5_000
    offsets_topic_partitions: int = 1
    offset_metadata_max_bytes: int = 4096
    # __transaction_state is rewritten down to one record per transactional id once it holds this many
    # records and at least twice as many as are live (__consumer_offsets goes through the log cleaner).
    offsets_compaction_min_records: int = 100_000
    # Transactions: transaction.max.timeout.ms and transactional.id.expiration.ms.
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    # offsets.topic.segment.bytes: __consumer_offsets is compacted by the log cleaner, segment by segment.
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    # The log cleaner (Kafka's log.cleaner.*): compaction of topics whose cleanup.policy has "compact".
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    # Memory for the key -> offset map of one pass, shared by the cleaner threads.
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    # How long a cleaner thread sleeps when no partition is due.
    log_cleaner_backoff_ms: int = 15_000
    topic_defaults: dict[str, str] = field(default_factory=dict)

    @property
    def advertised(self) -> tuple[str, int]:
        return self.advertised_host or self.listen_host, self.advertised_port or self.listen_port

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> BrokerConfig:
        """Load a YAML file whose keys are this class's field names (dashes allowed for underscores)."""
        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping of settings")
        raw = raw.get("broker", raw)
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            name = str(key).replace("-", "_").replace(".", "_")
            if name not in known:
                raise ValueError(f"{path}: unknown broker setting {key!r}")
            values[name] = Path(value) if name == "data_dir" and value is not None else value
        # None means "not given" for every override but data_dir, where it means "keep nothing on disk".
        values.update({k: v for k, v in overrides.items() if v is not None or k == "data_dir"})
        return cls(**values)
