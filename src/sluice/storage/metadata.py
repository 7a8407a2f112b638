"""Topic metadata: the rules for creating, growing, reconfiguring and deleting topics, shared by every
engine, and the atomic JSON snapshot the disk engine keeps them in (with a journal: topic_journal.py).

`metadata.json` (its layout: docs/storage.md).
"""

from __future__ import annotations

import base64
import errno
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from sluice.errors import ErrorCode, KafkaError
from sluice.storage.api import TopicMeta
from sluice.storage.config import TopicConfig, validate_topic_configs
from sluice.storage.file_cache import open_file_limit_hint
from sluice.storage.log import DISK_FULL_ERRNOS, DiskFull, SegmentedLog

_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
METADATA_VERSION = 1


def topic_name_problem(name: str) -> str | None:
    """Kafka's Topic.validate rules and words (they also keep names safe as directory names)."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not _LEGAL_TOPIC_NAME.match(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return f"Topic name is invalid: {reason}" if reason else None


def storage_error(what: str, error: OSError) -> KafkaError:
    """KAFKA_STORAGE_ERROR for a failed metadata write; DiskFull when it was the disk being full."""
    message = f"{what} failed: {error}"
    if error.errno in (errno.EMFILE, errno.ENFILE):
        message = f"{what} failed: {open_file_limit_hint()}"
    if error.errno in DISK_FULL_ERRNOS:
        return DiskFull(message)
    return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, message)


def meta_to_json(meta: TopicMeta) -> dict[str, Any]:
    return {
        "name": meta.name,
        "topic_id": str(meta.topic_id),
        "partitions": meta.partitions,
        "configs": dict(meta.configs),
        "internal": meta.internal,
    }


def meta_from_json(raw: Mapping[str, Any]) -> TopicMeta:
    return TopicMeta(
        name=raw["name"],
        topic_id=uuid.UUID(raw["topic_id"]),
        partitions=int(raw["partitions"]),
        configs=dict(raw["configs"]),
        internal=bool(raw["internal"]),
    )


def encode_metadata(cluster_id: str, topics: Mapping[str, TopicMeta]) -> bytes:
    document = {
        "version": METADATA_VERSION,
        "cluster_id": cluster_id,
        "topics": [meta_to_json(meta) for meta in topics.values()],
    }
    # Compact on purpose: with `indent` json falls back to its pure-Python encoder, about 13 times slower
    # (20 ms per snapshot of 1,000 topics). `jq .` reads it.
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def decode_metadata(data: bytes) -> tuple[str, dict[str, TopicMeta]]:
    document = json.loads(data)
    if document.get("version") != METADATA_VERSION:
        raise ValueError(f"unsupported metadata version {document.get('version')!r}")
    topics = [meta_from_json(raw) for raw in document["topics"]]
    return document["cluster_id"], {meta.name: meta for meta in topics}


def new_cluster_id() -> str:
    """Kafka cluster ids are 16 random bytes in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class TopicStore:
    """Topics and their open logs; engines supply log creation, data removal and persistence.

    Implements `api.Storage` together with an engine subclass. Every method runs on the event-loop thread.
    """

    def __init__(self, cluster_id: str, topics: Mapping[str, TopicMeta]) -> None:
        self._cluster_id = cluster_id
        self._topics: dict[str, TopicMeta] = dict(topics)
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._logs: dict[tuple[str, int], SegmentedLog] = {}

    # --- engine hooks -------------------------------------------------------------------------------

    def _open_log(self, meta: TopicMeta, partition: int) -> SegmentedLog:
        raise NotImplementedError

    def _remove_partition_data(self, topic: str, partition: int) -> None:
        """Delete a partition's stored data (its log is already closed)."""

    def _persist(self, name: str, meta: TopicMeta | None) -> None:
        """Make the change of topic `name` (to `meta`; None: deleted) durable; `_topics` already holds it."""

    # --- Storage ------------------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def _require(self, name: str) -> TopicMeta:
        meta = self._topics.get(name)
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        return meta

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], *, internal: bool = False
    ) -> TopicMeta:
        problem = topic_name_problem(name)
        if problem:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partition count must be >= 1, got {partitions}")
        problem = validate_topic_configs(configs)
        if problem:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        meta = TopicMeta(name, uuid.uuid4(), partitions, dict(configs), internal)
        self._add_partitions(meta, 0, None)
        return meta

    def _add_partitions(self, meta: TopicMeta, first: int, previous: TopicMeta | None) -> None:
        """Open partitions `first`.. of `meta`, then make `meta` durable; on failure (a full disk) undo
        both, so neither memory nor disk is left half-changed. A crash between the two leaves partition
        directories no metadata names, which open() removes."""
        opened: list[int] = []
        try:
            for partition in range(first, meta.partitions):
                # Leftovers of a topic of the same name whose deletion was interrupted.
                self._remove_partition_data(meta.name, partition)
                self._logs[(meta.name, partition)] = self._open_log(meta, partition)
                opened.append(partition)
            self._change_topic(meta.name, meta, previous)
        except (OSError, KafkaError) as error:
            for partition in opened:
                self._logs.pop((meta.name, partition)).close()
                try:
                    self._remove_partition_data(meta.name, partition)
                except OSError:
                    pass  # removed as an orphan at the next open
            if isinstance(error, OSError):
                raise storage_error(f"creating partitions of {meta.name!r}", error) from error
            raise

    def _change_topic(self, name: str, meta: TopicMeta | None, previous: TopicMeta | None) -> None:
        """Replace (or, with None, remove) a topic's metadata, durably; memory changes only if the
        write succeeded."""
        if meta is None:
            del self._topics[name]
        else:
            self._topics[name] = meta
        try:
            self._persist(name, meta)
        except OSError as error:
            if previous is None:
                self._topics.pop(name, None)
            else:
                self._topics[name] = previous
            raise storage_error(f"writing topic metadata for {name!r}", error) from error

    def delete_topic(self, name: str) -> None:
        meta = self._require(name)
        try:
            # Forget the topic durably first: a crash then leaves orphan data, which open() removes.
            self._change_topic(name, None, meta)
        except DiskFull:
            # Not even room for the metadata file, and deleting a topic is how an operator frees space:
            # drop its data first, then forget it. A crash in between leaves the topic, empty.
            self._drop_partitions(meta)
            try:
                self._change_topic(name, None, meta)
            except KafkaError:
                for partition in range(meta.partitions):
                    self._logs[(name, partition)] = self._open_log(meta, partition)
                raise
            return
        self._drop_partitions(meta)

    def _drop_partitions(self, meta: TopicMeta) -> None:
        for partition in range(meta.partitions):
            log = self._logs.pop((meta.name, partition), None)
            if log is not None:
                log.close()
            self._remove_partition_data(meta.name, partition)

    def create_partitions(self, name: str, new_total: int) -> TopicMeta:
        meta = self._require(name)
        if new_total <= meta.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {meta.partitions} partitions; the new total {new_total} must be larger",
            )
        grown = TopicMeta(meta.name, meta.topic_id, new_total, meta.configs, meta.internal)
        self._add_partitions(grown, meta.partitions, meta)
        return grown

    def alter_topic_configs(self, name: str, configs: Mapping[str, str | None]) -> TopicMeta:
        meta = self._require(name)
        problem = validate_topic_configs(configs)
        if problem:
            raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
        merged = dict(meta.configs)
        for key, value in configs.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        altered = TopicMeta(meta.name, meta.topic_id, meta.partitions, merged, meta.internal)
        self._change_topic(name, altered, meta)
        config = TopicConfig.from_configs(merged)
        for partition in range(altered.partitions):
            log = self._logs.get((name, partition))
            if log is not None:  # an unopened log reads its config when it opens
                log.update_config(config)
        return altered

    def topics(self) -> list[TopicMeta]:
        return list(self._topics.values())

    def topic(self, name: str) -> TopicMeta | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        # Fetch and Produce from v13 name topics by id on every request: remember where each id was found,
        # and trust the memory only while that name still carries that id (deletes and re-creates change it).
        name = self._names_by_id.get(topic_id)
        if name is not None:
            meta = self._topics.get(name)
            if meta is not None and meta.topic_id == topic_id:
                return meta
        for meta in self._topics.values():
            if meta.topic_id == topic_id:
                self._names_by_id[topic_id] = meta.name
                return meta
        return None

    def log(self, topic: str, partition: int) -> SegmentedLog:
        log = self._logs.get((topic, partition))
        if log is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}")
        return log

    def _close_logs(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
