"""The registry under faults: restarts, kill -9 of the registry and of the broker, a `_schemas` topic written
by Confluent's registry, and two registries sharing one topic (forwarding, racing registers)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from sluice.testing import BrokerProcess, RegistryProcess, start_together, wait_primary_together


def schema(name: str, *fields: str) -> str:
    return json.dumps(
        {"type": "record", "name": name, "fields": [{"name": f, "type": "string"} for f in fields]}
    )


def register(proc: RegistryProcess, subject: str, text: str) -> int:
    status, body = proc.call("POST", f"/subjects/{subject}/versions", {"schema": text})
    assert status == 200, body
    return int(body["id"])


# The module's tests share brokers and registries: they run on one xdist worker.
pytestmark = pytest.mark.xdist_group("registry-faults")


def register_once_writable(proc: RegistryProcess, subject: str, text: str) -> tuple[int, Any]:
    """Register until it works (Kafka back, space freed) or a minute passed: the last answer."""
    deadline = time.monotonic() + 60
    while True:
        status, body = proc.call("POST", f"/subjects/{subject}/versions", {"schema": text})
        if status == 200 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


def unique_topic() -> str:
    return f"_schemas-{uuid.uuid4().hex[:10]}"


# The module's brokers let a group session be as short as FAST_SESSION: a registry killed -9 loses the
# primary seat that soon after (Kafka's default floor is 6 s). 3 s, not less: on a loaded machine a shorter
# session risks a seat moving while a test writes (at 0.5 s it moved about once a second under a produce flood).
FAST_GROUPS = "group_min_session_timeout_ms: 1000\ngroup_initial_rebalance_delay_ms: 0\n"
FAST_SESSION = ["--session-timeout", "3"]


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker this module may kill."""
    root = tmp_path_factory.mktemp("registry-broker")
    (root / "broker.yaml").write_text(FAST_GROUPS)
    proc = BrokerProcess(root / "data", config=root / "broker.yaml").start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def own_registry(own_broker: BrokerProcess) -> Iterator[RegistryProcess]:
    """One registry on that broker for the restart and kill tests (each uses its own subjects); a test
    may stop, kill and restart it, and leaves it running."""
    proc = RegistryProcess(
        own_broker.bootstrap, unique_topic(), extra_args=["--store-timeout", "2", *FAST_SESSION]
    ).start()
    yield proc
    proc.kill()


def test_restart_and_kill9_keep_every_id(own_registry: RegistryProcess) -> None:
    proc = own_registry
    proc.wait_primary()
    kept = register(proc, "kept", schema("K", "a"))
    doomed = register(proc, "doomed", schema("D", "a"))
    assert doomed > kept
    assert proc.call("DELETE", "/subjects/doomed")[0] == 200
    assert proc.call("DELETE", "/subjects/doomed?permanent=true")[0] == 200
    for restart in (proc.stop, proc.kill):
        restart()
        if restart == proc.kill:
            # A fresh election group: the restart need not wait out the killed member's session (the
            # fail-over test waits for one).
            proc.group = f"{proc.group}-after-kill"
        proc.start()
        proc.wait_primary()
        assert proc.call("GET", "/subjects/kept/versions/1")[1]["id"] == kept
        assert proc.call("GET", f"/schemas/ids/{doomed}")[1]["error_code"] == 40403
    fresh = register(proc, "fresh", schema("F", "a"))
    assert fresh > doomed  # the permanently deleted id is not handed out again
    assert register(proc, "doomed", schema("D", "a")) > fresh


def test_broker_kill9_loses_no_acknowledged_schema(
    own_broker: BrokerProcess, own_registry: RegistryProcess
) -> None:
    proc = own_registry
    proc.wait_primary()
    ids = [register(proc, f"k{i}", schema(f"K{i}", "a")) for i in range(5)]
    own_broker.kill()
    proc.kill()
    own_broker.restart()
    proc.start()
    proc.wait_primary()
    assert [proc.call("GET", f"/subjects/k{i}/versions/1")[1]["id"] for i in range(5)] == ids
    assert register(proc, "after", schema("After", "a")) > max(ids)


def test_broker_down_answers_503_quickly_and_recovers(
    own_broker: BrokerProcess, own_registry: RegistryProcess
) -> None:
    # Last of the tests sharing own_registry: after a broker restart the registry is elected again.
    proc = own_registry
    proc.wait_primary()
    before = register(proc, "s", schema("S", "a"))
    own_broker.kill()
    started = time.monotonic()
    status, body = proc.call("POST", "/subjects/t/versions", {"schema": schema("T", "a")})
    assert (status, body["error_code"]) == (503, 50003), body
    assert "Kafka" in body["message"]
    assert time.monotonic() - started < 15
    # Reads are served from the replayed state meanwhile.
    assert proc.call("GET", f"/schemas/ids/{before}")[0] == 200
    own_broker.restart()
    status, body = register_once_writable(proc, "t", schema("T", "a"))
    assert status == 200 and body["id"] > before, body


def test_a_topic_written_by_confluent_is_read_as_is(broker: BrokerProcess) -> None:
    """Records exactly as Confluent's registry (and Karapace, with `"subject":null` keys) write them."""
    topic = unique_topic()
    broker.create_topic(topic, config={"cleanup.policy": "compact"})
    avro_a, avro_b = schema("A", "x"), schema("B", "y")
    written = [
        ('{"keytype":"CONFIG","subject":null,"magic":0}', '{"compatibilityLevel":"FULL"}'),
        ('{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}',
         json.dumps({"subject": "orders-value", "version": 1, "id": 21, "schema": avro_a, "deleted": False})),
        ('{"keytype":"SCHEMA","subject":"orders-value","version":2,"magic":1}',
         json.dumps({"subject": "orders-value", "version": 2, "id": 40, "schema": avro_b, "deleted": False})),
        ('{"keytype":"SCHEMA","subject":"gone","version":1,"magic":1}',
         json.dumps({"subject": "gone", "version": 1, "id": 57, "schema": schema("G", "z"), "deleted": True})),
        ('{"keytype":"SCHEMA","subject":"gone","version":1,"magic":1}', None),
        ('{"keytype":"NOOP","magic":0}', None),
        ('{"keytype":"CONFIG","subject":"orders-value","magic":0}',
         '{"subject":"orders-value","compatibilityLevel":"NONE"}'),
        ('{"keytype":"SCHEMA","subject":"old","version":1,"magic":1}',
         json.dumps({"subject": "old", "version": 1, "id": 3, "schema": '"string"', "deleted": False})),
        ('{"keytype":"DELETE_SUBJECT","subject":"old","magic":0}', '{"subject":"old","version":1}'),
        ('{"keytype":"MODE","subject":"orders-value","magic":0}', '{"subject":"orders-value","mode":"READONLY"}'),
        ('{"keytype":"SCHEMA","subject":"cleared","version":1,"magic":1}',
         json.dumps({"subject": "cleared", "version": 1, "id": 9, "schema": '"int"', "deleted": True})),
        ('{"keytype":"CLEAR_SUBJECT","subject":"cleared","magic":0}', '{"subject":"cleared"}'),
        ('{"keytype":"SCHEMA","subject":"refs","version":1,"magic":1}',
         json.dumps({"subject": "refs", "version": 1, "id": 22, "schema": schema("R", "r"), "deleted": False,
                     "references": [{"name": "A", "subject": "orders-value", "version": 1}]})),
    ]  # fmt: skip
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in written:
        producer.produce(topic, value.encode() if value else None, key.encode())
    assert producer.flush(30) == 0
    proc = RegistryProcess(broker.bootstrap, topic).start()
    try:
        assert proc.call("GET", "/subjects")[1] == ["orders-value", "refs"]
        assert proc.call("GET", "/subjects?deleted=true")[1] == ["old", "orders-value", "refs"]
        assert proc.call("GET", "/mode/orders-value")[1] == {"mode": "READONLY"}
        assert proc.call("GET", "/subjects/orders-value/versions/1/referencedby")[1] == [22]
        latest = proc.call("GET", "/subjects/orders-value/versions/latest")[1]
        assert (latest["version"], latest["id"], latest["schema"]) == (2, 40, avro_b)
        assert proc.call("GET", "/config")[1] == {"compatibilityLevel": "FULL"}
        assert proc.call("GET", "/config/orders-value")[1] == {"compatibilityLevel": "NONE"}
        assert proc.call("GET", "/schemas/ids/57")[1]["error_code"] == 40403
        proc.wait_primary()
        assert register(proc, "new", schema("N", "n")) == 58  # past every id ever written, 57 included
    finally:
        proc.kill()


@pytest.fixture(scope="module")
def misconfigured(broker: BrokerProcess) -> Iterator[dict[str, RegistryProcess]]:
    """Registries that cannot work, launched side by side: one whose Kafka is not there, one asking for a
    group session shorter than the session broker allows (Kafka's 6 s floor)."""
    from sluice.testing import free_port

    procs = {
        "unreachable": RegistryProcess(
            f"127.0.0.1:{free_port()}", unique_topic(), extra_args=["--store-timeout", "1"]
        ),
        "short_session": RegistryProcess(
            broker.bootstrap, unique_topic(), extra_args=["--session-timeout", "1", "--store-timeout", "1"]
        ),
    }
    for proc in procs.values():
        proc.launch()
    yield procs
    for proc in procs.values():
        proc.kill()


def test_kafka_unreachable_at_start_is_one_clear_error(misconfigured: dict[str, RegistryProcess]) -> None:
    with pytest.raises(RuntimeError) as caught:
        misconfigured["unreachable"].wait_ready(timeout=60)
    assert "cannot open" in caught.value.args[0] and "Traceback" not in caught.value.args[0]


def test_a_session_shorter_than_the_cluster_allows_is_named_in_the_error(
    misconfigured: dict[str, RegistryProcess],
) -> None:
    """The group refuses a 1 s session, and a write says why."""
    proc = misconfigured["short_session"].wait_ready()
    deadline = time.monotonic() + 30
    while True:
        status, body = proc.call("POST", "/subjects/s/versions", {"schema": schema("S", "a")})
        if "INVALID_SESSION_TIMEOUT" in body["message"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # the group's refusal arrives with the first JoinGroup answer
    assert (status, body["error_code"]) == (500, 50004), body
    assert "INVALID_SESSION_TIMEOUT" in body["message"]


def test_a_full_disk_answers_503_and_writes_resume_when_space_is_freed(
    mount_tmpfs: Callable[[str], Path],
) -> None:
    disk = mount_tmpfs("24m")
    broker = BrokerProcess(disk / "data", min_free_bytes=4 << 20).start()
    proc = RegistryProcess(broker.bootstrap, unique_topic(), extra_args=["--store-timeout", "2"]).start()
    try:
        proc.wait_primary()
        kept = register(proc, "disk", schema("Disk", "a"))
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (free - (1 << 20)))  # below the broker's 4 MiB floor
        # The broker looks at free space every tenth of a second: writes may still land for a moment after the fill.
        deadline, n = time.monotonic() + 30, 0
        while True:
            n += 1
            status, body = proc.call("POST", f"/subjects/disk-{n}/versions", {"schema": schema(f"D{n}", "b")})
            if status != 200 or time.monotonic() > deadline:
                break
        assert (status, body.get("error_code")) == (503, 50003), body
        assert proc.call("GET", f"/schemas/ids/{kept}")[0] == 200  # reads go on
        ballast.unlink()
        status, body = register_once_writable(proc, "after", schema("After", "b"))
        assert status == 200 and body["id"] > kept, body
    finally:
        proc.kill()
        broker.kill()


@dataclass
class SharedTopic:
    """Three registries on one `_schemas` topic, started side by side: `pair` share one election group
    (one primary, the other forwards), `rival` stands alone in a group of its own (a split brain made on
    purpose)."""

    pair: tuple[RegistryProcess, RegistryProcess]
    rival: RegistryProcess

    def seated(self) -> tuple[RegistryProcess, RegistryProcess]:
        """(the pair's primary, the other one), by what each has logged."""
        first, second = self.pair
        deadline = time.monotonic() + 30
        while not (first.holds_seat() or second.holds_seat()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the log line may trail the first answered write by a moment
        return (first, second) if first.holds_seat() else (second, first)


@pytest.fixture(scope="module")
def shared_topic(own_broker: BrokerProcess) -> Iterator[SharedTopic]:
    topic, bootstrap = unique_topic(), own_broker.bootstrap
    first = RegistryProcess(bootstrap, topic, group=f"{topic}-a", extra_args=FAST_SESSION)
    second = RegistryProcess(bootstrap, topic, group=first.group, extra_args=FAST_SESSION)
    rival = RegistryProcess(bootstrap, topic, group=f"{topic}-b", extra_args=FAST_SESSION)
    try:
        start_together(first, second, rival)
        wait_primary_together(first, second, rival)
        assert first.call("PUT", "/config", {"compatibility": "NONE"})[0] == 200  # forwarded if need be
        yield SharedTopic((first, second), rival)
    finally:
        for proc in (first, second, rival):
            proc.kill()


def test_two_primaries_racing_never_give_one_id_to_two_schemas(shared_topic: SharedTopic) -> None:
    """A split brain made on purpose: two registries on one topic in different groups both write. Their
    records race in `_schemas`; every reader drops a record that would reuse an id for another schema, and
    its writer plans again, so each answer a client got stays true on both."""
    first, second = shared_topic.seated()[0], shared_topic.rival
    first.wait_primary()
    second.wait_primary()

    def race(i: int) -> tuple[str, str, int]:
        proc, subject = (first, second)[i % 2], f"split-{i % 4}"
        for _ in range(3):  # a write that kept losing answers 50001, and a client tries again
            status, body = proc.call(
                "POST", f"/subjects/{subject}/versions", {"schema": schema(f"Split{i}", "a")}
            )
            if status != 500:
                break
        assert status == 200, body
        return subject, f"Split{i}", body["id"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(race, range(40)))
    assert len({schema_id for _, _, schema_id in results}) == 40
    for proc in (first, second):
        deadline = time.monotonic() + 30
        for _subject, name, schema_id in results:
            while True:
                status, body = proc.call("GET", f"/schemas/ids/{schema_id}")
                if status == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert json.loads(body["schema"])["name"] == name


def test_two_registries_forward_never_split_an_id_and_fail_over(shared_topic: SharedTopic) -> None:
    # Kills the pair's primary: runs after every other test of the shared topic.
    first, second = shared_topic.seated()
    first.wait_primary()
    second.wait_primary()
    assert second.call("PUT", "/config", {"compatibility": "NONE"})[0] == 200  # forwarded

    def race(i: int) -> tuple[str, int]:
        proc = (first, second)[i % 2]
        return f"S{i}", register(proc, f"race-{i % 3}", schema(f"S{i}", "a"))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(race, range(24)))
    ids = [schema_id for _, schema_id in results]
    # The first stays primary (the seat is sticky): the writes sent to the second were forwarded to it.
    assert first.holds_seat()
    assert "now the primary" not in "".join(second.output)
    assert len(set(ids)) == len(ids)  # 24 different schemas, 24 different ids
    deadline = time.monotonic() + 30
    for name, schema_id in results:
        for proc in (first, second):
            while True:  # the other registry may still be reading the latest writes
                status, body = proc.call("GET", f"/schemas/ids/{schema_id}")
                if status == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert json.loads(body["schema"])["name"] == name
    # A write forwarded by the secondary is answered once the secondary has read it back.
    forwarded = register(second, "read-your-writes", schema("RYW", "a"))
    assert second.call("GET", f"/schemas/ids/{forwarded}")[0] == 200
    # The primary killed without leaving the group: once its session (3 s) times out, the other takes over.
    first.kill()
    killed = time.monotonic()
    deadline = time.monotonic() + 60
    while True:
        status, body = second.call("POST", "/subjects/after-failover/versions", {"schema": schema("H", "a")})
        if status == 200 or time.monotonic() > deadline:
            break
        assert body["error_code"] in (50003, 50004), body  # meanwhile: a clear error, never a hang
    assert status == 200 and body["id"] > max(ids), body
    assert "now the primary" in "".join(second.output)
    print(f"fail-over took {time.monotonic() - killed:.2f}s")


def test_a_corrupt_batch_in_the_schemas_topic_is_named_when_the_registry_cannot_start(
    tmp_path: Path, flip_a_byte: Callable[[Path], Path]
) -> None:
    """A byte flipped in a sealed segment of `_schemas`: the registry cannot read its history past that batch,
    and says so with the topic and offset (once, not a warning at every refetch) instead of timing out
    without a reason."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        topic = unique_topic()
        broker.create_topic(topic, config={"cleanup.policy": "compact", "segment.bytes": "100000"})
        producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 20, "linger.ms": 5})
        for n in range(1500):
            subject = f"s{n:05d}"
            key = json.dumps({"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1})
            value = json.dumps(
                {"subject": subject, "version": 1, "id": n + 1, "schema": schema("R", "f" * 40)}
            )
            producer.produce(topic, value.encode(), key.encode())
        assert producer.flush(30) == 0
        broker.stop()
        flip_a_byte(tmp_path / "data" / f"{topic}-0")
        broker.restart()
        proc = RegistryProcess(broker.bootstrap, topic, extra_args=["--store-timeout", "2"])
        with pytest.raises(RuntimeError) as caught:
            proc.start(timeout=60)
        [damage] = json.loads((tmp_path / "data" / f"{topic}-0" / "damaged.json").read_text())["ranges"]
        said = caught.value.args[0]
        assert f"{topic} cannot be read at offset {damage['first_offset']}" in said, said
        assert "Traceback" not in said
        assert said.count("cannot be read at offset") <= 3, said  # the log line once, then the error
    finally:
        broker.kill()
