"""Requests captured from real clients (tests/protocol/capture_golden.py) decode, and re-encode to the very
same bytes: sluice reads every field those clients send, at the versions they negotiate."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.protocol.headers import HEADER_FIXED, request_header
from sluice.protocol.messages import APIS_BY_KEY, request_codecs

GOLDEN = Path(__file__).parent / "golden"
FILES = sorted(GOLDEN.glob("*/*.bin"))


def test_every_client_was_captured() -> None:
    clients = {path.parent.name for path in FILES}
    assert clients == {"confluent-kafka", "kafka-python", "aiokafka"}
    # Each client's produce, fetch, metadata, group and offset requests are among them.
    for client in clients:
        keys = {int(p.name.split("-")[0]) for p in FILES if p.parent.name == client}
        assert {0, 1, 3, 8, 9, 10, 11, 14, 18} <= keys, (client, keys)


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_captured_request_round_trips_byte_exact(path: Path) -> None:
    frame = path.read_bytes()
    api_key = int(path.name.split("-")[0])
    version = int(path.stem.split("-v")[1])
    api = APIS_BY_KEY[api_key]
    flexible = version in api.request_def.flexible
    key, read_version, correlation_id = HEADER_FIXED.unpack_from(frame)
    assert (key, read_version) == (api_key, version)
    codec = request_codecs(api_key)[version]
    client_id, pos = codec.read_header(frame)
    request, end = codec.decode(frame, pos)
    assert end == len(frame)
    rebuilt = request_header(api_key, version, correlation_id, client_id, flexible) + codec.encode(request)
    assert rebuilt == frame
