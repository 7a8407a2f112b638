"""The security tests' shared broker (helpers in secure_broker.py, imported by name: conftest modules are
not importable reliably when the whole suite runs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from secure_broker import SecureBroker, start_secure_broker


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure"))
    try:
        yield broker
    finally:
        broker.process.kill()
