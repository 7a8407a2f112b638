"""The leanest v2 binary produce front CPython can run, for `rest_ceiling_bench.py` (a child process).

    python bench/rest_ceiling_server.py MODE PORT BOOTSTRAP TOPIC LINGER_MS

An asyncio Protocol on uvloop reading HTTP/1.1 requests by their Content-Length: no framework, no routing,
no header checks, no error answers. MODE says how far it goes with each request:

* `http`: answers at once, reading nothing of the body (the cost of HTTP itself);
* `parse`: also reads the body with msgspec, which base64-decodes every value (a request's decoding, as the
  gateway's binary produce does it);
* `produce`: also hands every value to a confluent-kafka Producer with a delivery callback that keeps the
  record's offset, and answers once all of them are acknowledged, listing each offset (the least a v2
  produce does: its answer names every record's offset). Delivery reports are served on the event loop.
* `batch`: parses as `parse` does, then writes the request's records as one v2 record batch in one Produce
  request (v3, acks all) of its own on one pipelined connection to BOOTSTRAP (a single broker), and answers
  with base offset + index: no per-record call into a client library and no per-record report. A
  prototype for measuring: no retries, no security, no idempotence; any error ends the process.

It prints "ready" once it listens. Every record goes to partition 0 of TOPIC.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import struct
import sys
import time
from typing import Any, cast

import msgspec
import uvloop
from confluent_kafka import Producer

from sluice.protocol.plain_batch import batch_of, encode_values

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.kafka.v2+json\r\nContent-Length: %d\r\n\r\n"
EMPTY_ANSWER = b'{"key_schema_id":null,"value_schema_id":null,"offsets":[]}'
OFFSET = b'{"partition":0,"offset":%d,"error_code":null,"error":null}'
ANSWER_HEAD = b'{"key_schema_id":null,"value_schema_id":null,"offsets":['
_FRAME = struct.Struct(">i")


class _Record(msgspec.Struct):
    value: bytes | None = None


class _Body(msgspec.Struct):
    records: list[_Record]


read_body = msgspec.json.Decoder(_Body).decode


def record_batch(values: list[bytes]) -> bytes:
    """One uncompressed v2 batch of null-key, header-less records (the gateway's encoder)."""
    return batch_of(b"".join(encode_values(values)), len(values), int(time.time() * 1000))


def offsets_answer(offsets: Any) -> bytes:
    body = ANSWER_HEAD + b",".join([OFFSET % offset for offset in offsets]) + b"]}"
    return HEAD % len(body) + body


class Front:
    def __init__(self, mode: str, producer: Producer, topic: str) -> None:
        self.mode, self.producer, self.topic = mode, producer, topic
        self.records_waiting = asyncio.Event()
        self.topic_field = struct.pack(">h", len(topic)) + topic.encode()
        self.correlation = 0
        self.in_flight: dict[int, tuple[int, asyncio.Transport]] = {}
        self.broker: asyncio.StreamWriter | None = None

    async def connect(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        reader, self.broker = await asyncio.open_connection(host, int(port))
        asyncio.get_running_loop().create_task(self.read_answers(reader))

    def send_batch(self, values: list[bytes], transport: asyncio.Transport) -> None:
        """A Produce v3 request: header (key 0, version 3, correlation id, client id), no transactional id,
        acks -1, timeout 30 s, one topic with one partition (0) holding the batch."""
        assert self.broker is not None
        batch = record_batch(values)
        self.correlation += 1
        body = b"".join(
            (
                struct.pack(">hhih", 0, 3, self.correlation, 7),
                b"ceiling",
                struct.pack(">hhii", -1, -1, 30_000, 1),
                self.topic_field,
                struct.pack(">iii", 1, 0, len(batch)),
                batch,
            )
        )
        self.broker.write(_FRAME.pack(len(body)) + body)
        self.in_flight[self.correlation] = (len(values), transport)

    async def read_answers(self, reader: asyncio.StreamReader) -> None:
        """Produce v3 answers: correlation id, 1 topic (name), 1 partition (index, error, base offset...)."""
        error_at = 4 + 4 + len(self.topic_field) + 4 + 4
        while True:
            (size,) = _FRAME.unpack(await reader.readexactly(4))
            body = await reader.readexactly(size)
            (correlation,) = _FRAME.unpack_from(body)
            error, base = struct.unpack_from(">hq", body, error_at)
            if error:
                raise SystemExit(f"produce failed with error code {error}")
            count, transport = self.in_flight.pop(correlation)
            if not transport.is_closing():
                transport.write(offsets_answer(range(base, base + count)))

    async def pump_deliveries(self) -> None:
        """Delivery reports, every millisecond while records are in flight (as the gateway serves them)."""
        producer, waiting = self.producer, self.records_waiting
        while True:
            producer.poll(0)
            if len(producer):
                await asyncio.sleep(0.001)
                continue
            waiting.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiting.wait(), 0.1)


class Outcomes:
    """One request's records: answered once every one of them has its offset."""

    __slots__ = ("left", "offsets", "transport")

    def __init__(self, count: int, transport: asyncio.Transport) -> None:
        self.offsets: list[int] = [0] * count
        self.left, self.transport = count, transport

    def report(self, index: int, error: Any, message: Any) -> None:
        if error is not None:
            raise SystemExit(f"produce failed: {error}")
        self.offsets[index] = message.offset()
        self.left -= 1
        if not self.left and not self.transport.is_closing():
            self.transport.write(offsets_answer(self.offsets))


class Connection(asyncio.Protocol):
    def __init__(self, front: Front) -> None:
        self.front = front
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not its subclasses

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while (end := buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(buffer[:end]).lower()
            at = head.index(b"content-length:") + len(b"content-length:")
            length = int(head[at : head.index(b"\r\n", at) if b"\r\n" in head[at:] else len(head)])
            if len(buffer) < end + 4 + length:
                return
            body = bytes(buffer[end + 4 : end + 4 + length])
            del buffer[: end + 4 + length]
            self.handle(body)

    def handle(self, body: bytes) -> None:
        front, transport = self.front, self.transport
        assert transport is not None
        if front.mode == "http":
            transport.write(HEAD % len(EMPTY_ANSWER) + EMPTY_ANSWER)
            return
        values = [record.value or b"" for record in read_body(body).records]
        if front.mode == "parse":
            transport.write(HEAD % len(EMPTY_ANSWER) + EMPTY_ANSWER)
            return
        if front.mode == "batch":
            front.send_batch(values, transport)
            return
        outcomes = Outcomes(len(values), transport)
        produce, report, partial, topic = (
            front.producer.produce,
            outcomes.report,
            functools.partial,
            front.topic,
        )
        for index, value in enumerate(values):
            produce(topic, value, None, 0, partial(report, index))
        front.records_waiting.set()


async def serve(mode: str, port: int, bootstrap: str, topic: str, linger_ms: float) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "queue.buffering.max.messages": 10_000_000}
    )
    front = Front(mode, producer, topic)
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: Connection(front), "127.0.0.1", port, backlog=1024)
    if mode == "batch":
        await front.connect(bootstrap)
    pump = loop.create_task(front.pump_deliveries())
    print("ready", flush=True)
    await pump


if __name__ == "__main__":
    mode, port, bootstrap, topic, linger = sys.argv[1:6]
    assert mode in ("http", "parse", "produce", "batch"), mode
    uvloop.run(serve(mode, int(port), bootstrap, topic, float(linger)))
