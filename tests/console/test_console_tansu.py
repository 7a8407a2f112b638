"""The same console against Tansu, a Kafka-compatible broker nobody here wrote: "any cluster" means it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_console_pages import cell_texts, committed


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit as a consumer that assigns rather than subscribes (Tansu's group join takes ~20 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def test_pages_produce_browse_and_reset_work_against_tansu(
    tansu_console: Any, tansu: Any, page: Any, shots: Path
) -> None:
    bootstrap = tansu.bootstrap
    make_topic(bootstrap, "tansu-orders", 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(12):
        producer.produce("tansu-orders", key=b"o%d" % i, value=json.dumps({"n": i}).encode(), partition=i % 2)
        # One batch per message: Tansu's log end is its last batch's base offset + 1, so a many-record batch
        # would show (there as in any client) fewer messages than were written.
        assert producer.flush(15) == 0

    page.goto(tansu_console.url + "/")
    assert "Cannot reach" not in page.inner_text("main")
    assert page.inner_text(".cards").count("\n") > 5
    page.screenshot(path=shots / "tansu-overview.png", full_page=True)

    page.goto(tansu_console.url + "/topics?q=tansu-orders")
    rows = cell_texts(page, "#topics-table")
    assert [(r[0], r[1], r[2]) for r in rows] == [("tansu-orders", "2", "12")]
    page.screenshot(path=shots / "tansu-topics.png", full_page=True)

    page.goto(tansu_console.url + "/topics/tansu-orders")
    assert [(r[0], r[3], r[4]) for r in cell_texts(page, "#partitions table")] == [
        ("0", "0", "6"),
        ("1", "0", "6"),
    ]
    assert len(cell_texts(page, "#messages-table")) == 12
    page.fill("form.produce input[name=key]", "from-the-browser")
    page.fill("form.produce textarea[name=value]", "hello tansu")
    page.select_option("form.produce select[name=partition]", "0")
    page.click("form.produce button[type=submit]")
    page.wait_for_selector("#produced")
    assert "partition 0 at offset 6" in page.inner_text("#produced")
    page.wait_for_selector("#messages-table td.key:has-text('from-the-browser')")
    page.screenshot(path=shots / "tansu-topic.png", full_page=True)

    page.fill("form.scan input[name=needle]", "tansu")
    page.click("form.scan button[type=submit]")
    page.wait_for_selector("#scan .scan-status:has-text('Search done')")
    assert [(r[0], r[1]) for r in cell_texts(page, "#scan-results")] == [("0", "6")]

    page.goto(tansu_console.url + "/topics/tansu-orders/messages?mode=offset&value=3&partition=1&limit=2")
    assert [r[1] for r in cell_texts(page, "#messages-table")] == ["3", "4"]

    commit_offsets(bootstrap, "tansu-group", "tansu-orders", {0: 7, 1: 6})
    page.goto(tansu_console.url + "/groups")
    assert "tansu-group" in page.inner_text("#groups-table")
    page.screenshot(path=shots / "tansu-groups.png", full_page=True)
    page.goto(tansu_console.url + "/groups/tansu-group")
    assert [(r[1], r[2], r[3]) for r in cell_texts(page, "#offsets-table")] == [
        ("0", "7", "7"),
        ("1", "6", "6"),
    ]
    page.select_option("#reset-form select[name=kind]", "earliest")
    page.click("#reset-form button[type=submit]")
    page.wait_for_selector("#reset-table")
    assert committed(bootstrap, "tansu-group", "tansu-orders", 2) == [7, 6]
    page.click("#reset-execute")
    page.wait_for_selector("#reset-done")
    assert committed(bootstrap, "tansu-group", "tansu-orders", 2) == [0, 0]
    page.goto(tansu_console.url + "/groups/tansu-group")
    assert page.inner_text("#total-lag") == "13"
    page.screenshot(path=shots / "tansu-group.png", full_page=True)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-tansu"})
    consumer.assign([TopicPartition("tansu-orders", 0, 6)])
    msg = consumer.poll(10)
    consumer.close()
    assert msg is not None and (msg.key(), msg.value()) == (b"from-the-browser", b"hello tansu")


def test_topics_are_created_and_deleted_from_the_ui_on_tansu(
    tansu_console: Any, tansu: Any, page: Any
) -> None:
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    page.goto(tansu_console.url + "/topics")
    page.click("#create-topic summary")
    page.fill("#create-topic input[name=name]", "made-in-browser")
    page.fill("#create-topic input[name=partitions]", "3")
    page.click("#create-topic button[type=submit]")
    page.wait_for_url(re.compile("/topics/made-in-browser$"))
    assert len(admin.list_topics(timeout=10).topics["made-in-browser"].partitions) == 3
    page.click("button:has-text('Delete topic')")
    page.wait_for_url(re.compile("/topics$"))
    assert "made-in-browser" not in admin.list_topics(timeout=10).topics
