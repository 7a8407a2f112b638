"""A broker whose log cleaner looks for work every 100 ms, and helpers to write and read compacted topics."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compaction_helpers import CLEANER_SETTINGS

from sluice.testing import BrokerProcess


@pytest.fixture(scope="module")
def cleaner_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("cleaner-broker")
    config = root / "broker.yaml"
    config.write_text(CLEANER_SETTINGS)
    proc = BrokerProcess(root / "data", config=config).start()
    yield proc
    proc.stop()
