"""The gateway's `POST /topics/T/offsets` on a group the gateway consumes that also has members elsewhere:
with the cluster's `kafka.sluice_admin` set, the broker rewinds them live (they re-read exactly from the
new offsets) and the answer says where each partition was set; without it, a clear refusal."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from confluent_kafka import Consumer, Producer
from gateway_helpers import unique_group

from sluice.gateway import ConfigError, Gateway, config_from_dict
from sluice.testing import BrokerProcess, create_topic

PER_PARTITION = 20
WITHIN = 40.0
FAST_GROUPS = "group_initial_rebalance_delay_ms: 0\ngroup_min_session_timeout_ms: 1000\n"


@pytest.fixture(scope="module")
def admin_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("gateway-rewind")
    config = root / "broker.yaml"
    config.write_text(FAST_GROUPS)
    proc = BrokerProcess(root / "data", config=config, admin=True).start()
    yield proc
    proc.stop()


def gateway_document(bootstrap: str, admin_url: str | None) -> dict[str, Any]:
    kafka: dict[str, Any] = {"seed_peers": [bootstrap]}
    if admin_url is not None:
        kafka["sluice_admin"] = admin_url
    consumer = {"long_polling_timeout": "1s", "offsets_commit_interval": "100ms", "session_timeout": "3s"}
    return {"proxies": {"default": {"kafka": kafka, "consumer": consumer}}}


@pytest.fixture
async def start_gateway() -> AsyncIterator[Any]:
    started: list[Gateway] = []

    async def start(document: dict[str, Any]) -> Gateway:
        gateway = Gateway(
            config_from_dict(document),
            grpc_listen="127.0.0.1:0",
            http_listen="127.0.0.1:0",
            shutdown_grace=1.0,
        )
        await gateway.start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        await gateway.stop()


class PollingMember:
    """A confluent-kafka consumer of the same group, polling and auto-committing in its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 100,
                "session.timeout.ms": 3000,
                "heartbeat.interval.ms": 300,
            }
        )
        self.consumer.subscribe([topic])
        self.seen: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    with self.lock:
                        self.seen.append((msg.partition(), msg.offset()))
        finally:
            self.consumer.close()

    def since(self, mark: int) -> list[tuple[int, int]]:
        with self.lock:
            return self.seen[mark:]

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


def fill(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for seq in range(PER_PARTITION):
        for partition in (0, 1):
            producer.produce(topic, value=f"{partition}:{seq}".encode(), partition=partition)
    assert producer.flush(30) == 0


async def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WITHIN
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def join_through_gateway(http: aiohttp.ClientSession, topic: str, group: str) -> None:
    """Consume (and ack) through the gateway until it has taken at least one message: it is a member."""
    deadline = time.monotonic() + WITHIN
    while True:
        async with http.get(f"/topics/{topic}/messages", params={"group": group}) as response:
            if response.status == 200:
                return
            assert response.status == 408, await response.text()
        assert time.monotonic() < deadline, "the gateway never got a message"


async def test_offsets_set_through_the_gateway_rewind_members_elsewhere_live(
    admin_kafka: BrokerProcess, start_gateway: Any
) -> None:
    bootstrap, admin_url = admin_kafka.bootstrap, admin_kafka.admin_url
    assert admin_url is not None
    topic, group = create_topic(bootstrap, partitions=2, prefix="gw-rewind"), unique_group("gw-rewind")
    fill(bootstrap, topic)
    gateway = await start_gateway(gateway_document(bootstrap, admin_url.removeprefix("http://")))
    other: PollingMember | None = None
    try:
        async with aiohttp.ClientSession(gateway.http_url) as http:
            # The gateway first, so that the other member cannot have read (and committed) everything.
            await join_through_gateway(http, topic, group)
            other = PollingMember(bootstrap, group, topic)
            # It reads its partition to the end (so nothing it reads later is from before the rewind).
            await until(
                lambda: any(o == PER_PARTITION - 1 for _, o in other.since(0)), "the other member to read"
            )
            mark = len(other.since(0))
            async with http.post(
                f"/topics/{topic}/offsets",
                params={"group": group},
                json=[{"partition": 0, "offset": 5}, {"partition": 1, "offset": 99}],
            ) as response:
                assert response.status == 200, await response.text()
                answer = await response.json()
            assert answer == {
                "offsets": [
                    {"partition": 0, "requested": 5, "actual": 5},
                    {"partition": 1, "requested": 99, "actual": PER_PARTITION},
                ]
            }
            # The gateway left the group; the other member now holds both partitions and re-reads
            # partition 0 exactly from 5 (partition 1 was set to its end: nothing to re-read).
            expected = list(range(5, PER_PARTITION))
            await until(
                lambda: sorted(o for p, o in other.since(mark) if p == 0)[-1:] == [PER_PARTITION - 1],
                "the other member to re-read partition 0",
            )
            again = other.since(mark)
            assert sorted(o for p, o in again if p == 0) == expected, again
            assert [o for p, o in again if p == 1] == []
    finally:
        if other is not None:
            await asyncio.to_thread(other.stop)


async def test_without_the_admin_listener_members_elsewhere_are_a_clear_refusal(
    admin_kafka: BrokerProcess, start_gateway: Any
) -> None:
    bootstrap = admin_kafka.bootstrap
    topic, group = create_topic(bootstrap, partitions=2, prefix="gw-norewind"), unique_group("gw-norewind")
    fill(bootstrap, topic)
    gateway = await start_gateway(gateway_document(bootstrap, None))
    other = PollingMember(bootstrap, group, topic)
    try:
        await until(lambda: len(other.since(0)) > 0, "the other member to read")
        async with (
            aiohttp.ClientSession(gateway.http_url) as http,
            http.post(
                f"/topics/{topic}/offsets", params={"group": group}, json=[{"partition": 0, "offset": 5}]
            ) as response,
        ):
            assert response.status == 400
            assert "members outside this gateway" in (await response.json())["error"]
    finally:
        await asyncio.to_thread(other.stop)


async def test_an_admin_listener_that_does_not_answer_is_503(
    admin_kafka: BrokerProcess, start_gateway: Any, tmp_path: Path
) -> None:
    bootstrap = admin_kafka.bootstrap
    topic = create_topic(bootstrap, prefix="gw-noadmin")
    gateway = await start_gateway(gateway_document(bootstrap, "127.0.0.1:1"))
    async with (
        aiohttp.ClientSession(gateway.http_url) as http,
        http.post(
            f"/topics/{topic}/offsets", params={"group": unique_group()}, json=[{"partition": 0, "offset": 0}]
        ) as response,
    ):
        assert response.status == 503
        assert "did not answer" in (await response.json())["error"]


@pytest.mark.parametrize("bad", ["nowhere", "host:port", "http://h:0", "h:70000"])
def test_a_bad_admin_address_fails_the_load(bad: str) -> None:
    with pytest.raises(ConfigError, match="sluice_admin"):
        config_from_dict(gateway_document("127.0.0.1:9092", bad))
