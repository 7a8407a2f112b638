"""The disk engine: one directory per partition (`<data-dir>/<topic>-<partition>/`), Kafka's segment
layout inside, topic metadata in `<data-dir>/metadata.json` and its journal `metadata.log` (topic_journal.py).

A `.clean-shutdown` marker written by `close(clean=True)` and removed at open lets the next start skip
recovery scans; a `.lock` file (flock) keeps a second process out of the same directory.

Every file of the data directory and its byte layout: docs/storage.md.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from sluice.errors import ErrorCode, KafkaError
from sluice.storage.api import TopicMeta
from sluice.storage.config import TopicConfig
from sluice.storage.damage import write_damage
from sluice.storage.files import sync_directory, sync_filesystem, write_atomically
from sluice.storage.index import OffsetIndex, TimeIndex
from sluice.storage.loader import SWAP_MANIFEST, Checkpoint, load_partition, write_checkpoint
from sluice.storage.log import DISK_FULL_ERRNOS, SegmentedLog
from sluice.storage.memory import MemoryStorage
from sluice.storage.metadata import TopicStore, new_cluster_id, storage_error
from sluice.storage.segment import FileSegment
from sluice.storage.topic_journal import TopicJournal

CLEAN_SHUTDOWN_MARKER = ".clean-shutdown"
LOCK_FILE = ".lock"
MEMORY_DATA_DIR = ":memory:"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_TRASH_SUFFIX = ".deleting"
# Once the active segment grew by this much since its last checkpoint, a flush also writes its indexes and
# records how far it is durable, so a crash costs a check of at most this much of it (plus what followed).
ACTIVE_CHECKPOINT_BYTES = 64 * 1024 * 1024
_log = logging.getLogger("sluice.storage")


class DiskPartitionLog(SegmentedLog):
    """A partition log in a directory of FileSegments.

    Flush threading contract: `flush()` may run on one worker thread while the event-loop thread keeps
    calling `append`, `read` and friends. It snapshots (under a short lock) the active segment and the
    sealed segments not yet durable, then fsyncs outside that lock, so appends never wait for the disk.
    Every byte appended before `flush()` was called is in one of the snapshotted files, so it is durable
    when `flush()` returns. Sealed segments also get their indexes written and fsynced, after which the
    recovery point in the checkpoint moves past them. Deleting segments and `close` take the flush lock,
    so they wait for a running fsync instead of closing its descriptor.
    """

    def __init__(self, directory: Path, config: TopicConfig, *, clean: bool) -> None:
        loaded = load_partition(directory, config.index_interval_bytes, clean=clean)
        super().__init__(loaded.segments, loaded.log_start_offset, config)
        self.directory = directory
        self.truncated_bytes_at_load = loaded.truncated_bytes
        self.damaged = list(loaded.damaged)
        self._not_durable: list[FileSegment] = list(loaded.not_durable)
        self._recovery_point = loaded.recovery_point
        # The first flush makes the directory entries of this partition's files durable.
        self._directory_dirty = True
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_pending = False
        self._active_checkpoint = (-1, 0)  # (active segment base, durable position) last checkpointed
        # Opened as a clean stop left it: while nothing changes, a clean close has nothing to write.
        self._as_stopped = self._shape() if loaded.as_stopped else None

    def _shape(self) -> tuple[int, int, int, tuple[int, ...]]:
        return (self._log_start_offset, self.log_end_offset, self._size_bytes, tuple(self._bases))

    def unchanged_since_clean_open(self) -> bool:
        """Opened after a clean stop, and nothing appended, deleted, compacted or moved since: its
        indexes and checkpoint on disk are still the ones that stop wrote."""
        return self._as_stopped is not None and self._as_stopped == self._shape() and not self._not_durable

    @property
    def segments(self) -> list[FileSegment]:
        return list(self._segments)  # type: ignore[arg-type]

    def _new_segment(self, base_offset: int) -> FileSegment:
        segment = FileSegment(self.directory, base_offset, self.config.index_interval_bytes, create=True)
        self._directory_dirty = True
        return segment

    def update_config(self, config: TopicConfig) -> None:
        super().update_config(config)
        active: FileSegment = self._segments[-1]  # type: ignore[assignment]
        active.index_interval_bytes = config.index_interval_bytes

    def _on_sealed(self, segment: FileSegment) -> None:  # type: ignore[override]
        self._not_durable.append(segment)

    def _on_deleted(self, segments: list[FileSegment]) -> None:  # type: ignore[override]
        with self._segments_lock:
            self._not_durable = [s for s in self._not_durable if s not in segments]
        self._directory_dirty = True
        gone = {segment.base_offset for segment in segments}
        if any(damage.segment in gone for damage in self.damaged):
            self.damaged = [damage for damage in self.damaged if damage.segment not in gone]
            write_damage(self.directory, self.damaged)

    def _on_log_start_changed(self) -> None:
        self._write_checkpoint()

    def _delete_prefix(self, count: int) -> None:
        super()._delete_prefix(count)
        if self._checkpoint_pending:
            self._write_checkpoint()  # the deletion freed space for the checkpoint a full disk refused

    def _write_checkpoint(self, *, sync: bool = True) -> None:
        """Persist the log start and recovery point. On a full disk this is skipped (and retried after the
        next deletion): both are hints a later start can do without, and DeleteRecords and retention
        must keep working so an operator can free space."""
        with self._checkpoint_lock:
            try:
                checkpoint = Checkpoint(
                    self._log_start_offset, self._recovery_point, *self._active_checkpoint
                )
                write_checkpoint(self.directory, checkpoint, sync=sync)
                self._checkpoint_pending = False
            except OSError as error:
                if error.errno not in DISK_FULL_ERRNOS:
                    raise
                self._checkpoint_pending = True
                _log.warning("%s: checkpoint not written, disk full: %s", self.directory, error)

    def flush(self) -> None:
        with self._flush_lock:
            if self._closed:
                return
            if self._failure:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self._failure)
            try:
                self._flush_locked()
            except OSError as error:
                # Never retried: after a failed fsync the kernel may have dropped the dirty pages, so a
                # later fsync that succeeds proves nothing (PostgreSQL's "fsyncgate").
                self._failure = f"fsync failed, partition offline until restart: {error}"
                _log.error("%s: %s", self.describe(), self._failure)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self._failure) from error

    def describe(self) -> str:
        return str(self.directory)

    def _active_indexes_to_checkpoint(self, active: FileSegment) -> tuple[int, OffsetIndex, TimeIndex] | None:
        base, position = self._active_checkpoint
        grown = active.size_bytes - (position if base == active.base_offset else 0)
        if grown < ACTIVE_CHECKPOINT_BYTES:
            return None
        offset_index, time_index = active.offset_index.copy(), active.time_index.copy()
        # Read after the copies: each entry's batch was fully written before the entry was added.
        return active.size_bytes, offset_index, time_index

    def _flush_locked(self) -> None:
        with self._segments_lock:
            sealed = list(self._not_durable)
            active: FileSegment = self._segments[-1]  # type: ignore[assignment]
            directory_dirty, self._directory_dirty = self._directory_dirty, False
            # Copied under the GIL before the fsync: every entry describes bytes that fsync covers.
            active_indexes = self._active_indexes_to_checkpoint(active)
        for segment in sealed:
            segment.sync()
            try:
                segment.write_indexes(sync=True)
            except OSError as error:
                if error.errno not in DISK_FULL_ERRNOS:
                    raise
                # Indexes are hints: without them the next start rebuilds them by scanning the segment.
                segment.index_path.unlink(missing_ok=True)
                segment.time_index_path.unlink(missing_ok=True)
        active.sync()
        if directory_dirty:
            # New segment files must survive power loss as names, not only as data.
            sync_directory(self.directory)
        if active_indexes is not None:
            position, offset_index, time_index = active_indexes
            try:
                offset_index.write(active.index_path, sync=True)
                time_index.write(active.time_index_path, sync=True)
            except OSError as error:
                if error.errno not in DISK_FULL_ERRNOS:
                    raise
            else:
                self._active_checkpoint = (active.base_offset, position)
                if not sealed:
                    self._write_checkpoint()
        if sealed:
            with self._segments_lock:
                self._not_durable = [s for s in self._not_durable if s not in sealed]
                first_not_durable = self._not_durable[0] if self._not_durable else self._segments[-1]
                self._recovery_point = first_not_durable.base_offset
            self._write_checkpoint()

    # --- what the cleaner asks of the log (api.CompactableLog; the cleaner is sluice.storage.compaction) ---

    def cleanable_segments(self) -> list[FileSegment]:
        """The sealed segments already made durable, oldest first, up to the first with recorded damage:
        the only ones the cleaner touches. A damaged segment stays as it is (its damaged.json byte ranges
        would not describe a rewritten file, and the cleaner reads batches without resynchronising) until
        `sluice storage repair` quarantines the damage. Safe from any thread.
        """
        with self._segments_lock:
            if self._closed or self._failure:
                return []
            not_durable = {id(segment) for segment in self._not_durable}
            # A segment with recorded damage stops the cleaner: rewriting it would drop the damaged bytes
            # that `sluice storage verify/repair` reports and fetches answer CORRUPT_MESSAGE for.
            result: list[FileSegment] = []
            for segment in self._segments[:-1]:
                if id(segment) in not_durable or segment.damaged:  # type: ignore[attr-defined]
                    break
                result.append(segment)  # type: ignore[arg-type]
            return result

    def swap_cleaned(
        self,
        replaced: list[FileSegment],
        cleaned: FileSegment,
        manifest_pending: Path,
        crash_point: Callable[[str], None] = lambda step: None,
    ) -> bool:
        """Owner thread only. Put the durable `cleaned` segment (in the `.cleaning` directory) in place of
        the consecutive `replaced` segments; False, changing nothing, when they are no longer in the log.

        Crash protocol: renaming the fsynced manifest into the partition directory (and fsyncing the
        directory) commits the swap; the file moves after it are redone by `loader.settle_cleaner_swap`
        if a crash interrupts them, and before it that function discards the cleaned files.
        """
        if self._closed or self._failure:
            return False
        segments = self._segments
        first = next((n for n, segment in enumerate(segments) if segment is replaced[0]), None)
        count = len(replaced)
        if first is None or first + count >= len(segments):
            return False
        if any(segments[first + n] is not replaced[n] for n in range(count)):
            return False
        os.replace(manifest_pending, self.directory / SWAP_MANIFEST)
        sync_directory(self.directory)
        crash_point("committed")
        # Replaced segments are durable and sealed, so no flush holds their descriptors.
        for segment in replaced:
            segment.close()
            if segment.base_offset != cleaned.base_offset:
                for path in (segment.log_path, segment.index_path, segment.time_index_path):
                    path.unlink(missing_ok=True)
        crash_point("old-removed")
        cleaned.relocate(self.directory)
        with self._segments_lock:
            self._segments[first : first + count] = [cleaned]
            self._bases[first : first + count] = [cleaned.base_offset]
        self._size_bytes += cleaned.size_bytes - sum(segment.size_bytes for segment in replaced)
        return True

    def close_clean(self, *, sync: bool = True) -> bool:
        """Flush, finish the active segment's indexes and checkpoint, so the next open trusts them.
        Returns False (and closes anyway) when the log could not be made durable. Without `sync` nothing
        is fsynced: the caller syncs the whole file system once (`sync_filesystem`) before it counts the
        stop as clean.
        """
        try:
            if sync:
                self.flush()
            with self._flush_lock:
                if self._closed:
                    return True
                if self._failure:
                    return False
                active: FileSegment = self._segments[-1]  # type: ignore[assignment]
                active.seal()
                if sync:
                    active.sync_size()  # seal cut the space reserved past the last batch
                else:
                    for segment in self._not_durable:
                        segment.write_indexes(sync=False)
                active.write_indexes(sync=sync)
                self._recovery_point = active.base_offset
                self._write_checkpoint(sync=sync)
        except (KafkaError, OSError):
            return False
        finally:
            self.close()
        return True


def read_clean_shutdown_marker(path: Path) -> set[str] | None:
    """The partitions a clean stop left unrecovered (never opened since a crash): empty for none, None
    when the marker cannot be read (then every partition is recovered)."""
    data = path.read_bytes()
    if not data:
        return set()
    try:
        return {str(name) for name in json.loads(data)["unrecovered"]}
    except (ValueError, KeyError, TypeError):
        _log.warning("%s unreadable: recovering every partition", path)
        return None


def write_clean_shutdown_marker(path: Path, unrecovered: list[str]) -> None:
    data = json.dumps({"unrecovered": unrecovered}).encode() if unrecovered else b""
    write_atomically(path, data)


class DiskStorage(TopicStore):
    """`api.Storage` in a data directory. Opening it reads the topics; each partition's log is opened, and
    after a crash recovered (see loader.py), on first use (`log`), so start-up costs the same however many
    partitions there are. A clean stop lists the partitions it did not open since a crash in the
    `.clean-shutdown` marker, so their recovery still happens at their first open after the next start."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"{self.data_dir} is in use by another process"
            ) from None
        super().__init__("", {})
        self._journal: TopicJournal | None = None
        try:
            self._load()
        except BaseException:
            self._close_logs()
            if self._journal is not None:
                self._journal.close()
            os.close(self._lock_fd)
            raise

    def _load(self) -> None:
        """Read what must be known globally (the topics); partition logs open on first use (`log`)."""
        self._journal, self._topics = TopicJournal.open(self.data_dir, new_cluster_id())
        self._cluster_id = self._journal.cluster_id
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        self.was_clean_shutdown = marker.exists()
        # Which unopened partitions may hold a crash's damage, so their first open must recover them:
        # after a crash every one; after a clean stop those the marker lists (not opened since a crash).
        suspect = read_clean_shutdown_marker(marker) if self.was_clean_shutdown else None
        self._suspect_all = suspect is None
        self._suspect: set[str] = suspect or set()
        self._remove_orphans()
        if self.was_clean_shutdown:
            # From here on the directory may change; a crash must not be mistaken for a clean stop.
            marker.unlink()
            sync_directory(self.data_dir)

    def _open_existing(self, meta: TopicMeta, partition: int) -> DiskPartitionLog:
        """Open (and, after a crash, recover) a partition's log: before it serves anything."""
        name = f"{meta.name}-{partition}"
        clean = not (self._suspect_all or name in self._suspect)
        try:
            log = DiskPartitionLog(self.data_dir / name, meta.config, clean=clean)
        except OSError as error:
            raise storage_error(f"opening partition {name}", error) from error
        self._suspect.discard(name)
        self._logs[(meta.name, partition)] = log
        return log

    def log(self, topic: str, partition: int) -> DiskPartitionLog:
        log = self._logs.get((topic, partition))
        if log is not None:
            return log  # type: ignore[return-value]
        meta = self._topics.get(topic)
        if meta is None or not 0 <= partition < meta.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}")
        return self._open_existing(meta, partition)

    def _unopened_suspects(self) -> list[str]:
        """Partitions still waiting for their crash recovery: a clean stop must not make them look clean."""
        if self._suspect_all:
            return [
                f"{meta.name}-{n}"
                for meta in self._topics.values()
                for n in range(meta.partitions)
                if (meta.name, n) not in self._logs
            ]
        opened = {f"{topic}-{partition}" for topic, partition in self._logs}
        return sorted(self._suspect - opened)

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _remove_orphans(self) -> None:
        """Data of deleted topics and partitions whose removal a crash interrupted."""
        with os.scandir(self.data_dir) as entries:  # d_type, no stat per entry: 50,000 partitions
            for entry in entries:
                if not entry.is_dir():
                    continue
                if entry.name.endswith(_TRASH_SUFFIX):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                match = _PARTITION_DIR.match(entry.name)
                if match:
                    meta = self._topics.get(match.group(1))
                    if meta is None or int(match.group(2)) >= meta.partitions:
                        shutil.rmtree(entry.path, ignore_errors=True)

    def _open_log(self, meta: TopicMeta, partition: int) -> DiskPartitionLog:
        directory = self._partition_dir(meta.name, partition)
        directory.mkdir()
        # Not synced here: the metadata change that follows (`_persist`) fsyncs the data directory first,
        # making every new partition directory durable with it (one fsync per topic, not one per partition).
        return DiskPartitionLog(directory, meta.config, clean=True)

    def _remove_partition_data(self, topic: str, partition: int) -> None:
        directory = self._partition_dir(topic, partition)
        if not directory.exists():
            return
        # Rename first so a crash mid-removal leaves an obvious leftover, never a half-deleted partition.
        trash = directory.with_name(directory.name + _TRASH_SUFFIX)
        os.replace(directory, trash)
        shutil.rmtree(trash)
        sync_directory(self.data_dir)

    def _persist(self, name: str, meta: TopicMeta | None) -> None:
        if meta is not None:
            sync_directory(self.data_dir)  # the names of the partition directories `_open_log` made
        assert self._journal is not None
        self._journal.record(name, meta, self._topics)

    def compactable_log(self, topic: str, partition: int) -> DiskPartitionLog:
        return self.log(topic, partition)

    def close(self, clean: bool = True) -> None:
        if self._lock_fd < 0:
            return
        unopened_suspects = self._unopened_suspects() if clean else []
        logs = list(self._logs.values())
        self._logs.clear()
        if clean:
            all_durable = True
            for log in logs:
                if log.unchanged_since_clean_open():  # type: ignore[attr-defined]
                    log.close()  # nothing to write: 50,000 untouched partitions stop in a moment
                    continue
                all_durable = log.close_clean(sync=False) and all_durable  # type: ignore[attr-defined]
            try:
                sync_filesystem(self.data_dir)  # one syncfs for every partition's data, indexes, checkpoint
            except OSError as error:
                _log.error(
                    "%s: syncing at shutdown failed, the next start recovers: %s", self.data_dir, error
                )
                all_durable = False
            if all_durable:
                write_clean_shutdown_marker(self.data_dir / CLEAN_SHUTDOWN_MARKER, unopened_suspects)
        else:
            for log in logs:
                log.close()
        if self._journal is not None:
            self._journal.close()
        os.close(self._lock_fd)
        self._lock_fd = -1


def open_storage(data_dir: str | os.PathLike[str]) -> DiskStorage | MemoryStorage:
    """`:memory:` gives a MemoryStorage; anything else a DiskStorage in that directory."""
    if os.fspath(data_dir) == MEMORY_DATA_DIR:
        return MemoryStorage()
    return DiskStorage(data_dir)
