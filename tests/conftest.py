"""Fixtures shared by the whole suite: a real sluice broker in a child process on an ephemeral port."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from sluice.testing import BrokerProcess, RegistryProcess

_names = itertools.count()

# Under pytest-xdist (`make test` runs `-n 4 --dist loadgroup`) the suite is as long as its longest worker. The
# directories whose tests start JVMs and browsers go first, so no worker starts one near the end; tests that
# use the `spark` fixture share three workers (three SparkSessions, not one per worker: each costs about 20 s
# of CPU on a 2-core machine), split by module so a module's tests reuse one session.
# Spark's JVMs (the SparkSessions, the drivers tests start, a standalone cluster's daemons and executors) run
# seconds of tiny jobs: the C1 compiler alone and the serial collector cost them a fifth less CPU than the
# server defaults, on a suite that is CPU-bound. Read by Spark's launcher (spark-submit's JVM).
SPARK_TEST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_TEST_JVM_FLAGS)

_HEAVY_FIRST = ("pipeline", "java", "console", "compaction", "transactions", "groups", "security", "gateway")
_SPARK_WORKERS = 3


def _heaviness(item: pytest.Item) -> int:
    parts = Path(str(item.fspath)).parts
    directory = parts[parts.index("tests") + 1] if "tests" in parts else ""
    return _HEAVY_FIRST.index(directory) if directory in _HEAVY_FIRST else len(_HEAVY_FIRST)


_spark_groups: dict[str, str] = {}


def pytest_itemcollected(item: pytest.Item) -> None:
    # Marked as each test is collected: xdist turns the marks into its groups in its own
    # pytest_collection_modifyitems, which may run before any conftest's. Modules take the groups in turn, in
    # collection order, which is the same on every worker. A module that asks for the spark fixture only in
    # some tests, and must keep all its tests on one worker (one module-scoped server), says
    # SHARES_A_SPARK_WORKER = True.
    module = getattr(item, "module", None)
    if "spark" in getattr(item, "fixturenames", ()) or getattr(module, "SHARES_A_SPARK_WORKER", False):
        module = str(item.fspath)
        group = _spark_groups.setdefault(module, f"spark-{len(_spark_groups) % _SPARK_WORKERS}")
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_heaviness)  # stable: each module keeps its order


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession per worker (tests/pipeline, and the Spark quickstart in tests/docs)."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Java is needed for a local SparkSession")
    # Executors must use this venv's interpreter, and heartbeats must stay on loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from sluice.pipeline import register

    session = (
        SparkSession.builder.master("local[2,2]")  # 2 cores, each task tried twice
        .appName("sluice-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One durable broker for the tests that only need *a* broker (each uses its own topics)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker-data")).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def schema_registry(broker: BrokerProcess) -> Iterator[RegistryProcess]:
    """`sluice registry` in a child process on an ephemeral port, against the session broker (`.url`)."""
    with RegistryProcess(broker.bootstrap) as registry:
        yield registry


@pytest.fixture
def bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{stem}-{os.getpid()}-{next(_names)}"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def group_name(topic_name: str) -> str:
    """A group id no other test uses."""
    return f"g-{topic_name}"


class StoppableMember(Protocol):
    closed: threading.Event

    def stop(self) -> None: ...


@pytest.fixture
def started() -> Iterator[list[StoppableMember]]:
    """Group members a test started (tests/groups, tests/java); whatever is still running at the end is stopped."""
    members: list[StoppableMember] = []
    yield members
    for member in members:
        if not member.closed.is_set():
            member.stop()


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a small tmpfs (`mount_tmpfs("24m")`): a disk that really fills up, ENOSPC included. Skips the
    test where mounting is not allowed (not root, or no mount in this container)."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs to fill needs root")
        point = tmp_path / f"tmpfs-{len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def _fill_up(mount: Path) -> Path:
    ballast = mount / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    return ballast


@pytest.fixture
def fill_up() -> Callable[[Path], Path]:
    """`fill_up(mount)` writes a file until the filesystem is full to the last byte (ENOSPC) and returns it:
    deleting it gives the space back."""
    return _fill_up


def _flip_a_byte_in_a_sealed_segment(partition_dir: Path) -> Path:
    segment = sorted(partition_dir.glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0x10
    segment.write_bytes(data)
    # Without its indexes the segment is scanned, and the damage found, when the partition opens.
    for suffix in (".index", ".timeindex"):
        segment.with_suffix(suffix).unlink()
    return segment


@pytest.fixture
def flip_a_byte() -> Callable[[Path], Path]:
    """`flip_a_byte(partition_dir)` flips one bit in the middle of the partition's second segment (of a stopped
    broker) and removes that segment's indexes; returns the segment."""
    return _flip_a_byte_in_a_sealed_segment


@dataclass
class CorruptBatch:
    """A broker whose topic `bits` has a corrupt batch in partition 0, which holds `records` records of 100 B,
    the one at offset n starting with its number (`%06d`), in batches of 50; any other partition holds one
    record, b"other"."""

    broker: BrokerProcess
    partition_dir: Path
    records: int = 3000

    def damage(self) -> tuple[int, int]:
        """The damaged batch's first offset and the first offset after it (known once the partition was
        opened: read from after the broker's first fetch of it)."""
        [damage] = json.loads((self.partition_dir / "damaged.json").read_text())["ranges"]
        return damage["first_offset"], damage["end_offset"]


@pytest.fixture
def corrupt_batch(tmp_path: Path) -> Iterator[Callable[[int], CorruptBatch]]:
    """`corrupt_batch(partitions)`: a broker of its own, `bits` written, stopped, a byte flipped in a sealed
    segment of partition 0 (`flip_a_byte`), restarted. Killed after the test."""
    from confluent_kafka import Producer

    from sluice.testing import create_topic

    started: list[BrokerProcess] = []

    def make(partitions: int = 1) -> CorruptBatch:
        broker = BrokerProcess(tmp_path / "data").start()
        started.append(broker)
        create_topic(
            broker.bootstrap, partitions, name="bits", config={"segment.bytes": "100000"}, timeout=30
        )
        producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 50, "linger.ms": 5})
        for n in range(3000):
            producer.produce("bits", f"{n:06d}".encode().ljust(100, b"q"), partition=0)
        for partition in range(1, partitions):
            producer.produce("bits", b"other", partition=partition)
        assert producer.flush(30) == 0
        broker.stop()
        _flip_a_byte_in_a_sealed_segment(tmp_path / "data" / "bits-0")
        broker.restart()
        return CorruptBatch(broker, tmp_path / "data" / "bits-0")

    yield make
    for broker in started:
        broker.kill()


class ShareMember:
    """A member of a share group (KIP-932): confluent-kafka's ShareConsumer in explicit acknowledgement mode,
    driven from the test's thread. `take` acquires records and acknowledges each as `ack(message)` says:
    an AcknowledgeType, or None to keep holding the record (the member may then only close)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], client_id: str) -> None:
        from confluent_kafka import ShareConsumer

        self.bootstrap, self.group = bootstrap, group
        self.consumer = ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": client_id,
                "share.acknowledgement.mode": "explicit",
            }
        )
        self.consumer.subscribe(topics)

    def take(self, count: int, ack: Callable[[Any], Any] | None = None, timeout: float = 30.0) -> list[Any]:
        """At least `count` records, each acknowledged (ACCEPT unless `ack` says otherwise) and committed."""
        from confluent_kafka import AcknowledgeType

        taken: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(taken) < count:
            assert time.monotonic() < deadline, f"{len(taken)} of {count} records acquired"
            for message in self.consumer.poll(0.5):
                assert message.error() is None, message.error()
                taken.append(message)
                kind = ack(message) if ack is not None else AcknowledgeType.ACCEPT
                if kind is not None:
                    self.consumer.acknowledge(message, kind)
        results = self.consumer.commit_sync()
        assert all(error is None for error in results.values()), results
        return taken

    def started(self, topic: str, partitions: int, timeout: float = 15.0) -> None:
        """Poll (an empty topic) until the group's share-partitions of `topic` have started: their start
        offsets show in DescribeShareGroupOffsets."""
        from sluice.client.wire import WireClient

        deadline = time.monotonic() + timeout
        while True:
            assert not list(self.consumer.poll(0.2)), "records came before the share-partitions started"
            with WireClient.connect(self.bootstrap) as client:
                cls = client.request_class("DescribeShareGroupOffsets")
                topics = [cls.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=list(range(partitions)))]
                answer = client.call("DescribeShareGroupOffsets", 1, cls(
                    groups=[cls.DescribeShareGroupOffsetsRequestGroup(group_id=self.group, topics=topics)]))
            if all(p.start_offset >= 0 for t in answer.groups[0].topics for p in t.partitions):
                return
            assert time.monotonic() < deadline, "the share-partitions never started"

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def share_member() -> Iterator[Callable[..., ShareMember]]:
    """`share_member(bootstrap, group, topics, client_id=...)`: a ShareMember of a share group that reads from
    the earliest offset (share.auto.offset.reset, set on the group); closed after the test if still open."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    members: list[ShareMember] = []

    def make(bootstrap: str, group: str, topics: list[str], client_id: str = "share-member") -> ShareMember:
        earliest = ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
        )
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])]
        ).values():
            future.result(30)
        member = ShareMember(bootstrap, group, topics, client_id)
        members.append(member)
        return member

    yield make
    for member in members:
        with contextlib.suppress(Exception):
            member.close()
