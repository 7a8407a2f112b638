"""Users and ACLs in the console, through Kafka's own admin APIs (KIP-554 SCRAM credentials, ACL APIs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from console_helpers import ConsoleThread
from test_console_pages import cell_texts

from sluice.console.app import ConsoleConfig
from sluice.testing import BrokerProcess, free_port


def test_the_page_works_on_any_cluster_that_serves_the_apis(
    tansu_console: Any, page: Any, shots: Path
) -> None:
    response = page.goto(tansu_console.url + "/security")
    assert response.status == 200
    # Tansu answers both APIs (with nothing to list): the page shows empty tables and no error.
    assert page.locator(".alert").count() == 0
    assert "No SCRAM users" in page.inner_text("#users-table")
    assert "No ACLs" in page.inner_text("#acls-table")
    page.screenshot(path=shots / "tansu-security.png", full_page=True)


def test_users_and_acls_are_listed_created_and_deleted_from_the_ui(
    page: Any, tmp_path: Path, shots: Path
) -> None:
    pytest.importorskip(
        "sluice.security.acl", reason="the broker's users and ACLs (security) are not merged yet"
    )
    config = tmp_path / "broker.yaml"
    # Plain-text clients are User:ANONYMOUS; made a super user, the console may manage ACLs without SASL.
    config.write_text("authorizer: acl\nsuper_users: [User:ANONYMOUS]\n")
    broker = BrokerProcess(tmp_path / "data", config=config).start()
    console = ConsoleThread(ConsoleConfig({"bootstrap.servers": broker.bootstrap}, port=free_port())).start()
    try:
        page.goto(console.url + "/security")
        assert page.locator(".alert-error, .alert-down").count() == 0
        page.fill("#user-form input[name=name]", "alice")
        page.select_option("#user-form select[name=mechanism]", "SCRAM-SHA-512")
        page.fill("#user-form input[name=password]", "alice-secret")
        page.click("#user-form button[type=submit]")
        page.wait_for_selector("#users-table td:has-text('alice')")
        assert [r[:3] for r in cell_texts(page, "#users-table")] == [["alice", "SCRAM-SHA-512", "8,192"]]

        page.fill("#acl-form input[name=principal]", "User:alice")
        page.select_option("#acl-form select[name=operation]", "READ")
        page.select_option("#acl-form select[name=pattern_type]", "PREFIXED")
        page.fill("#acl-form input[name=resource_name]", "orders-")
        page.click("#acl-form button[type=submit]")
        page.wait_for_selector("#acls-table td:has-text('orders-')")
        assert [r[:7] for r in cell_texts(page, "#acls-table")] == [
            ["User:alice", "allow", "read", "topic", "prefixed", "orders-", "*"]
        ]
        page.screenshot(path=shots / "sluice-security.png", full_page=True)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        every = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        assert len(admin.describe_acls(every).result(10)) == 1

        page.click("#acls-table button:has-text('Delete')")
        page.wait_for_selector("#acls-table td.empty")
        assert admin.describe_acls(every).result(10) == []
        page.click("#users-table button:has-text('Delete')")
        page.wait_for_selector("#users-table td.empty")
    finally:
        console.stop()
        broker.stop()
