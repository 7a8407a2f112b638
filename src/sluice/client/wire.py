"""A small blocking Kafka client on the protocol core: one connection, one request at a time.

For tools and tests that need exact control over what goes on the wire (raw versions, malformed frames);
applications should use confluent-kafka.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from sluice.errors import ProtocolError
from sluice.protocol.headers import request_header
from sluice.protocol.messages import APIS_BY_NAME, request_codecs, response_codecs


class WireClient:
    def __init__(
        self, host: str, port: int, *, client_id: str = "sluice-wire", timeout: float = 30.0
    ) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id
        self.correlation_id = 0

    @classmethod
    def over(cls, sock: socket.socket, *, client_id: str = "sluice-wire") -> WireClient:
        """A client on a connection made elsewhere (wrapped in TLS, say)."""
        client = cls.__new__(cls)
        client.sock, client.client_id, client.correlation_id = sock, client_id, 0
        return client

    @classmethod
    def connect(cls, bootstrap: str, **kwargs: Any) -> WireClient:
        host, _, port = bootstrap.rpartition(":")
        return cls(host, int(port), **kwargs)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_class(self, api: str) -> Any:
        return request_codecs(APIS_BY_NAME[api].key).cls

    def response_class(self, api: str) -> Any:
        return response_codecs(APIS_BY_NAME[api].key).cls

    def encode_request(self, api: str, version: int, request: Any) -> bytes:
        spec = APIS_BY_NAME[api]
        self.correlation_id += 1
        flexible = version in spec.request_def.flexible
        header = request_header(spec.key, version, self.correlation_id, self.client_id, flexible)
        return header + request_codecs(spec.key)[version].encode(request)

    def send_frame(self, body: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exactly(4))[0]
        return self._recv_exactly(size)

    def _recv_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)

    def call(self, api: str, version: int, request: Any, *, response_version: int | None = None) -> Any:
        """Send one request and decode its response (the header's correlation id is checked)."""
        spec = APIS_BY_NAME[api]
        self.send_frame(self.encode_request(api, version, request))
        body = self.recv_frame()
        (correlation_id,) = struct.unpack_from(">i", body)
        if correlation_id != self.correlation_id:
            raise ProtocolError(f"correlation id {correlation_id}, expected {self.correlation_id}")
        version = version if response_version is None else response_version
        pos = 4
        if version in spec.response_def.flexible and spec.name != "ApiVersions":
            pos += 1  # empty tagged-field section of response header v1
        response, _ = response_codecs(spec.key)[version].decode(body, pos)
        return response
