"""Share groups (KIP-932) through the official Java clients of kafka-clients 4.3.0 (SluiceShareClient.java, one
JVM for the module): KafkaShareConsumer in implicit and explicit acknowledgement modes, and every Admin call of
a share group's life (listGroups for share groups, describeShareGroups, listShareGroupOffsets,
alterShareGroupOffsets, deleteShareGroupOffsets, deleteShareGroups)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from java_driver import CLASSES, JARS, JVM_FLAGS

from sluice.testing import BrokerProcess

SOURCE = Path(__file__).with_name("SluiceShareClient.java")
VERSION = "4.3.0"


class ShareJava:
    def __init__(self, classpath: str, bootstrap: str) -> None:
        self.proc = subprocess.Popen(
            ["java", *JVM_FLAGS, "-cp", classpath, "SluiceShareClient", bootstrap],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )

    def __call__(self, *words: object) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        if "error" in reply:
            raise AssertionError(f"{words[0]}: {reply['error']}: {reply['message']}")
        return reply["ok"]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def share_java(java_classpaths: dict[str, str], java_broker: BrokerProcess) -> Iterator[ShareJava]:
    out = CLASSES / f"share-{VERSION}"
    stamp = out / ".source-sha256"
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    if not (stamp.is_file() and stamp.read_text() == digest):
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-cp", f"{JARS / VERSION}/*", "-d", str(out), str(SOURCE)], check=True)
        stamp.write_text(digest)
    client = ShareJava(f"{out}:{JARS / VERSION}/*", java_broker.bootstrap)
    yield client
    client.close()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def test_kafka_share_consumer_in_both_acknowledgement_modes(share_java: ShareJava, java_broker: BrokerProcess,
                                                            topic_name: str) -> None:
    java_broker.create_topic(topic_name, partitions=2)
    produce(java_broker.bootstrap, topic_name, 300)
    share_java("group-config", "java-implicit", "share.auto.offset.reset=earliest")
    got = share_java("consume", "java-implicit", topic_name, 300, "implicit", 30)
    assert len(got) == 300 and {count for _, count in got} == {1}
    share_java("group-config", "java-explicit", "share.auto.offset.reset=earliest")
    first = share_java("consume", "java-explicit", topic_name, 300, "explicit", 30, 5)
    assert len(first) == 300
    released = sorted(offset for offset, _ in first if offset % 5 == 0)
    again = share_java("consume", "java-explicit", topic_name, len(released), "explicit", 30)
    assert sorted(offset for offset, _ in again) == released and {count for _, count in again} == {2}


def test_admin_share_group_calls_from_listing_to_deletion(share_java: ShareJava, java_broker: BrokerProcess,
                                                          topic_name: str) -> None:
    group = f"{topic_name}-admin"
    java_broker.create_topic(topic_name, partitions=2)
    produce(java_broker.bootstrap, topic_name, 100)
    share_java("group-config", group, "share.auto.offset.reset=earliest")
    assert len(share_java("consume", group, topic_name, 100, "implicit", 30)) == 100
    assert share_java("list-share-groups")[group] == "Share/Empty"
    described = share_java("describe-share-groups", group)[group]
    assert described == {"state": "Empty", "members": []}
    offsets = share_java("share-group-offsets", group)
    assert offsets == {f"{topic_name}-0": [50, 0], f"{topic_name}-1": [50, 0]}
    # Back to the start of partition 0 (the group is empty): its records are delivered again, afresh.
    share_java("alter-share-group-offsets", group, topic_name, "0=0")
    assert share_java("share-group-offsets", group)[f"{topic_name}-0"] == [0, 50]
    again = share_java("consume", group, topic_name, 50, "implicit", 30)
    assert len(again) == 50 and {count for _, count in again} == {1}
    share_java("delete-share-group-offsets", group, topic_name)
    assert share_java("share-group-offsets", group) == {}
    share_java("delete-share-groups", group)
    assert group not in share_java("list-share-groups")
