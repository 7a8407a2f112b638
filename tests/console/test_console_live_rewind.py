"""A running group rewound from the console (sluice's live rewind, through the broker's admin API): its
members re-read from the new offsets without being stopped."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
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


def test_a_running_group_is_rewound_live_from_the_console(page: Any, tmp_path: Path, shots: Path) -> None:
    pytest.importorskip(
        "sluice.server.admin", reason="the broker's admin API (live rewind) is not merged yet"
    )
    broker = BrokerProcess(tmp_path / "data", extra_args=["--admin-listen", "127.0.0.1:0"]).start()
    wait_until(lambda: any("sluice admin listening on" in line for line in broker.output))
    admin_url = next(
        re.search(r"(http://\S+)", line).group(1) for line in broker.output if "admin listening" in line
    )
    console = ConsoleThread(
        ConsoleConfig({"bootstrap.servers": broker.bootstrap}, port=free_port(), admin_url=admin_url)
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
        broker.stop()
