"""A broker for share-group tests: record locks may be as short as a second (Kafka's upstream client CI sets
group.share.min.record.lock.duration.ms=1000 too), so lock expiry is seen in seconds, not half a minute."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from share_helpers import share_config

from sluice.testing import BrokerProcess


@pytest.fixture(scope="session")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("share")
    proc = BrokerProcess(root / "data", config=share_config(root), admin=True).start()
    yield proc
    proc.stop()
