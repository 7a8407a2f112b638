"""The disk engine's topic metadata on disk: a snapshot plus an append-only journal of changes, so that
creating, altering or deleting a topic costs one short append and one fsync however many topics exist.
(Rewriting one whole file per change made creating 5,000 topics take minutes: quadratic.)

On-disk format (also in docs/storage.md):

- `metadata.json`, the snapshot, written atomically: `{"version": 1, "cluster_id", "topics": [...]}` (see
  metadata.encode_metadata). It is the whole format of data dirs written before the journal existed; such a
  dir has no journal and opens as it is.
- `metadata.log`, the journal: one line per topic change made after that snapshot,
  `<CRC-32 of the JSON, 8 lower-case hex digits> <JSON>\\n`, the JSON being `{"put": <topic object, as in
  the snapshot>}` or `{"delete": "<topic name>"}`.

Rules:
- A change is acknowledged only after its line is fsynced. A kill -9 during an append leaves a torn last
  line (no newline, or a wrong CRC), which was never acknowledged: the next open cuts it off.
- Every entry carries the topic's whole state, so replaying the journal over a snapshot that already holds
  some or all of its changes gives the same topics. Compaction therefore writes a new snapshot (atomically)
  first and empties the journal second; a crash between the two is harmless.
- Compaction happens once the journal holds more entries than there are topics (at least
  COMPACT_MIN_ENTRIES), so its cost per change stays constant.
- A damaged line followed by intact ones is outside damage, not a torn write: the open fails, naming the
  file and the line, rather than guess which topics exist.
- A full disk during an append: the partial line is cut off again and the change is refused (OSError).
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections.abc import Mapping
from pathlib import Path

from sluice.storage.api import TopicMeta
from sluice.storage.files import sync_directory, write_atomically
from sluice.storage.metadata import decode_metadata, encode_metadata, meta_from_json, meta_to_json

SNAPSHOT_FILE = "metadata.json"
JOURNAL_FILE = "metadata.log"
COMPACT_MIN_ENTRIES = 1024
_log = logging.getLogger(__name__)


class MetadataDamaged(ValueError):
    """The journal holds damage that a torn append cannot explain."""


def encode_entry(name: str, meta: TopicMeta | None) -> bytes:
    document = {"put": meta_to_json(meta)} if meta is not None else {"delete": name}
    payload = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def _decode_entry(line: bytes) -> tuple[str, TopicMeta | None] | None:
    """The change a journal line records; None when the line is damaged."""
    if len(line) < 10 or line[8:9] != b" ":
        return None
    payload = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(payload):
            return None
        document = json.loads(payload)
        if "put" in document:
            meta = meta_from_json(document["put"])
            return meta.name, meta
        return str(document["delete"]), None
    except (ValueError, KeyError, TypeError):
        return None


def replay_journal(data: bytes, topics: dict[str, TopicMeta], path: Path) -> tuple[int, int]:
    """Apply the journal `data` to `topics`; returns (entries applied, length of the intact prefix).
    Raises MetadataDamaged when a damaged line has intact lines after it."""
    entries = 0
    position = 0
    while position < len(data):
        end = data.find(b"\n", position)
        decoded = _decode_entry(data[position:end]) if end >= 0 else None
        if decoded is None:
            rest = data[end + 1 :] if end >= 0 else b""
            if any(_decode_entry(line) is not None for line in rest.split(b"\n")):
                raise MetadataDamaged(f"{path}: damaged entry at byte {position}, followed by intact entries")
            break
        name, meta = decoded
        if meta is None:
            topics.pop(name, None)
        else:
            topics[name] = meta
        entries += 1
        position = end + 1
    return entries, position


class TopicJournal:
    """The snapshot and journal of one data directory (format: the module docstring). Owner thread only."""

    def __init__(self, data_dir: Path, cluster_id: str, entries: int) -> None:
        self.data_dir = data_dir
        self.cluster_id = cluster_id
        self.entries = entries
        self._path = data_dir / JOURNAL_FILE
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size

    @classmethod
    def open(cls, data_dir: Path, new_cluster_id: str) -> tuple[TopicJournal, dict[str, TopicMeta]]:
        """Read the snapshot and replay the journal (cutting off a torn last entry); a data dir without a
        snapshot gets one, with `new_cluster_id`."""
        snapshot = data_dir / SNAPSHOT_FILE
        journal_path = data_dir / JOURNAL_FILE
        if snapshot.exists():
            cluster_id, topics = decode_metadata(snapshot.read_bytes())
        elif journal_path.exists():
            # The snapshot is durable before the journal is created, so only outside damage gets here.
            raise MetadataDamaged(f"{journal_path} exists but {snapshot} is missing")
        else:
            cluster_id, topics = new_cluster_id, {}
            write_atomically(snapshot, encode_metadata(cluster_id, topics))
        entries = 0
        if journal_path.exists():
            data = journal_path.read_bytes()
            entries, intact = replay_journal(data, topics, journal_path)
            if intact < len(data):
                _log.warning("%s: cut off %d bytes of a torn last entry", journal_path, len(data) - intact)
                os.truncate(journal_path, intact)
        journal = cls(data_dir, cluster_id, entries)
        if entries == 0 and journal._size == 0:
            sync_directory(data_dir)  # the journal's name, before anything is acknowledged through it
        return journal, topics

    def record(self, name: str, meta: TopicMeta | None, topics: Mapping[str, TopicMeta]) -> None:
        """Make one change durable (`topics` already holds it); OSError when it could not be."""
        line = encode_entry(name, meta)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            # A partial line on a full disk: cut it off so the next append starts a fresh line.
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass  # a torn last line is cut off at the next open anyway
            raise
        self._size += len(line)
        self.entries += 1
        if self.entries > max(COMPACT_MIN_ENTRIES, len(topics)):
            self.compact(topics)

    def compact(self, topics: Mapping[str, TopicMeta]) -> None:
        """Write the snapshot, then empty the journal. On a full disk the journal simply keeps growing."""
        try:
            write_atomically(self.data_dir / SNAPSHOT_FILE, encode_metadata(self.cluster_id, topics))
            os.ftruncate(self._fd, 0)  # replaying the old entries over the new snapshot changes nothing
            self._size = 0
            self.entries = 0
            os.fsync(self._fd)
        except OSError as error:
            # The change that led here is durable in the journal either way: report it made.
            _log.warning("%s: metadata journal not compacted: %s", self.data_dir, error)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
