"""The console with a sluice broker's admin API, in a real headless Chromium: a running group rewound live
(its members re-read from the new offsets without being stopped), and share groups (KIP-932) made by
confluent-kafka's ShareConsumer, shown with their members and, per share-partition, start offset, lag and the
records acquired, acknowledged and archived (a console without the admin API shows what Kafka's protocol
gives). One broker for the module."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer
from console_helpers import ConsoleThread
from test_console_pages import cell_texts, committed, produce

from sluice.console.app import ConsoleConfig
from sluice.testing import BrokerProcess, create_topic, free_port


class Member:
    """A subscribed confluent-kafka consumer polling in a thread, auto-committing, recording what it reads."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 100,
            }
        )
        self.consumer.subscribe([topic])
        self.seen: list[tuple[int, int]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    self.seen.append((msg.partition(), msg.offset()))
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


def wait_until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("console-admin"), admin=True).start()
    yield proc
    proc.stop()


def test_a_running_group_is_rewound_live_from_the_console(
    page: Any, admin_broker: BrokerProcess, shots: Path
) -> None:
    broker = admin_broker
    console = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": broker.bootstrap}, port=free_port(), admin_url=broker.admin_url)
    ).start()
    member = None
    try:
        topic = create_topic(broker.bootstrap, partitions=2, name="rewound")
        produce(broker.bootstrap, topic, [{"value": b"m%d" % i, "partition": i % 2} for i in range(40)])
        member = Member(broker.bootstrap, "live-group", topic)
        wait_until(
            lambda: len(member.seen) == 40 and committed(broker.bootstrap, "live-group", topic, 2) == [20, 20]
        )

        page.goto(console.url + "/groups/live-group")
        assert page.inner_text("#group-state") == "Stable"
        assert page.is_checked("#reset-form input[name=live]")  # a running group: live by default
        page.select_option("#reset-form select[name=kind]", "offset")
        page.fill("#reset-form input[name=offset]", "15")
        page.click("#reset-form button[type=submit]")
        page.wait_for_selector("#reset-table")
        assert "live rewind" in page.inner_text("#reset-plan")
        assert [(r[1], r[2], r[3]) for r in cell_texts(page, "#reset-table")] == [
            ("0", "20", "15"),
            ("1", "20", "15"),
        ]
        assert committed(broker.bootstrap, "live-group", topic, 2) == [20, 20]
        page.screenshot(path=shots / "sluice-group-live-rewind.png", full_page=True)

        mark = len(member.seen)
        page.click("#reset-execute")
        page.wait_for_selector("#reset-done")
        # The member, never stopped, reads offsets 15..19 of each partition again, and only those.
        wait_until(lambda: len(member.seen) >= mark + 10)
        time.sleep(0.5)
        again = sorted(member.seen[mark:])
        assert again == [(p, o) for p in (0, 1) for o in range(15, 20)]
    finally:
        if member is not None:
            member.stop()
        console.stop()


def hold_some(message: Any) -> AcknowledgeType | None:
    """Partition 0: 0-1 and 8-9 held, 2-5 accepted, 6-7 rejected; partition 1: all accepted."""
    if message.partition() == 1 or 2 <= message.offset() <= 5:
        return AcknowledgeType.ACCEPT
    if message.offset() in (6, 7):
        return AcknowledgeType.REJECT
    return None


def test_share_groups_listed_and_shown_with_their_records(
    admin_broker: BrokerProcess, page: Any, share_member: Any, shots: Path
) -> None:
    bootstrap = admin_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2, name="jobs")
    member = share_member(bootstrap, "workers", [topic], client_id="console-worker")
    # Both share-partitions started before there are records, so each starts at offset 0. In explicit mode the
    # consumer refuses to poll again while records of its last poll are unacknowledged, so the held records
    # (partition 0's) must all be in the last poll: partition 1's are produced and taken first, then partition
    # 0's ten, one batch, which one poll acquires whole. (Produced together, a poll could end with partition 0
    # alone when its records were written first.)
    member.started(topic, partitions=2)
    produce(bootstrap, topic, [{"value": b"job%d" % i, "partition": 1} for i in range(10)])
    member.take(10, hold_some)
    produce(bootstrap, topic, [{"value": b"job%d" % i, "partition": 0} for i in range(10)])
    member.take(10, hold_some)

    with_admin = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port(), admin_url=admin_broker.admin_url)
    ).start()
    plain = ConsoleThread(ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port())).start()
    nobody_home = f"http://127.0.0.1:{free_port()}"
    unreachable = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": bootstrap}, port=free_port(), admin_url=nobody_home)
    ).start()
    try:
        page.goto(with_admin.url + "/groups?q=workers")
        rows = cell_texts(page, "#groups-table")
        assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
            ("workers", "Stable", "simple", "share", "1", "4")
        ]
        page.screenshot(path=shots / "sluice-share-groups.png", full_page=True)

        page.click("text=workers")
        page.wait_for_selector("#share-partitions-table")
        [shown] = cell_texts(page, "#members-table")
        assert shown[0] == "console-worker" and shown[2].endswith("127.0.0.1")
        assert page.locator("#members-table .chip").all_inner_texts() == [f"{topic}-0", f"{topic}-1"]
        # Partition 0: 0-1 and 8-9 held, 2-5 accepted, 6-7 archived, so nothing is done from offset 0 on.
        assert [r[:8] for r in cell_texts(page, "#share-partitions-table")] == [
            [topic, "0", "0", "4", "4", "4", "2", "console-worker"],
            [topic, "1", "10", "0", "0", "0", "0", "console-worker"],
        ]
        assert page.inner_text("#total-lag") == "4"
        page.screenshot(path=shots / "sluice-share-group.png", full_page=True)

        # Without the admin API the page shows what Kafka's protocol gives, and says what it cannot.
        page.goto(plain.url + "/groups/workers")
        assert [r[:8] for r in cell_texts(page, "#share-partitions-table")] == [
            [topic, "0", "0", "4", "—", "—", "—", "console-worker"],
            [topic, "1", "10", "0", "—", "—", "—", "console-worker"],
        ]
        assert "admin API" in page.inner_text("#counts-note")
        # An admin API that does not answer costs the counts, not the page.
        page.goto(unreachable.url + "/groups/workers")
        assert [r[4] for r in cell_texts(page, "#share-partitions-table")] == ["—", "—"]
        assert f"cannot reach {nobody_home}" in page.inner_text("#counts-note")

        # Gone, the member gives back what it held; the group can then be deleted from its page.
        member.close()
        page.goto(with_admin.url + "/groups/workers")
        assert page.inner_text("#group-state") == "Empty"
        assert [r[4] for r in cell_texts(page, "#share-partitions-table")] == ["0", "0"]
        page.click("button:has-text('Delete group')")
        page.wait_for_url(re.compile("/groups$"))
        assert "workers" not in page.inner_text("#groups-table")
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(f"{admin_broker.admin_url}/v1/share-groups/workers", timeout=10)
        assert gone.value.code == 404 and json.loads(gone.value.read())["error"] == "GROUP_ID_NOT_FOUND"
    finally:
        for running in (with_admin, plain, unreachable):
            running.stop()
