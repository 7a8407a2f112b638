"""Fixtures for the compatibility tests: admin clients of each library, closed after the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient


@pytest.fixture
def kp_admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    yield admin
    admin.close()


@pytest.fixture
def ck_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})
