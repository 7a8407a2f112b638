"""The broker's /metrics, scraped and parsed with prometheus_client's parser while clients work."""

from __future__ import annotations

import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from sluice.client.wire import WireClient
from sluice.protocol.records import Record, encode_batch
from sluice.testing import BrokerProcess, create_topic

# Share-group locks of one second (the broker's floor lowered to allow it) and a delivery limit of 2, the
# lowest Kafka allows: a lock runs out and a record reaches its limit within a test.
SHARE_SETTINGS = """\
group_share_min_record_lock_duration_ms: 1000
group_share_record_lock_duration_ms: 1000
group_share_delivery_count_limit: 2
"""


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("metrics-data")
    config = root / "broker.yaml"
    config.write_text(SHARE_SETTINGS)
    proc = BrokerProcess(root / "data", config=config, admin=True).start()
    yield proc
    proc.stop()


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}} of one scrape."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_metrics_while_producing_and_consuming(admin_broker: BrokerProcess) -> None:
    url = admin_broker.admin_url
    assert url is not None
    topic = create_topic(admin_broker.bootstrap, partitions=2, prefix="metrics")
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap, "linger.ms": 5})
    scrapes: list[dict[str, dict[tuple[tuple[str, str], ...], float]]] = []
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            scrapes.append(scrape(url))
            stop.wait(0.01)

    thread = threading.Thread(target=scraper)
    thread.start()
    try:
        for i in range(2000):
            producer.produce(topic, value=b"v" * 50, key=str(i).encode(), partition=i % 2)
            if i % 100 == 99:  # twenty acknowledged rounds, so scrapes land between them
                assert producer.flush(30) == 0
                while len(scrapes) < i // 400 + 1:
                    stop.wait(0.01)
    finally:
        stop.set()
        thread.join()
    assert len(scrapes) >= 5  # scrapes ran while the producer did
    seen = [sc.get("sluice_topic_messages_in_total", {}).get((("topic", topic),), 0) for sc in scrapes]
    assert seen == sorted(seen) and 0 < seen[-1] <= 2000

    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": f"{topic}-g",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    got = 0
    while got < 2000:
        got += sum(1 for m in consumer.consume(1000, 5) if m.error() is None)
    consumer.commit(offsets=[TopicPartition(topic, 0, 600), TopicPartition(topic, 1, 1000)], asynchronous=False)
    consumer.close()

    samples = scrape(url)
    by_topic = (("topic", topic),)
    assert samples["sluice_topic_messages_in_total"][by_topic] == 2000
    assert samples["sluice_topic_bytes_in_total"][by_topic] >= 2000 * 50
    assert samples["sluice_topic_messages_out_total"][by_topic] >= 2000
    assert samples["sluice_topic_bytes_out_total"][by_topic] >= samples["sluice_topic_bytes_in_total"][by_topic]
    for partition in ("0", "1"):
        labels = (("partition", partition), ("topic", topic))
        assert samples["sluice_partition_high_watermark"][labels] == 1000
        assert samples["sluice_partition_log_end_offset"][labels] == 1000
        assert samples["sluice_partition_log_start_offset"][labels] == 0
        assert samples["sluice_partition_size_bytes"][labels] > 1000 * 50
    lag = samples["sluice_consumer_group_lag"]
    group = f"{topic}-g"
    assert lag[(("group", group), ("partition", "0"), ("topic", topic))] == 400
    assert lag[(("group", group), ("partition", "1"), ("topic", topic))] == 0
    assert samples["sluice_consumer_group_committed_offset"][(("group", group), ("partition", "0"),
                                                               ("topic", topic))] == 600
    produce_count = samples["sluice_request_duration_seconds_count"][(("api", "Produce"),)]
    assert produce_count >= 1
    assert samples["sluice_request_duration_seconds_bucket"][(("api", "Produce"), ("le", "+Inf"))] == produce_count
    assert samples["sluice_request_duration_seconds_count"][(("api", "Fetch"),)] >= 1
    assert samples["sluice_fsync_duration_seconds_count"][()] >= 1
    assert samples["sluice_connections"][()] >= 1
    assert samples["sluice_connections_accepted_total"][()] >= samples["sluice_connections"][()]
    assert samples["sluice_storage_free_bytes"][()] > 0
    # Counters only grow between scrapes.
    first, last = scrapes[0], samples
    for name in ("sluice_connections_accepted_total", "sluice_fsync_duration_seconds_count"):
        assert last[name][()] >= first[name][()]


def test_unknown_paths_and_bad_admin_input(admin_broker: BrokerProcess) -> None:
    url = admin_broker.admin_url
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url + "/nothing-here", timeout=10)
    assert missing.value.code == 404
    request = urllib.request.Request(url + "/v1/groups", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(request, timeout=10)
    assert bad.value.code == 400 and b"not JSON" in bad.value.read()


def test_metrics_come_back_after_kill_and_restart(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path, admin=True).start()
    try:
        topic = create_topic(proc.bootstrap, prefix="restart")
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for _ in range(10):
            producer.produce(topic, b"x")
        assert producer.flush(30) == 0
        url = proc.admin_url
        proc.kill()
        proc.restart()
        assert proc.admin_url == url  # same port again
        samples = scrape(url)
        labels = (("partition", "0"), ("topic", topic))
        # Counters restart from zero; the log's own state survives.
        assert samples["sluice_partition_high_watermark"][labels] == 10
        assert (("topic", topic),) not in samples.get("sluice_topic_messages_in_total", {})
    finally:
        proc.stop()


def test_a_taken_metrics_port_is_a_clear_error(admin_broker: BrokerProcess) -> None:
    port = admin_broker.admin_url.rsplit(":", 1)[1]
    result = subprocess.run([sys.executable, "-m", "sluice", "broker", "--listen", "127.0.0.1:0", "--data-dir",
                             ":memory:", "--metrics-listen", f"127.0.0.1:{port}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "address already in use" in (result.stdout + result.stderr).lower()
    bad = subprocess.run([sys.executable, "-m", "sluice", "broker", "--data-dir", ":memory:", "--metrics-listen",
                          "nowhere"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "HOST:PORT" in bad.stderr


def test_requests_that_arrive_together_share_one_fsync(admin_broker: BrokerProcess) -> None:
    """Twenty acks=1 Produce requests in one write are answered after one fsync, not one for the first
    and another for the rest (the group commit starts once the loop has read them all)."""
    url = admin_broker.admin_url
    assert url is not None
    topic = create_topic(admin_broker.bootstrap, partitions=1, prefix="together")
    with WireClient.connect(admin_broker.bootstrap) as client:
        cls = client.request_class("Produce")

        def produce_frame(n: int) -> bytes:
            records = encode_batch(
                [Record(0, 0, None, b"v%d" % n, [])], base_timestamp=int(time.time() * 1000)
            )
            partition = cls.PartitionProduceData(index=0, records=records)
            request = cls(
                acks=1,
                timeout_ms=10_000,
                topic_data=[cls.TopicProduceData(name=topic, partition_data=[partition])],
            )
            body = client.encode_request("Produce", 9, request)
            return struct.pack(">i", len(body)) + body

        fsyncs_per_burst: list[float] = []
        # A flush of something else (a timer's) may land in a burst: one burst without one is enough.
        for burst in range(3):
            before = scrape(url)["sluice_fsync_duration_seconds_count"][()]
            client.sock.sendall(b"".join(produce_frame(burst * 20 + n) for n in range(20)))
            for _ in range(20):
                client.recv_frame()
            fsyncs_per_burst.append(scrape(url)["sluice_fsync_duration_seconds_count"][()] - before)
            if fsyncs_per_burst[-1] == 1:
                break
    assert 1 in fsyncs_per_burst, fsyncs_per_burst
    consumer = Consumer(
        {
            "bootstrap.servers": admin_broker.bootstrap,
            "group.id": f"{topic}-g",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 60
    while len(values) < 20 * len(fsyncs_per_burst) and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, 5) if m.error() is None]
    consumer.close()
    assert values == [b"v%d" % n for n in range(20 * len(fsyncs_per_burst))]


def test_share_metrics_count_what_members_do(admin_broker: BrokerProcess, share_member: Any) -> None:
    """Share groups (KIP-932), while confluent-kafka's ShareConsumer works: records acquired, acknowledged by
    type, redelivered after a lock ran out, archived at the delivery limit; and each share-partition's start
    offset, in-flight and held records, and lag."""
    url = admin_broker.admin_url
    assert url is not None
    topic = create_topic(admin_broker.bootstrap, prefix="share-metrics")
    producer = Producer({"bootstrap.servers": admin_broker.bootstrap})
    for i in range(10):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0
    partition = (("group", "workers"), ("partition", "0"), ("topic", topic))

    def acked(samples: dict[str, Any]) -> dict[str, float]:
        return {labels[0][1]: v for labels, v in samples["sluice_share_records_acknowledged_total"].items()}

    def gauges(samples: dict[str, Any]) -> tuple[float, ...]:
        return tuple(
            samples[f"sluice_share_partition_{name}"][partition]
            for name in ("start_offset", "in_flight_records", "lag")
        )

    # 0-3 accepted, 4 released, 5 rejected, 6-9 held until their lock runs out.
    first = share_member(admin_broker.bootstrap, "workers", [topic], client_id="first")
    kinds = [AcknowledgeType.ACCEPT] * 4 + [AcknowledgeType.RELEASE, AcknowledgeType.REJECT] + [None] * 4
    first.take(10, lambda m: kinds[m.offset()])
    samples = scrape(url)
    assert samples["sluice_share_records_acquired_total"][()] == 10
    assert acked(samples) == {"accept": 4, "release": 1, "reject": 1, "gap": 0, "renew": 0}
    # Offset 4 is available again, 5 archived, 6-9 held: 5 records of 4-9 are still to be done.
    assert gauges(samples) == (4, 6, 5)
    # Within the same scrape the four held records are either still held or counted as timed out.
    held = samples["sluice_share_partition_acquired_records"][partition]
    assert held + samples["sluice_share_records_lock_timeouts_total"][()] == 4

    deadline = time.monotonic() + 15
    while scrape(url)["sluice_share_records_lock_timeouts_total"][()] < 4:
        assert time.monotonic() < deadline, "the locks did not run out"
        time.sleep(0.1)
    first.close()

    # 4 and 6-9 come again, delivered for the second time; released at the limit, they are archived.
    second = share_member(admin_broker.bootstrap, "workers", [topic], client_id="second")
    again = second.take(5, lambda m: AcknowledgeType.RELEASE)
    assert sorted((m.offset(), m.delivery_count()) for m in again) == [(o, 2) for o in (4, 6, 7, 8, 9)]
    samples = scrape(url)
    assert samples["sluice_share_records_acquired_total"][()] == 15
    assert samples["sluice_share_records_redelivered_total"][()] == 5
    assert samples["sluice_share_records_archived_at_limit_total"][()] == 5
    assert samples["sluice_share_records_lock_timeouts_total"][()] == 4
    assert acked(samples) == {"accept": 4, "release": 6, "reject": 1, "gap": 0, "renew": 0}
    assert gauges(samples) == (10, 0, 0)
    assert samples["sluice_share_partition_acquired_records"][partition] == 0
