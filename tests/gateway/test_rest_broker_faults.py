"""The REST Proxy while the broker behind it fails: produce through kill -9 and a full disk, and a consumer
instance meeting a corrupt batch; and a client gone halfway through its request.

What a REST client is told must hold afterwards: every record answered with an offset is at that offset, a
failure is answered with a Confluent error_code and a message (never a traceback or a hang), and the gateway serves again once the
broker does.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from rest_helpers import BINARY, JSON, V2, new_consumer, records_until, rest_gateway, unique

from sluice.testing import BrokerProcess, create_topic, read_partition

# The REST producer gives up on a record after this long (the gateway's message.timeout.ms), so a record
# waiting for a broker that does not come back is answered with its error well within a test's patience.
GIVE_UP = ("-X", "message.timeout.ms=4000")


def post(url: str, topic: str, values: list[str]) -> tuple[int, dict[str, Any]]:
    reply = requests.post(
        f"{url}/topics/{topic}",
        json={"records": [{"value": v} for v in values]},
        headers={"Content-Type": JSON},
        timeout=60,
    )
    return reply.status_code, reply.json()


def record_outcomes(
    answer: tuple[int, dict[str, Any]], values: list[str], acked: dict[str, int], failures: list[int]
) -> None:
    """Note each record's offset, or its error_code; anything else is a broken answer."""
    status, body = answer
    assert status != 500 or isinstance(body.get("error_code"), int), body
    if status != 200:
        assert isinstance(body["error_code"], int) and body["message"], body
        failures.extend([body["error_code"]] * len(values))
        return
    assert len(body["offsets"]) == len(values), body
    for value, outcome in zip(values, body["offsets"], strict=True):
        if outcome["error_code"] is None:
            assert outcome["partition"] == 0 and outcome["offset"] >= 0, outcome
            acked[value] = outcome["offset"]
        else:
            assert isinstance(outcome["error_code"], int) and outcome["error"], outcome
            failures.append(outcome["error_code"])


def wait_until(condition: Callable[[], bool], within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.01)


def assert_acked_in_place(bootstrap: str, topic: str, acked: dict[str, int]) -> None:
    """Every acknowledged record is at the offset its answer named (JSON values: the quoted string)."""
    seen = read_partition(bootstrap, topic)
    moved = {v: o for v, o in acked.items() if seen.get(o) != f'"{v}"'.encode()}
    assert not moved, (
        f"{len(moved)} acknowledged records are not where their answer said, e.g. {list(moved.items())[:3]}"
    )


def test_broker_kill_9_mid_stream_loses_and_moves_nothing_acknowledged(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create_topic(broker.bootstrap, 1, "rest-kill-broker", timeout=30)
        acked: dict[str, int] = {}
        failures: list[int] = []
        stop = threading.Event()
        broken: list[BaseException] = []
        with rest_gateway(broker.bootstrap, *GIVE_UP) as gateway:

            def stream() -> None:
                batch = 0
                try:
                    while not stop.is_set():
                        values = [f"b{batch:04d}-{i:02d}" for i in range(20)]
                        record_outcomes(post(gateway.url, topic, values), values, acked, failures)
                        batch += 1
                except BaseException as exc:  # re-raised by the test below
                    broken.append(exc)

            writer = threading.Thread(target=stream)
            writer.start()
            wait_until(lambda: len(acked) >= 300 or not writer.is_alive())
            broker.kill()  # kill -9 while the writer keeps posting: requests are in flight
            time.sleep(1.0)
            broker.restart()
            restarted_with = len(acked)
            wait_until(lambda: len(acked) >= restarted_with + 300 or not writer.is_alive())
            stop.set()
            writer.join(120)
            assert not writer.is_alive(), "a REST produce never answered"
            if broken:
                raise broken[0]
            assert len(acked) >= 600
            # Served again: a record after the restart is acknowledged after every earlier one.
            after: dict[str, int] = {}
            deadline = time.monotonic() + 60
            while "after" not in after and time.monotonic() < deadline:
                record_outcomes(post(gateway.url, topic, ["after"]), ["after"], after, [])
            assert after["after"] > max(acked.values())
        assert_acked_in_place(broker.bootstrap, topic, acked)
        # What failed failed with Kafka's error behind it (50002), named per record.
        assert set(failures) <= {50002, 50003}, set(failures)
    finally:
        broker.kill()


def test_a_full_disk_is_answered_per_record_and_produce_resumes_when_space_is_back(
    mount_tmpfs: Callable[[str], Path], fill_up: Callable[[Path], Path]
) -> None:
    disk = mount_tmpfs("24m")
    broker = BrokerProcess(disk / "data").start()
    try:
        topic = create_topic(broker.bootstrap, 1, "rest-full", timeout=30)
        acked: dict[str, int] = {}
        with rest_gateway(broker.bootstrap, *GIVE_UP) as gateway:
            before = [f"before-{i}" for i in range(50)]
            record_outcomes(post(gateway.url, topic, before), before, acked, [])
            assert set(acked) == set(before)
            ballast = fill_up(disk)
            failures: list[int] = []
            full = [f"full-{i:04d}" for i in range(1000)]
            started = time.monotonic()
            for part in range(0, len(full), 500):
                record_outcomes(
                    post(gateway.url, topic, full[part : part + 500]),
                    full[part : part + 500],
                    acked,
                    failures,
                )
            # Refused, not hung: each request answered within the gateway's message timeout and some margin.
            assert time.monotonic() - started < 2 * (4 + 10)
            assert failures and set(failures) <= {50002, 50003}, set(failures)
            ballast.unlink()
            resumed: dict[str, int] = {}
            deadline = time.monotonic() + 60
            while "resumed" not in resumed and time.monotonic() < deadline:
                record_outcomes(post(gateway.url, topic, ["resumed"]), ["resumed"], resumed, [])
                time.sleep(0.2)
            assert resumed["resumed"] > max(acked.values())
        assert_acked_in_place(broker.bootstrap, topic, acked)
        broker.stop()
        broker.restart()
        assert_acked_in_place(broker.bootstrap, topic, {**acked, **resumed})
    finally:
        broker.kill()


def test_a_corrupt_batch_stops_a_consumer_instance_with_an_error_until_it_seeks_past(
    corrupt_batch: Callable[[int], Any],  # tests/conftest.py's CorruptBatch
) -> None:
    """A byte flipped in a sealed segment: a v2 consumer instance reads every record before the damaged batch
    at its offset, then is told where it cannot go on (50002, naming the offset) rather than getting empty
    answers forever; after a seek past the batch it reads the rest."""
    damaged = corrupt_batch(1)
    with rest_gateway(damaged.broker.bootstrap) as gateway:
        base = new_consumer(
            gateway.url, unique("rest-corrupt"), format="binary", **{"auto.offset.reset": "earliest"}
        )
        assignment = {"partitions": [{"topic": "bits", "partition": 0}]}
        reply = requests.post(
            f"{base}/assignments", json=assignment, headers={"Content-Type": V2}, timeout=30
        )
        assert reply.status_code == 204, reply.text
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            reply = requests.get(
                f"{base}/records", params={"timeout": 1000}, headers={"Accept": BINARY}, timeout=30
            )
            if reply.status_code != 200:
                break
            for record in reply.json():
                assert base64.b64decode(record["value"]).startswith(b"%06d" % record["offset"])
                offsets.append(record["offset"])
        first_bad, after_bad = damaged.damage()
        assert offsets == list(range(first_bad))
        failure = reply.json()
        assert (reply.status_code, failure["error_code"]) == (500, 50002), failure
        assert f"bits-0 cannot be read at offset {first_bad}" in failure["message"]
        seek = {"offsets": [{"topic": "bits", "partition": 0, "offset": after_bad}]}
        reply = requests.post(f"{base}/positions", json=seek, headers={"Content-Type": V2}, timeout=30)
        assert reply.status_code == 204, reply.text
        rest = records_until(base, damaged.records - after_bad, fmt=BINARY)
        assert [r["offset"] for r in rest] == list(range(after_bad, damaged.records))


def test_a_client_gone_halfway_through_its_body_produces_nothing(broker: BrokerProcess) -> None:
    """A v2 produce whose client hangs up before its body is complete writes none of its records; the gateway
    goes on serving."""
    topic = create_topic(broker.bootstrap, 1, "rest-half", timeout=30)
    with rest_gateway(broker.bootstrap) as gateway:
        body = json.dumps({"records": [{"value": f"half-{i}"} for i in range(50)]}).encode()
        port = int(gateway.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            head = (
                f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {JSON}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            client.sendall(head.encode() + body[: len(body) // 2])
        acked: dict[str, int] = {}
        record_outcomes(post(gateway.url, topic, ["whole"]), ["whole"], acked, [])
        assert acked == {"whole": 0}, acked
    assert read_partition(broker.bootstrap, topic) == {0: b'"whole"'}


def test_a_stalled_broker_fills_the_queue_and_later_requests_are_told_to_back_off(tmp_path: Path) -> None:
    """With the broker stopped (SIGSTOP), records wait for their answers; beyond queue.buffering.max.messages
    a request is answered at once, each record with 429 (as librdkafka's full queue is), not held; once the
    broker goes on, the waiting records are written where their answers say and produce serves again."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = create_topic(broker.bootstrap, 1, "rest-queue-full", timeout=30)
        with rest_gateway(broker.bootstrap, "-X", "queue.buffering.max.messages=150") as gateway:

            def post_binary(values: list[bytes]) -> dict[str, Any]:
                records = [{"value": base64.b64encode(v).decode()} for v in values]
                reply = requests.post(
                    f"{gateway.url}/topics/{topic}",
                    json={"records": records},
                    headers={"Content-Type": BINARY},
                    timeout=60,
                )
                assert reply.status_code == 200, reply.text
                return reply.json()

            assert [o["offset"] for o in post_binary([b"first"])["offsets"]] == [0]
            assert broker.proc is not None
            os.kill(broker.proc.pid, signal.SIGSTOP)
            try:
                held: list[dict[str, Any]] = []
                waiting = threading.Thread(target=lambda: held.append(post_binary([b"held"] * 100)))
                waiting.start()
                time.sleep(1.0)  # its 100 records are handed over and wait for the stopped broker
                started = time.monotonic()
                refused = post_binary([b"refused"] * 100)
                assert time.monotonic() - started < 5  # answered at once, not held
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            waiting.join(60)
            assert {o["error_code"] for o in refused["offsets"]} == {429}
            assert all("queue.buffering.max.messages=150" in o["error"] for o in refused["offsets"])
            assert [o["offset"] for o in held[0]["offsets"]] == list(range(1, 101))
            assert [o["offset"] for o in post_binary([b"after"])["offsets"]] == [101]
        values = read_partition(broker.bootstrap, topic)
        assert [values[o] for o in range(102)] == [b"first", *[b"held"] * 100, b"after"]
    finally:
        broker.kill()
