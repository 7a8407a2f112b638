"""A broker for share-group tests: record locks may be as short as a second (Kafka's upstream client CI sets
group.share.min.record.lock.duration.ms=1000 too), so lock expiry is seen in seconds, not half a minute."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.testing import BrokerProcess


def share_config(directory: Path, **settings: object) -> Path:
    path = directory / "broker.yaml"
    lines = {"group_share_min_record_lock_duration_ms": 1000, "group_initial_rebalance_delay_ms": 0, **settings}
    path.write_text("".join(f"{name}: {value}\n" for name, value in lines.items()))
    return path


@pytest.fixture(scope="session")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("share")
    proc = BrokerProcess(root / "data", config=share_config(root), admin=True).start()
    yield proc
    proc.stop()
