"""Fixtures shared by the whole suite: a real sluice broker in a child process on an ephemeral port."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.testing import BrokerProcess

_names = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One durable broker for the tests that only need *a* broker (each uses its own topics)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker-data")).start()
    yield proc
    proc.stop()


@pytest.fixture
def bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{stem}-{os.getpid()}-{next(_names)}"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path
