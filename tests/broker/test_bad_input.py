"""Hostile and broken input: the broker closes the connection or answers the right error code, keeps serving
everybody else, keeps its memory bounded, and loses nothing it acknowledged."""

from __future__ import annotations

import socket
import struct
import time
import zlib

import pytest

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.protocol.records import Record, encode_batch
from sluice.testing import BrokerProcess


def connection_closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def still_serving(bootstrap: str) -> bool:
    with WireClient.connect(bootstrap) as client:
        response = client.call("ApiVersions", 3, client.request_class("ApiVersions")(client_software_name="t"))
        return response.error_code == 0 and len(response.api_keys) > 10


def raw(bootstrap: str) -> socket.socket:
    host, _, port = bootstrap.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=10)


@pytest.mark.parametrize("prefix", [-1, -(2**31), 0, 2**31 - 1, 200 * 1024 * 1024])
def test_impossible_length_prefix_closes_the_connection(bootstrap: str, prefix: int) -> None:
    sock = raw(bootstrap)
    sock.sendall(struct.pack(">i", prefix) + b"\x00" * 16)
    assert connection_closed(sock)
    assert still_serving(bootstrap)


def test_truncated_body_then_hangup_is_harmless(bootstrap: str) -> None:
    sock = raw(bootstrap)
    sock.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x03")
    sock.close()
    assert still_serving(bootstrap)


@pytest.mark.parametrize(
    "body",
    [
        struct.pack(">hhi", 999, 0, 1) + b"\xff\xff",  # unknown API key
        struct.pack(">hhi", 3, 99, 1) + b"\xff\xff",  # Metadata version that does not exist
        struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\x00" + b"\xff\xff\xff\xff\xff\xff",  # bad varint in flexible body
        struct.pack(">hhi", 0, 9, 1) + b"\xff\xff\x00" + b"\x00\xff\xff",  # produce, truncated mid-field
        b"\x00\x03",  # shorter than a header
    ],
    ids=["unknown-api", "unknown-version", "bad-varint", "truncated-field", "short-header"],
)
def test_malformed_request_closes_only_that_connection(bootstrap: str, body: bytes) -> None:
    bystander = WireClient.connect(bootstrap)
    sock = raw(bootstrap)
    sock.sendall(struct.pack(">i", len(body)) + body)
    assert connection_closed(sock)
    metadata = bystander.call("Metadata", 12, bystander.request_class("Metadata")(topics=None))
    assert metadata.brokers and metadata.brokers[0].port == int(bootstrap.rsplit(":", 1)[1])
    bystander.close()


def test_unsupported_api_versions_version_gets_a_v0_answer(bootstrap: str) -> None:
    with WireClient.connect(bootstrap) as client:
        body = struct.pack(">hhi", 18, 99, 7) + b"\xff\xff" + b"\x00\x00\x00"
        client.send_frame(body)
        reply = client.recv_frame()
    (correlation_id, error_code) = struct.unpack_from(">ih", reply)
    assert correlation_id == 7
    assert error_code == ErrorCode.UNSUPPORTED_VERSION
    (count,) = struct.unpack_from(">i", reply, 6)
    keys = [struct.unpack_from(">hhh", reply, 10 + 6 * i) for i in range(count)]
    assert (18, 0, 4) in keys


def produce(client: WireClient, topic: str, records: bytes, version: int = 9, acks: int = -1) -> tuple[int, int]:
    cls = client.request_class("Produce")
    request = cls(acks=acks, timeout_ms=10000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[cls.PartitionProduceData(index=0, records=records)])])
    response = client.call("Produce", version, request)
    part = response.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def create(client: WireClient, topic: str, configs: dict[str, str] | None = None) -> None:
    cls = client.request_class("CreateTopics")
    request = cls(topics=[cls.CreatableTopic(name=topic, num_partitions=1, replication_factor=1, configs=[
        cls.CreateableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])], timeout_ms=10000)
    result = client.call("CreateTopics", 7, request).topics[0]
    assert result.error_code == 0, result.error_message


def batch(values: list[bytes], compression: int = 0) -> bytes:
    records = [Record(i, 0, None, v, []) for i, v in enumerate(values)]
    return encode_batch(records, base_timestamp=int(time.time() * 1000), compression=compression)


def test_produce_errors_carry_kafka_codes_and_nothing_acknowledged_is_lost(bootstrap: str, topic_name: str) -> None:
    with WireClient.connect(bootstrap) as client:
        create(client, topic_name, {"max.message.bytes": "2000"})
        assert produce(client, topic_name, batch([b"first"])) == (0, 0)

        corrupt = bytearray(batch([b"x" * 10]))
        corrupt[-1] ^= 0xFF
        assert produce(client, topic_name, bytes(corrupt))[0] == ErrorCode.CORRUPT_MESSAGE
        assert produce(client, topic_name, batch([b"y" * 5000]))[0] == ErrorCode.MESSAGE_TOO_LARGE
        assert produce(client, topic_name, b"\x00" * 30)[0] == ErrorCode.CORRUPT_MESSAGE
        assert produce(client, "no-such-topic-" + topic_name, batch([b"z"]))[0] in (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,)
        assert produce(client, "bad/name", batch([b"z"]))[0] in (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION)
        old_format = bytearray(batch([b"v"]))
        old_format[16] = 1
        assert produce(client, topic_name, bytes(old_format))[0] == ErrorCode.UNSUPPORTED_VERSION
        assert produce(client, topic_name, batch([b"second"])) == (0, 1)

        fetch_cls = client.request_class("Fetch")
        fetch = fetch_cls(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[fetch_cls.FetchTopic(
            topic=topic_name, partitions=[fetch_cls.FetchPartition(partition=0, fetch_offset=0,
                                                                   partition_max_bytes=1 << 20)])])
        data = client.call("Fetch", 11, fetch).responses[0].partitions[0]
        assert data.high_watermark == 2
        assert b"first" in bytes(data.records) and b"second" in bytes(data.records)


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state", "__share_group_state"])
def test_clients_cannot_write_the_brokers_own_state_topics(bootstrap: str, topic: str) -> None:
    """As Kafka's ReplicaManager: INVALID_TOPIC_EXCEPTION, and nothing lands in the coordinators' logs."""
    with WireClient.connect(bootstrap) as client:
        assert produce(client, topic, batch([b"junk"]))[0] == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_invalid_acks_and_transactional_produce_are_refused(bootstrap: str, topic_name: str) -> None:
    with WireClient.connect(bootstrap) as client:
        create(client, topic_name)
        assert produce(client, topic_name, batch([b"a"]), acks=5)[0] == ErrorCode.INVALID_REQUIRED_ACKS


def test_compression_bomb_keeps_memory_bounded(tmp_path, topic_name: str) -> None:
    # 512 MiB of zeros in a gzip batch: the broker validates the CRC and stores bytes, it never inflates them.
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\x00" * (1 << 20)
    payload = b"".join(compressor.compress(chunk) for _ in range(512)) + compressor.flush()
    with BrokerProcess(tmp_path / "bomb") as proc, WireClient.connect(proc.bootstrap) as client:
        create(client, topic_name, {"max.message.bytes": str(4 << 20)})
        before = proc.rss_bytes()
        code, _ = produce(client, topic_name, _bomb_batch(payload))
        assert code in (0, ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
        assert proc.rss_bytes() - before < 64 * 1024 * 1024
        assert produce(client, topic_name, batch([b"after the bomb"], compression=1))[0] == 0
        assert still_serving(proc.bootstrap)


def _bomb_batch(compressed_records: bytes) -> bytes:
    import crc32c

    attributes = 1  # gzip
    body = struct.pack(">hiqqqhii", attributes, 99, 0, 0, -1, -1, -1, 100) + compressed_records
    crc = crc32c.crc32c(body)
    after_length = struct.pack(">ib", -1, 2) + struct.pack(">I", crc) + body
    return struct.pack(">qi", 0, len(after_length)) + after_length


def test_many_garbage_connections_leave_the_broker_healthy(tmp_path) -> None:
    with BrokerProcess(tmp_path / "garbage") as proc:
        start_rss = proc.rss_bytes()
        for i in range(200):
            sock = raw(proc.bootstrap)
            sock.sendall(struct.pack(">i", 50_000_000) + bytes([i % 256]) * 4096)
            sock.close()
        assert still_serving(proc.bootstrap)
        assert proc.rss_bytes() - start_rss < 64 * 1024 * 1024
