"""The REST listener's produce front (gateway/rest/produce_front.py) on a real gateway, spoken to over raw
sockets as HTTP/1.1 clients do: plain binary produces answered by it, everything else by aiohttp on the same
connection, in order, and a client gone halfway leaves nothing written."""

from __future__ import annotations

import base64
import json
import socket
import time
from typing import Any

import pytest
from rest_helpers import BINARY, JSON, RestGateway, create_topic, direct_messages, unique

from sluice.testing import BrokerProcess


@pytest.fixture
def topic(rest_proxy: RestGateway) -> str:
    """A topic of two partitions, for one test."""
    name = unique("rest-front")
    create_topic(rest_proxy.url, name, partitions=2)
    return name


def connect(rest: RestGateway) -> socket.socket:
    host, port = rest.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def produce_request(path: str, values: list[bytes], *, content_type: str = BINARY, extra: str = "") -> bytes:
    body = json.dumps({"records": [{"value": base64.b64encode(v).decode()} for v in values]}).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def read_answers(sock: socket.socket, count: int) -> list[tuple[int, Any]]:
    """`count` HTTP answers (status, JSON body, or None without one) off the connection, in order."""
    buffer, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"the gateway closed the connection after {len(answers)} answers"
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        assert "chunked" not in headers.get("transfer-encoding", ""), headers
        while len(buffer) < length:
            buffer += sock.recv(65536)
        body, buffer = buffer[:length], buffer[length:]
        answers.append((int(lines[0].split()[1]), json.loads(body) if body else None))
    return answers


def offsets(answer: tuple[int, Any]) -> list[tuple[int, int]]:
    status, body = answer
    assert status == 200, body
    return [(o["partition"], o["offset"]) for o in body["offsets"]]


def test_a_keep_alive_connection_mixes_plain_produces_with_every_other_call(
    rest_proxy: RestGateway, topic: str
) -> None:
    """Plain produces, then a metadata GET and a json produce (aiohttp's), then a plain produce again: all on
    one connection, answered in order, the offsets following on."""
    with connect(rest_proxy) as sock:
        sock.sendall(produce_request(f"/topics/{topic}/partitions/1", [b"a", b"b"]))
        assert offsets(read_answers(sock, 1)[0]) == [(1, 0), (1, 1)]
        sock.sendall(produce_request(f"/topics/{topic}/partitions/1", [b"c"]))
        assert offsets(read_answers(sock, 1)[0]) == [(1, 2)]
        sock.sendall(f"GET /topics/{topic} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status, body = read_answers(sock, 1)[0]
        assert status == 200 and body["name"] == topic and len(body["partitions"]) == 2
        json_body = b'{"records":[{"value":{"n":1},"partition":1}]}'
        sock.sendall(
            f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {JSON}\r\n"
            f"Content-Length: {len(json_body)}\r\n\r\n".encode()
            + json_body
        )
        assert offsets(read_answers(sock, 1)[0]) == [(1, 3)]
        sock.sendall(produce_request(f"/topics/{topic}/partitions/1", [b"d"]))
        assert offsets(read_answers(sock, 1)[0]) == [(1, 4)]


def test_pipelined_requests_are_answered_in_order(
    rest_proxy: RestGateway, topic: str, broker: BrokerProcess
) -> None:
    """Three requests in one send (two plain, then one aiohttp must refuse, then a plain one it serves): each
    answered, in the order sent."""
    bad = b'{"records":[{"value":"not base64!"}]}'
    requests_bytes = (
        produce_request(f"/topics/{topic}/partitions/0", [b"p0"])
        + produce_request(f"/topics/{topic}/partitions/0", [b"p1", b"p2"])
        + f"POST /topics/{topic}/partitions/0 HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
        f"Content-Length: {len(bad)}\r\n\r\n".encode()
        + bad
        + produce_request(f"/topics/{topic}/partitions/0", [b"p3"])
    )
    with connect(rest_proxy) as sock:
        sock.sendall(requests_bytes)
        first, second, refused, last = read_answers(sock, 4)
    assert offsets(first) == [(0, 0)] and offsets(second) == [(0, 1), (0, 2)]
    assert refused[0] == 400 and refused[1]["error_code"] == 400, refused
    assert offsets(last) == [(0, 3)]
    assert [m.value() for m in direct_messages(broker.bootstrap, topic, 4, 0)] == [b"p0", b"p1", b"p2", b"p3"]


def test_a_request_in_pieces_and_the_calls_it_does_not_serve(rest_proxy: RestGateway, topic: str) -> None:
    """A head and body arriving byte by byte are served; Expect: 100-continue, a chunked body, an unknown
    topic, a partition beyond the topic's and an unacceptable Accept are aiohttp's, answered as before."""
    with connect(rest_proxy) as sock:
        for byte in produce_request(f"/topics/{topic}/partitions/0", [b"slow"]):
            sock.send(bytes([byte]))
        assert offsets(read_answers(sock, 1)[0]) == [(0, 0)]
    with connect(rest_proxy) as sock:
        request = produce_request(f"/topics/{topic}/partitions/0", [b"e"], extra="Expect: 100-continue\r\n")
        head, body = request.split(b"\r\n\r\n", 1)
        sock.sendall(head + b"\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 100")
        sock.sendall(body)
        assert offsets(read_answers(sock, 1)[0]) == [(0, 1)]
    with connect(rest_proxy) as sock:
        body = json.dumps({"records": [{"value": "Yw=="}]}).encode()
        sock.sendall(
            f"POST /topics/{topic}/partitions/0 HTTP/1.1\r\nHost: x\r\nContent-Type: {BINARY}\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n".encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
        assert offsets(read_answers(sock, 1)[0]) == [(0, 2)]
    cases = [
        (produce_request(f"/topics/{unique('no-such')}", [b"x"]), 404, 40401),
        (produce_request(f"/topics/{topic}/partitions/7", [b"x"]), 404, 40402),
        (produce_request(f"/topics/{topic}", [b"x"], extra="Accept: text/plain\r\n"), 406, 40601),
    ]
    for request, status, code in cases:
        with connect(rest_proxy) as sock:
            sock.sendall(request)
            answer = read_answers(sock, 1)[0]
        assert (answer[0], answer[1]["error_code"]) == (status, code), answer


def test_a_client_gone_halfway_through_a_plain_produce_writes_nothing(
    rest_proxy: RestGateway, topic: str, broker: BrokerProcess
) -> None:
    request = produce_request(f"/topics/{topic}/partitions/1", [b"never"] * 50)
    with connect(rest_proxy) as sock:
        sock.sendall(request[: len(request) - 10])
    time.sleep(0.5)
    with connect(rest_proxy) as sock:
        sock.sendall(produce_request(f"/topics/{topic}/partitions/1", [b"after"]))
        assert offsets(read_answers(sock, 1)[0]) == [(1, 0)]
    assert [m.value() for m in direct_messages(broker.bootstrap, topic, 1, 1)] == [b"after"]
