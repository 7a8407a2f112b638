"""Offline checks behind `sluice storage verify` and `sluice storage repair`.

`verify` only reads: it opens the files read-only and never takes the data directory's lock, so it can
run beside a broker (the active segment's last batch may then be half-written; that is reported as an
incomplete tail, not as damage). It checks every batch's framing and CRC-32C with the same resynchronising
scan as recovery (damage.py), every index entry against the batches, and lists offset gaps.

`repair` needs the broker stopped (it takes the lock): it moves damaged byte ranges out of each `.log`
into `<partition>/quarantine/` (with a manifest saying which file, bytes and offsets they were), keeps
every intact batch at its offset, and rebuilds the segment's indexes.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sluice.storage.damage import DAMAGE_FILE, Damaged, read_damage, scan_segment, write_damage
from sluice.storage.files import sync_directory, write_file
from sluice.storage.index import OffsetIndex, TimeIndex
from sluice.storage.reserve import RESERVE_BYTES, reserved_tail, scan_limit
from sluice.storage.segment import FileSegment

_LOG_FILE = re.compile(r"^(\d{20})\.log$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
QUARANTINE_DIR = "quarantine"


@dataclass(slots=True)
class DamageReport:
    start: int
    end: int
    first_offset: int
    end_offset: int


@dataclass(slots=True)
class SegmentReport:
    path: Path
    base_offset: int
    size: int
    batches: int = 0
    records: int = 0
    next_offset: int = 0
    damaged: list[DamageReport] = field(default_factory=list)
    index_problems: list[str] = field(default_factory=list)
    incomplete_tail: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)


@dataclass(slots=True)
class PartitionReport:
    topic: str
    partition: int
    directory: Path
    segments: list[SegmentReport] = field(default_factory=list)
    # (first missing offset, first offset after) of every hole in the offsets; compaction makes these.
    gaps: list[tuple[int, int]] = field(default_factory=list)
    recorded_damage: int = 0

    @property
    def ok(self) -> bool:
        return not any(s.damaged or s.index_problems for s in self.segments)


def partition_dirs(data_dir: Path, topic: str | None = None) -> list[tuple[str, int, Path]]:
    found = []
    for path in data_dir.iterdir():
        match = _PARTITION_DIR.match(path.name)
        wanted = match is not None and (topic is None or match.group(1) == topic)
        if wanted and path.is_dir() and not path.name.endswith(".deleting"):
            found.append((match.group(1), int(match.group(2)), path))
    return sorted(found)


def _log_files(directory: Path) -> list[tuple[int, Path]]:
    return sorted(
        (int(m.group(1)), directory / name) for name in os.listdir(directory) if (m := _LOG_FILE.match(name))
    )


def _zero_length_at(fd: int, position: int) -> bool:
    """Whether the batch length field at `position` (after the base offset) reads zero."""
    return os.pread(fd, 4, position + 8) in (b"\0\0\0\0", b"")


def verify_segment(path: Path, base_offset: int, offset_limit: int | None) -> SegmentReport:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        report = SegmentReport(path, base_offset, size, next_offset=base_offset)
        boundaries: dict[int, int] = {}
        scan_end = scan_limit(fd, 0, size)  # a reserving file's trailing hole holds no batch
        for found in scan_segment(fd, scan_end, base_offset, offset_limit):
            if isinstance(found, Damaged):
                if offset_limit is None and size % RESERVE_BYTES == 0 and _zero_length_at(fd, found.start):
                    # A running broker's active segment: its batches end where its reserved space starts,
                    # and what its appends write there meanwhile is not for this read to judge.
                    break
                reserved = reserved_tail(fd, found.start, size) if found.end >= scan_end else 0
                if found.end >= scan_end and (offset_limit is None or reserved == size - found.start):
                    # Space the active segment reserved (or a sealed one whose cut a crash undid) is no
                    # data; what comes before it is a torn write.
                    report.incomplete_tail = size - found.start - reserved
                    break
                end_offset = offset_limit if found.end >= scan_end else _base_at(fd, found.end)
                report.damaged.append(
                    DamageReport(found.start, found.end, report.next_offset, end_offset or 0)
                )
                report.next_offset = end_offset or report.next_offset
                continue
            header = found.header
            if header.base_offset > report.next_offset:
                report.gaps.append((report.next_offset, header.base_offset))
            boundaries[found.position] = header.base_offset
            report.batches += 1
            report.records += header.record_count
            report.next_offset = header.last_offset + 1
    finally:
        os.close(fd)
    report.index_problems = _index_problems(path, base_offset, size, boundaries, report)
    return report


def _base_at(fd: int, position: int) -> int:
    return int.from_bytes(os.pread(fd, 8, position), "big", signed=True)


def _index_problems(
    path: Path, base_offset: int, size: int, boundaries: dict[int, int], report: SegmentReport
) -> list[str]:
    problems = []
    offset_index = OffsetIndex.load(path.with_suffix(".index"), base_offset)
    time_index = TimeIndex.load(path.with_suffix(".timeindex"), base_offset)
    if offset_index is None or time_index is None:
        # Missing (the active segment's are written when it is sealed or closed) or torn by a crash:
        # recovery rebuilds them, as Kafka does, so this is not damage.
        return []
    problem = offset_index.problem(size, thorough=True)
    if problem:
        problems.append(f"{path.with_suffix('.index').name}: {problem}")
    else:
        for n in range(len(offset_index)):
            offset, position = offset_index.entry(n)
            if boundaries.get(position) != offset:
                problems.append(
                    f"{path.with_suffix('.index').name}: entry {n} ({offset} at byte {position}) is not a batch"
                )
                break
    problem = time_index.problem(report.next_offset, thorough=True)
    if problem:
        problems.append(f"{path.with_suffix('.timeindex').name}: {problem}")
    return problems


def verify_partition(topic: str, partition: int, directory: Path) -> PartitionReport:
    report = PartitionReport(topic, partition, directory, recorded_damage=len(read_damage(directory)))
    try:
        logs = _log_files(directory)
    except FileNotFoundError:  # a running broker deleted the topic meanwhile
        return report
    previous_end: int | None = None
    for n, (base, path) in enumerate(logs):
        limit = logs[n + 1][0] if n + 1 < len(logs) else None
        try:
            segment = verify_segment(path, base, limit)
        except FileNotFoundError:
            # A running broker's retention or DeleteRecords removed it after it was listed: what is left
            # starts later, which is not a gap in the data.
            previous_end = None
            continue
        report.segments.append(segment)
        expected = base if previous_end is None else previous_end
        for gap in ([(expected, base)] if base > expected else []) + segment.gaps:
            if report.gaps and report.gaps[-1][1] == gap[0]:
                gap = (report.gaps.pop()[0], gap[1])  # a hole across a segment boundary is one gap
            report.gaps.append(gap)
        previous_end = segment.next_offset
    return report


def verify_data_dir(data_dir: Path, topic: str | None = None) -> list[PartitionReport]:
    return [verify_partition(t, p, d) for t, p, d in partition_dirs(data_dir, topic)]


@dataclass(slots=True)
class RepairReport:
    directory: Path
    quarantined: list[tuple[str, DamageReport]] = field(default_factory=list)
    rebuilt_indexes: int = 0


def repair_data_dir(data_dir: Path, topic: str | None = None) -> list[RepairReport]:
    """Quarantine damaged ranges and rebuild indexes; raises BlockingIOError while a broker holds the lock."""
    lock_fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return [_repair_partition(d) for _, _, d in partition_dirs(data_dir, topic)]
    finally:
        os.close(lock_fd)


def _repair_partition(directory: Path) -> RepairReport:
    report = RepairReport(directory)
    logs = _log_files(directory)
    quarantine = directory / QUARANTINE_DIR
    for n, (base, path) in enumerate(logs):
        limit = logs[n + 1][0] if n + 1 < len(logs) else None
        segment = verify_segment(path, base, limit)
        if segment.damaged or segment.incomplete_tail:
            ranges = list(segment.damaged)
            if segment.incomplete_tail:
                start = segment.size - segment.incomplete_tail
                ranges.append(DamageReport(start, segment.size, segment.next_offset, segment.next_offset))
            _quarantine(path, ranges, quarantine)
            report.quarantined += [(path.name, r) for r in ranges]
        if segment.damaged or segment.incomplete_tail or segment.index_problems:
            rebuilt = FileSegment(directory, base, _index_interval(directory), create=False)
            try:
                rebuilt.recover(limit)
                if limit is not None:
                    rebuilt.seal()
                rebuilt.write_indexes(sync=True)
            finally:
                rebuilt.close()
            report.rebuilt_indexes += 1
    if report.quarantined:
        # The damaged bytes are gone from the logs: their offsets are now a gap, listed in the manifest.
        repaired = {int(Path(name).stem) for name, _ in report.quarantined}
        write_damage(directory, [d for d in read_damage(directory) if d.segment not in repaired])
        sync_directory(directory)
    return report


def _index_interval(directory: Path) -> int:
    # Index density only affects lookup speed; the topic's own setting applies again at the next roll.
    return 4096


def _quarantine(path: Path, ranges: list[DamageReport], quarantine: Path) -> None:
    quarantine.mkdir(exist_ok=True)
    manifest_path = quarantine / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else []
    data = path.read_bytes()
    kept = bytearray()
    position = 0
    for damage in sorted(ranges, key=lambda r: r.start):
        kept += data[position : damage.start]
        name = f"{path.name}.{damage.start}-{damage.end}"
        write_file(quarantine / name, data[damage.start : damage.end], sync=True)
        manifest.append(
            {
                "file": name,
                "segment": path.name,
                "start": damage.start,
                "end": damage.end,
                "first_offset": damage.first_offset,
                "end_offset": damage.end_offset,
            }
        )
        position = damage.end
    kept += data[position:]
    write_file(quarantine / "manifest.json", json.dumps(manifest, indent=1).encode(), sync=True)
    sync_directory(quarantine)
    # The quarantined copies are durable before the log loses them.
    temporary = path.with_name(path.name + ".repair.tmp")
    write_file(temporary, bytes(kept), sync=True)
    os.replace(temporary, path)
    sync_directory(path.parent)


__all__ = ["DAMAGE_FILE", "PartitionReport", "RepairReport", "repair_data_dir", "verify_data_dir"]
