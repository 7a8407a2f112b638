"""A broker tuned for group tests: no initial rebalance delay and short session timeouts allowed, so
joins, evictions and rebalances take fractions of a second instead of the production defaults."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from group_helpers import fast_config

from sluice.testing import BrokerProcess


@pytest.fixture(scope="session")
def fast_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("fast-groups")
    proc = BrokerProcess(root / "data", config=fast_config(root)).start()
    yield proc
    proc.stop()


@pytest.fixture
def fast_bootstrap(fast_broker: BrokerProcess) -> str:
    return fast_broker.bootstrap


@pytest.fixture(scope="session")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The fast group settings plus the admin listener (groups create, live rewind, /metrics)."""
    root = tmp_path_factory.mktemp("admin-groups")
    proc = BrokerProcess(root / "data", config=fast_config(root), admin=True).start()
    yield proc
    proc.stop()
