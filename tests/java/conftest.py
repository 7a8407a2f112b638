"""Fixtures for the official Java client tests: a fast-rebalancing broker, and one SluiceJavaClient JVM per
kafka-clients version (every test that takes `java` runs once per version)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The group tests' members and ledger are reused here, so Java and Python members can share a group.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "groups"))

from group_helpers import fast_config
from java_driver import VERSIONS, JavaClient, build

from sluice.testing import BrokerProcess


@pytest.fixture(scope="session")
def java_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The group tests' fast settings: rebalances and KIP-848 heartbeats take fractions of a second."""
    root = tmp_path_factory.mktemp("java-broker")
    proc = BrokerProcess(root / "data", config=fast_config(root)).start()
    yield proc
    proc.stop()


@pytest.fixture
def java_bootstrap(java_broker: BrokerProcess) -> str:
    return java_broker.bootstrap


@pytest.fixture(scope="session")
def java_classpaths() -> dict[str, str]:
    """Jars fetched and the driver compiled for every version, once, before the first JVM starts."""
    if shutil.which("javac") is None:
        pytest.skip("a JDK (javac) is needed for the Java client tests")
    return build(VERSIONS)


@pytest.fixture(scope="session", params=VERSIONS, ids=[f"kafka-clients-{v}" for v in VERSIONS])
def java(request: pytest.FixtureRequest, java_classpaths: dict[str, str], java_broker: BrokerProcess,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaClient]:
    version: str = request.param
    log = tmp_path_factory.mktemp(f"java-{version}") / "stderr.log"
    client = JavaClient(version, java_classpaths[version], java_broker.bootstrap, log)
    yield client
    client.close()
