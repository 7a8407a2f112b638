"""Pieces below the contract: config validation, index files, batch checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_batches import make_batch, values_of

from sluice.storage.batches import intact_batch_header
from sluice.storage.config import DEFAULT_TOPIC_CONFIG, TopicConfig, validate_topic_configs
from sluice.storage.index import OffsetIndex, TimeIndex


def test_defaults_are_kafkas() -> None:
    config = DEFAULT_TOPIC_CONFIG
    assert config.retention_ms == 604800000
    assert config.retention_bytes == -1
    assert config.segment_bytes == 1073741824
    assert config.segment_ms == 604800000
    assert config.max_message_bytes == 1048588
    assert config.cleanup_policy == ("delete",)
    assert config.deletes_old_segments
    assert TopicConfig.from_configs({"cleanup.policy": "compact"}).deletes_old_segments is False


@pytest.mark.parametrize(
    ("configs", "mentions"),
    [
        ({"retention.ms": "soon"}, "retention.ms"),
        ({"retention.bytes": "-2"}, "retention.bytes"),
        ({"segment.bytes": "10"}, "segment.bytes"),
        ({"segment.bytes": str(2**31)}, "segment.bytes"),
        ({"segment.ms": "0"}, "segment.ms"),
        ({"max.message.bytes": "-1"}, "max.message.bytes"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"Bad Name": "1"}, "Bad Name"),
    ],
)
def test_bad_configs_are_explained(configs: dict[str, str], mentions: str) -> None:
    problem = validate_topic_configs(configs)
    assert problem is not None and mentions in problem


def test_good_configs_pass() -> None:
    assert validate_topic_configs({}) is None
    assert (
        validate_topic_configs(
            {
                "retention.ms": "-1",
                "retention.bytes": "1000",
                "cleanup.policy": "compact,delete",
                "compression.type": "zstd",
                "segment.ms": None,  # type: ignore[dict-item]
            }
        )
        is None
    )


def test_offset_index_lookups() -> None:
    index = OffsetIndex(100)
    assert index.lookup(150) == (100, 0)
    for offset, position in [(110, 4000), (120, 8200), (135, 12500)]:
        index.append(offset, position)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 4000)
    assert index.lookup(134) == (120, 8200)
    assert index.lookup(10**9) == (135, 12500)
    assert index.lookup_position(8199) == (110, 4000)
    assert index.lookup_position(8200) == (120, 8200)
    assert index.problem(12501) is None
    assert index.problem(12500) is not None


def test_index_files_round_trip_and_drop_zero_padding(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(100)
    index.append(110, 4000)
    index.write(path, sync=False)
    assert path.read_bytes() == (10).to_bytes(4, "big") + (4000).to_bytes(4, "big")
    path.write_bytes(path.read_bytes() + bytes(8 * 50))
    loaded = OffsetIndex.load(path, 100)
    assert loaded is not None and len(loaded) == 1 and loaded.entry(0) == (110, 4000)
    path.write_bytes(path.read_bytes()[:-1])
    assert OffsetIndex.load(path, 100) is None
    assert OffsetIndex.load(tmp_path / "missing.index", 100) is None


def test_time_index_keeps_only_growing_timestamps() -> None:
    index = TimeIndex(0)
    index.maybe_append(1000, 0)
    index.maybe_append(900, 5)
    index.maybe_append(1000, 6)
    index.maybe_append(2000, 10)
    assert [index.entry(n) for n in range(len(index))] == [(1000, 0), (2000, 10)]
    assert index.lookup(999) == 0
    assert index.lookup(1500) == 0
    assert index.lookup(2000) == 10
    assert index.problem(11) is None
    assert index.problem(10) is not None


def test_intact_batch_header_checks_crc_and_length() -> None:
    batch, header = make_batch(values_of(2))
    assert intact_batch_header(batch, 0) == header
    assert intact_batch_header(batch[:-1], 0) is None
    damaged = bytearray(batch)
    damaged[-1] ^= 1
    assert intact_batch_header(damaged, 0) is None
    # The base offset is outside the CRC: rewriting it keeps the batch intact.
    moved = (999).to_bytes(8, "big") + batch[8:]
    assert intact_batch_header(moved, 0).base_offset == 999  # type: ignore[union-attr]
