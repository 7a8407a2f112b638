"""Segment files opened on demand through a bounded descriptor cache (storage/file_cache.py).

A broker allowed 4 open segment files serves 200 partitions of several segments each: every acknowledged
record is read back at its offset, after a clean restart and after kill -9. Running out of descriptors
answers with an error that names the limit, and changes nothing.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, decode_batch, encode_batch, iter_batches
from sluice.storage.file_cache import CachedFile, FileCache
from sluice.testing import BrokerProcess

PARTITIONS = 200
CACHE = 4


def test_a_pinned_file_is_never_closed_and_the_cache_stays_bounded(tmp_path: Path) -> None:
    cache = FileCache(2)
    files = [CachedFile(tmp_path / f"f{n}", create=True) for n in range(6)]
    pinned = cache.acquire(files[0])
    for file in files[1:]:
        with cache.use(file) as fd:
            os.pwrite(fd, file.path.name.encode(), 0)
        assert len(cache) <= 2
    assert files[0].fd == pinned  # in use the whole time: still open, still the same descriptor
    os.fstat(pinned)
    cache.release(files[0])
    for file in files:
        with cache.use(file) as fd:  # reopened on demand, data intact
            assert os.pread(fd, 8, 0) == (file.path.name.encode() if file is not files[0] else b"")
    for file in files:
        cache.close(file)
    assert len(cache) == 0


def segment_descriptors(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            name = os.path.basename(os.readlink(f"/proc/{pid}/fd/{fd}"))
            if name.endswith(".log") and name[:-4].isdigit():  # a segment, not the metadata.log journal
                count += 1
        except FileNotFoundError:
            continue
    return count


@pytest.fixture(scope="module")
def tiny_cache_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("fd-cache")
    config = root / "broker.yaml"
    config.write_text(f"open_segment_files: {CACHE}\nlog_cleaner_enable: false\n")
    with BrokerProcess(root / "data", config=config) as broker:
        yield broker


def produce_round(client: WireClient, topic: str, round_no: int, acked: dict[tuple[int, int], bytes]) -> None:
    """Three one-record batches to every partition in one request (acks=all); records what was acknowledged."""
    cls = client.request_class("Produce")
    now = int(time.time() * 1000)
    for batch_no in range(3):
        values = {p: f"{topic}/{p}/r{round_no}b{batch_no}".encode() + b"x" * 200 for p in range(PARTITIONS)}
        data = [
            cls.PartitionProduceData(
                index=p, records=encode_batch([Record(0, 0, None, values[p], [])], base_timestamp=now)
            )
            for p in range(PARTITIONS)
        ]
        request = cls(
            acks=-1, timeout_ms=30_000, topic_data=[cls.TopicProduceData(name=topic, partition_data=data)]
        )
        for part in client.call("Produce", 9, request).responses[0].partition_responses:
            assert part.error_code == ErrorCode.NONE, part.error_message
            assert (part.index, part.base_offset) not in acked, "an offset was handed out twice"
            acked[(part.index, part.base_offset)] = values[part.index]


def read_all(client: WireClient, topic: str) -> dict[tuple[int, int], bytes]:
    cls = client.request_class("Fetch")
    found: dict[tuple[int, int], bytes] = {}
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    while True:
        request = cls(
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=8 << 20,
            topics=[
                cls.FetchTopic(
                    topic=topic,
                    partitions=[
                        cls.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=64 << 10)
                        for p, o in next_offset.items()
                    ],
                )
            ],
        )
        progressed = False
        for part in client.call("Fetch", 11, request).responses[0].partitions:
            assert part.error_code == ErrorCode.NONE
            records = bytes(part.records or b"")
            for position, header in iter_batches(records):
                _, decoded = decode_batch(records, position)
                for record in decoded:
                    found[(part.partition_index, header.base_offset + record.offset_delta)] = (
                        record.value or b""
                    )
                next_offset[part.partition_index] = header.last_offset + 1
                progressed = True
        if not progressed:
            return found


def test_every_acknowledged_record_reads_back_through_four_descriptors(
    tiny_cache_broker: BrokerProcess,
) -> None:
    broker = tiny_cache_broker
    topic = "fd-cache"
    # Tiny segments, so each partition rolls several times: many more segment files than descriptors.
    broker.create_topic(topic, PARTITIONS, {"segment.bytes": "600"})
    acked: dict[tuple[int, int], bytes] = {}
    with WireClient.connect(broker.bootstrap) as client:
        produce_round(client, topic, 0, acked)
        assert read_all(client, topic) == acked
        assert broker.proc is not None
        assert segment_descriptors(broker.proc.pid) <= CACHE
    broker.kill()
    broker.restart()
    with WireClient.connect(broker.bootstrap) as client:
        assert read_all(client, topic) == acked
        produce_round(client, topic, 1, acked)
    assert broker.stop() == 0
    broker.restart()
    with WireClient.connect(broker.bootstrap) as client:
        assert read_all(client, topic) == acked
        produce_round(client, topic, 2, acked)
        assert read_all(client, topic) == acked
    segments = sum(
        1 for path in (Path(str(broker.data_dir)) / f"{topic}-0").iterdir() if path.suffix == ".log"
    )
    assert segments > 1
    assert broker.proc is not None
    assert segment_descriptors(broker.proc.pid) <= CACHE


def test_out_of_descriptors_names_the_limit_and_changes_nothing(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker, WireClient.connect(broker.bootstrap) as client:
        assert broker.proc is not None
        pid = broker.proc.pid
        original = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        metadata = client.request_class("Metadata")
        client.call("Metadata", 12, metadata(topics=[]))  # the broker has accepted this connection
        in_use = len(os.listdir(f"/proc/{pid}/fd"))
        cls = client.request_class("CreateTopics")
        request = cls(
            timeout_ms=30_000,
            topics=[cls.CreatableTopic(name="starved", num_partitions=3, replication_factor=1)],
        )
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use, original[1]))
        try:
            result = client.call("CreateTopics", 5, request).topics[0]
        except ConnectionError:
            pytest.fail("the broker dropped the connection:\n" + "".join(broker.output[-40:]))
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, original)
        assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "RLIMIT_NOFILE" in result.error_message and "ulimit -n" in result.error_message
        # Nothing half-made: with descriptors back, the same topic is created whole and works.
        assert client.call("CreateTopics", 5, request).topics[0].error_code == ErrorCode.NONE
        produce = client.request_class("Produce")
        batch = encode_batch([Record(0, 0, None, b"after", [])], base_timestamp=int(time.time() * 1000))
        answer = client.call(
            "Produce",
            9,
            produce(
                acks=-1,
                timeout_ms=30_000,
                topic_data=[
                    produce.TopicProduceData(
                        name="starved", partition_data=[produce.PartitionProduceData(index=2, records=batch)]
                    )
                ],
            ),
        )
        part = answer.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (ErrorCode.NONE, 0)
