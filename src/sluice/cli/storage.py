"""`sluice storage`: verify and repair a broker's data directory (see sluice.storage.verify)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from sluice.cli.app import app
from sluice.cli.common import console, fail

storage_app = typer.Typer(help="Check and repair a broker's data directory.", no_args_is_help=True)
app.add_typer(storage_app, name="storage")

DataDir = Annotated[Path, typer.Option("--data-dir", "-d", help="The broker's data directory")]
Topic = Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic")]


def _existing(data_dir: Path) -> Path:
    if not data_dir.is_dir():
        fail(f"{data_dir} is not a directory")
    return data_dir


@storage_app.command("verify")
def storage_verify(
    data_dir: DataDir,
    topic: Topic = None,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Scan every segment (framing, CRC, offsets, indexes); exit 1 when anything is damaged. Read-only:
    safe while the broker runs."""
    from sluice.storage.verify import verify_data_dir

    reports = verify_data_dir(_existing(data_dir), topic)
    if topic is not None and not reports:
        fail(f"no partitions of topic {topic!r} in {data_dir}")
    if json_output:
        print(json.dumps([asdict(r) | {"ok": r.ok} for r in reports], default=str))
    else:
        for report in reports:
            batches = sum(s.batches for s in report.segments)
            status = "ok" if report.ok else "DAMAGED"
            print(
                f"{report.topic}-{report.partition}: {status}, {len(report.segments)} segments, {batches} batches, "
                f"{len(report.gaps)} offset gaps"
            )
            for segment in report.segments:
                for d in segment.damaged:
                    print(
                        f"  {segment.path.name}: CRC/framing failure at bytes {d.start}..{d.end}, "
                        f"offsets {d.first_offset}..{d.end_offset - 1}"
                    )
                for problem in segment.index_problems:
                    print(f"  index problem: {problem}")
                if segment.incomplete_tail:
                    print(
                        f"  {segment.path.name}: {segment.incomplete_tail} bytes of incomplete tail "
                        "(a write in progress, or torn by a crash; truncated at the next start)"
                    )
            for first, after in report.gaps:
                print(f"  gap: offsets {first}..{after - 1} absent")
    if not all(r.ok for r in reports):
        raise typer.Exit(1)


@storage_app.command("repair")
def storage_repair(data_dir: DataDir, topic: Topic = None) -> None:
    """Move damaged byte ranges into <partition>/quarantine/ and rebuild indexes; intact batches keep
    their offsets. The broker must be stopped."""
    from sluice.storage.verify import repair_data_dir

    try:
        reports = repair_data_dir(_existing(data_dir), topic)
    except BlockingIOError:
        fail(f"{data_dir} is in use by a running broker; stop it first")
    for report in reports:
        for name, d in report.quarantined:
            print(
                f"{report.directory.name}/{name}: moved bytes {d.start}..{d.end} "
                f"(offsets {d.first_offset}..{d.end_offset - 1}) to quarantine"
            )
        if report.rebuilt_indexes:
            print(f"{report.directory.name}: rebuilt {report.rebuilt_indexes} index(es)")
    console.print(f"repaired {sum(bool(r.quarantined or r.rebuilt_indexes) for r in reports)} partition(s)")
