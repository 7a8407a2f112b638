"""pytest fixtures for testing your own Kafka applications against a real sluice broker (no docker).

Enable it with ``pytest -p sluice.pytest_plugin``, or ``pytest_plugins = ["sluice.pytest_plugin"]`` in
your root conftest.py (installing sluice also registers it, under the same name, as a pytest plugin, so
the fixtures are simply there; ``-p no:sluice.pytest_plugin`` turns it off). Fixtures:

``kafka_broker`` (session)
    One broker for the whole run, in a child process on an ephemeral loopback port with a fresh data
    directory. A :class:`sluice.testing.BrokerProcess`: ``.bootstrap``, ``.data_dir``,
    ``.create_topic(name=None, partitions=1, config=None)``, ``.kill()`` (SIGKILL), ``.restart()``,
    ``.admin_url`` (``/metrics`` and the admin API).
``fresh_kafka_broker`` (function)
    The same, but one per test: nothing another test did is visible.
``kafka_bootstrap``
    ``kafka_broker.bootstrap``, for code that only needs the address.
``kafka_topic``
    A new single-partition topic on ``kafka_broker``, named after the test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from sluice.testing import BrokerProcess


def _start(path: object) -> BrokerProcess:
    return BrokerProcess(path, admin=True).start()  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = _start(tmp_path_factory.mktemp("sluice-broker"))
    yield proc
    proc.stop()


@pytest.fixture
def fresh_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = _start(tmp_path_factory.mktemp("sluice-fresh-broker"))
    yield proc
    proc.stop()


@pytest.fixture
def kafka_bootstrap(kafka_broker: BrokerProcess) -> str:
    return kafka_broker.bootstrap


@pytest.fixture
def kafka_topic(kafka_broker: BrokerProcess, request: pytest.FixtureRequest) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:180]
    return kafka_broker.create_topic(f"{stem}-{id(request) % 100_000}")
