"""The overview's facts (brokers, listeners, protocol version, counts, disk, live rates), sizes on disk from
the cluster's own DescribeLogDirs, running members on a group page, and a delete the user cancels."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from console_helpers import ConsoleThread
from test_console_pages import cell_texts, produce
from test_console_tansu import make_topic

from sluice.console.app import ConsoleConfig
from sluice.protocol.messages import APIS_BY_NAME
from sluice.testing import create_topic, free_port


def _reload_until(page: Any, url: str, check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        page.goto(url)
        if check():
            return
        assert time.monotonic() < deadline, page.inner_text("main")
        time.sleep(0.3)


def test_the_overview_shows_brokers_version_counts_disk_and_live_rates(
    sluice_console: Any, page: Any, bootstrap: str, topic_name: str, group_name: str, shots: Path
) -> None:
    topic = create_topic(bootstrap, partitions=2, name=topic_name)
    stop = threading.Event()

    def traffic() -> None:
        # Messages flow in and a group commits them while the console samples every half second.
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_name,
                "auto.offset.reset": "earliest",
                "auto.commit.interval.ms": 100,
            }
        )
        consumer.subscribe([topic])
        try:
            i = 0
            while not stop.is_set():
                producer.produce(topic, value=b"tick %d" % i, partition=i % 2)
                producer.poll(0)
                consumer.poll(0.01)
                i += 1
        finally:
            producer.flush(10)
            consumer.close()

    runner = threading.Thread(target=traffic, daemon=True)
    runner.start()
    try:
        url = sluice_console.url + "/"

        def both_rates_shown() -> bool:
            rates = [page.inner_text(f"#rate-{d}").removesuffix("/s").replace(",", "") for d in ("in", "out")]
            return all(r.replace(".", "").isdigit() and float(r) > 0 for r in rates)

        _reload_until(page, url, both_rates_shown)
        page.screenshot(path=shots / "sluice-overview-rates.png", full_page=True)
    finally:
        stop.set()
        runner.join(30)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=10)
    names = [n for n in metadata.topics if not n.startswith("__")]
    assert page.inner_text("#broker-count") == str(len(metadata.brokers))
    assert page.inner_text("#listeners") == bootstrap
    # The version line: the API versions the broker answers to ApiVersions, Produce and Fetch named.
    version = page.inner_text("#version")
    assert version.startswith("Kafka protocol, ") and "Produce v" in version and "Fetch v" in version
    assert page.inner_text("#topic-count") == f"{len(names):,}"
    partitions = sum(len(t.partitions) for t in metadata.topics.values())
    assert page.inner_text("#partition-count") == f"{partitions:,}"
    assert page.inner_text("#disk-used").endswith("B") and page.inner_text("#disk-used") != "—"


def test_sizes_on_disk_come_from_describe_log_dirs_without_access_to_the_data_dir(
    broker: Any, page: Any, topic_name: str
) -> None:
    if "DescribeLogDirs" not in APIS_BY_NAME:
        pytest.skip("the broker's DescribeLogDirs (compat) is not merged yet")
    topic = create_topic(broker.bootstrap, partitions=2, name=topic_name)
    produce(broker.bootstrap, topic, [{"value": b"x" * 1000, "partition": i % 2} for i in range(200)])
    # No log_dir: the console is a remote client here; only the cluster can say what is on its disk.
    console = ConsoleThread(ConsoleConfig({"bootstrap.servers": broker.bootstrap}, port=free_port())).start()
    try:
        page.goto(console.url + f"/topics?q={topic}")
        [row] = cell_texts(page, "#topics-table")
        size = row[3]
        assert size.endswith("KiB") and 195 <= float(size.split()[0]) < 400, size
        assert "does not answer DescribeLogDirs" not in page.inner_text("main")
        page.goto(console.url + f"/topics/{topic}")
        per_partition = [r[6] for r in cell_texts(page, "#partitions table")]
        assert len(per_partition) == 2 and all(s.endswith("KiB") for s in per_partition)
    finally:
        console.stop()


def test_on_a_cluster_without_describe_log_dirs_sizes_say_so(
    tansu_console: Any, tansu: Any, page: Any
) -> None:
    make_topic(tansu.bootstrap, "tansu-sized", 1)
    page.goto(tansu_console.url + "/topics?q=tansu-sized")
    assert "does not answer DescribeLogDirs" in page.inner_text("main")
    assert [row[3] for row in cell_texts(page, "#topics-table")] == ["—"]
    page.goto(tansu_console.url + "/")
    assert page.inner_text("#version").startswith("Kafka protocol, ")
    assert page.inner_text("#disk-used") == "—"


def test_a_group_page_shows_its_running_members_and_their_assignments(
    sluice_console: Any, page: Any, bootstrap: str, topic_name: str, group_name: str
) -> None:
    topic = create_topic(bootstrap, partitions=3, name=topic_name)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_name, "client.id": "shown-member"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 3:
            assert time.monotonic() < deadline
            consumer.poll(0.2)
        page.goto(sluice_console.url + f"/groups?q={group_name}")
        [row] = cell_texts(page, "#groups-table")
        assert (row[0], row[1], row[2], row[4]) == (group_name, "Stable", "range", "1")
        page.goto(sluice_console.url + f"/groups/{group_name}")
        assert page.inner_text("#group-state") == "Stable"
        [member] = cell_texts(page, "#members-table")
        assert member[0] == "shown-member"
        chips = page.eval_on_selector_all("#members-table .chip", "els => els.map(e => e.innerText)")
        assert chips == [f"{topic}-0", f"{topic}-1", f"{topic}-2"]
    finally:
        consumer.close()


def test_a_delete_the_user_cancels_deletes_nothing(
    sluice_console: Any, browser: Any, bootstrap: str, topic_name: str
) -> None:
    topic = create_topic(bootstrap, partitions=1, name=topic_name)
    context = browser.new_context()
    try:
        tab = context.new_page()
        asked: list[str] = []

        def refuse(dialog: Any) -> None:
            asked.append(dialog.message)
            dialog.dismiss()

        tab.on("dialog", refuse)
        tab.goto(sluice_console.url + f"/topics/{topic}")
        tab.click("button:has-text('Delete topic')")
        tab.wait_for_timeout(500)
        assert asked and topic in asked[0]
        assert tab.url.endswith(f"/topics/{topic}")
        assert topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    finally:
        context.close()
