"""Fixtures of the registry tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sluice.testing import BrokerProcess, RegistryProcess


@pytest.fixture(scope="module")
def registry(request: pytest.FixtureRequest, broker: BrokerProcess) -> Iterator[RegistryProcess]:
    """A `sluice registry` of the module's own, primary, on a `_schemas` topic named after the module."""
    module = request.module.__name__.rpartition(".")[2].removeprefix("test_registry_")
    proc = RegistryProcess(broker.bootstrap, f"_schemas-{module}-{uuid.uuid4().hex[:8]}").start()
    proc.wait_primary()
    yield proc
    proc.stop()
