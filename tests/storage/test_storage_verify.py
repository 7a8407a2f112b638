"""`sluice storage verify` and `sluice storage repair` on real data directories."""

from __future__ import annotations

import json
from pathlib import Path

from storage_batches import make_batch, values_of
from test_storage_corruption import flip, make_partition, readable, write_gapped_segments
from typer.testing import CliRunner

from sluice.cli import app
from sluice.protocol.records import parse_batch_header
from sluice.storage import DiskStorage

runner = CliRunner()


def verify(data_dir: Path, *extra: str) -> tuple[int, list[dict]]:  # type: ignore[type-arg]
    result = runner.invoke(app, ["storage", "verify", "--data-dir", str(data_dir), "--json", *extra])
    return result.exit_code, json.loads(result.stdout)


def test_verify_passes_an_intact_data_dir_and_reports_its_shape(tmp_path: Path) -> None:
    contents, _ = make_partition(tmp_path / "data", 300, segment_bytes=20_000)
    code, reports = verify(tmp_path / "data")
    assert code == 0
    [report] = reports
    assert report["ok"] and report["topic"] == "t" and report["partition"] == 0
    assert sum(s["batches"] for s in report["segments"]) == len(contents) == 300
    assert report["gaps"] == []
    text = runner.invoke(app, ["storage", "verify", "--data-dir", str(tmp_path / "data")])
    assert text.exit_code == 0 and "t-0: ok" in text.stdout


def test_verify_reports_crc_failures_with_offsets_and_index_problems(tmp_path: Path) -> None:
    _, partition = make_partition(tmp_path / "data", 300, segment_bytes=20_000)
    logs = sorted(partition.glob("*.log"))
    lost = batch_covering(logs[1], 1000)
    flip(logs[1], 1000)
    index = logs[2].with_suffix(".index")
    damaged_index = bytearray(index.read_bytes())
    damaged_index[7] ^= 0x01  # the first entry's position no longer lands on a batch
    index.write_bytes(damaged_index)
    code, reports = verify(tmp_path / "data", "--topic", "t")
    assert code == 1
    [report] = reports
    assert not report["ok"]
    [damage] = [d for s in report["segments"] for d in s["damaged"]]
    assert (damage["first_offset"], damage["end_offset"]) == (lost, lost + 5)
    problems = [p for s in report["segments"] for p in s["index_problems"]]
    assert len(problems) == 1 and index.name in problems[0]
    text = runner.invoke(app, ["storage", "verify", "--data-dir", str(tmp_path / "data")])
    assert text.exit_code == 1
    assert f"offsets {lost}..{lost + 4}" in text.stdout and "DAMAGED" in text.stdout


def batch_covering(log_path: Path, position: int) -> int:
    """Base offset of the batch holding byte `position` of a segment file."""
    data = log_path.read_bytes()
    at = 0
    while True:
        header = parse_batch_header(data, at)
        if at + header.size > position:
            return header.base_offset
        at += header.size


def test_verify_lists_offset_gaps_without_failing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_gapped_segments(data_dir / "t-0")
    code, [report] = verify(data_dir)
    assert code == 0
    assert [tuple(g) for g in report["gaps"]] == [
        (2, 3),
        (5, 9),
        (11, 12),
        (14, 25),
        (27, 40),
        (42, 50),
        (54, 70),
    ]


def test_repair_quarantines_damage_and_keeps_every_intact_batch_at_its_offset(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    contents, partition = make_partition(data_dir, 300, segment_bytes=20_000)
    logs = sorted(partition.glob("*.log"))
    flip(logs[1], 1000)
    flip(logs[3], 5000)
    storage = DiskStorage(data_dir)  # a running broker holds the lock: repair refuses
    refused = runner.invoke(app, ["storage", "repair", "--data-dir", str(data_dir)])
    assert refused.exit_code == 1
    storage.close()
    result = runner.invoke(app, ["storage", "repair", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((partition / "quarantine" / "manifest.json").read_text())
    assert len(manifest) == 2
    for entry in manifest:
        assert (partition / "quarantine" / entry["file"]).stat().st_size == entry["end"] - entry["start"]
    code, [report] = verify(data_dir)
    assert code == 0, report
    storage = DiskStorage(data_dir)
    survivors = readable(storage.log("t", 0))
    assert len(contents) - len(survivors) == 2
    assert all(survivors[base] == contents[base] for base in survivors)
    quarantined = {entry["first_offset"] for entry in manifest}
    assert quarantined == set(contents) - set(survivors)
    batch, header = make_batch(values_of(1))
    assert storage.log("t", 0).append(batch, header, append_time_ms=0) == max(contents) + 5
    storage.close()


def test_verify_beside_a_running_broker_that_produces_rolls_and_deletes(tmp_path: Path) -> None:
    """Read-only and safe while the broker runs: segments being appended, rolled and deleted by retention
    under it are not reported as damage, and verify never fails on a file that vanished."""
    import threading

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from sluice.testing import BrokerProcess

    config = tmp_path / "broker.yaml"
    config.write_text("retention_check_interval_ms: 100\n")
    proc = BrokerProcess(tmp_path / "data", config=config).start()
    stop = threading.Event()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        configs = {"segment.bytes": "20000", "retention.bytes": "60000"}
        admin.create_topics([NewTopic("busy", 1, 1, config=configs)])["busy"].result(timeout=30)
        sent = []

        def keep_producing() -> None:
            producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 2})
            while not stop.is_set():
                for _ in range(200):
                    producer.produce("busy", b"v" * 100)
                producer.flush(10)
                sent.append(200)

        writer = threading.Thread(target=keep_producing)
        writer.start()
        runs = 0
        while sum(sent) < 6000 or runs < 5:
            code, reports = verify(tmp_path / "data", "--topic", "busy")
            assert code == 0, reports
            [report] = reports
            assert report["ok"] and report["segments"]
            runs += 1
        stop.set()
        writer.join(30)
        assert len(list((tmp_path / "data" / "busy-0").glob("*.log"))) < sum(sent) * 100 // 20000
    finally:
        stop.set()
        proc.stop()


def test_verify_and_repair_explain_bad_arguments(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["storage", "verify", "--data-dir", str(tmp_path / "nowhere")])
    assert missing.exit_code == 1 and "is not a directory" in " ".join(missing.output.split())
    make_partition(tmp_path / "data", 10)
    unknown = runner.invoke(
        app, ["storage", "verify", "--data-dir", str(tmp_path / "data"), "--topic", "nope"]
    )
    assert unknown.exit_code == 1 and "no partitions of topic 'nope'" in " ".join(unknown.output.split())
    repair = runner.invoke(app, ["storage", "repair", "--data-dir", str(tmp_path / "nowhere")])
    assert repair.exit_code == 1 and "is not a directory" in " ".join(repair.output.split())
    assert not (tmp_path / "nowhere").exists()
