"""The jobs on a real Spark standalone cluster: a master and one worker from pyspark's own scripts.

Executors run in their own JVM under the worker, with their own Python workers; sluice reaches
them the way the README tells users to ship it: a zip of the package through ``--py-files``
(PYSPARK_SUBMIT_ARGS for the drivers started from Python). Loopback only, one core, small heaps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.testing import free_port

pytest.importorskip("pyspark")
# A master, a worker and a driver JVM per test on two shared cores: the suite's 300 s hang guard is too short
# for it while the rest of the suite runs beside it.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

SRC = Path(__file__).parents[2] / "src"
DRIVER = Path(__file__).with_name("eos_driver.py")


@dataclass
class StandaloneCluster:
    master_url: str
    work_dir: Path
    env: dict[str, str]

    def executor_dirs(self) -> list[Path]:
        """One directory per executor the worker launched (app-*/<executor id>)."""
        return [d for app in self.work_dir.glob("app-*") for d in app.iterdir() if d.is_dir()]


def _wait_for_log(path: Path, needle: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text(errors="replace"):
            return
        assert process.poll() is None, path.read_text(errors="replace")[-3000:]
        time.sleep(0.5)
    raise AssertionError(
        f"{needle!r} not in {path} after {timeout_s}s:\n{path.read_text(errors='replace')[-3000:]}"
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    if shutil.which("java") is None:
        pytest.skip("Java is needed for Spark")
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    base = tmp_path_factory.mktemp("spark-standalone")
    # What users ship with --py-files: the sluice package as a zip.
    package = shutil.make_archive(str(base / "sluice"), "zip", root_dir=SRC, base_dir="sluice")
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        # The suite's flags for Spark's JVMs (tests/conftest.py), for the daemons and executors too.
        "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", ""),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_SUBMIT_ARGS": (
            f"--py-files {package} --conf spark.executor.memory=512m --conf spark.cores.max=1 "
            f"--conf 'spark.executor.extraJavaOptions={os.environ.get('SPARK_SUBMIT_OPTS', '')}' "
            "--conf spark.driver.host=127.0.0.1 --conf spark.ui.enabled=false pyspark-shell"
        ),
    }
    port = free_port()
    spark_class = str(spark_home / "bin" / "spark-class")
    master_log, worker_log = base / "master.log", base / "worker.log"
    with open(master_log, "wb") as log:
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(free_port())],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    worker = None
    try:
        _wait_for_log(master_log, "I have been elected leader", master, 120)
        url = f"spark://127.0.0.1:{port}"
        work_dir = base / "work"
        with open(worker_log, "wb") as log:
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1",
                 "--memory", "768m", "--work-dir", str(work_dir), "--webui-port", str(free_port())],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        _wait_for_log(worker_log, "Successfully registered with master", worker, 120)
        yield StandaloneCluster(url, work_dir, env)
    finally:
        for process in (worker, master):
            if process is not None:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


def _cli(cluster: StandaloneCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from sluice.cli.pipeline import app; app()", *args]
    # The driver imports sluice from this tree; the executors from the --py-files zip.
    env = {**cluster.env, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def test_archive_replay_and_exactly_once_copy_on_a_standalone_cluster(
    cluster: StandaloneCluster, kafka: Any, tmp_path: Path
) -> None:
    topic = kafka.new_topic("cluster", partitions=2)
    kafka.produce(topic, [{"value": b"r%04d" % i, "key": b"k%d" % i, "partition": i % 2} for i in range(40)])
    common = ["--bootstrap", kafka.bootstrap, "--master", cluster.master_url]

    archived = _cli(
        cluster, "archive", "--topics", topic, "--to", str(tmp_path / "a"), "--available-now", *common
    )
    assert archived.returncode == 0, archived.stderr[-3000:]
    assert "archived 40 records" in archived.stderr
    # The work ran in executors the worker launched (their own JVMs), not in the driver.
    assert cluster.executor_dirs(), "no executor was launched by the worker"

    replayed_topic = kafka.new_topic("cluster-replay", partitions=2)
    replayed = _cli(cluster, "replay", "--from", str(tmp_path / "a"), "--to-topic", replayed_topic, *common)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    back = kafka.consume_all(replayed_topic, partitions=2)
    assert sorted((m.partition(), m.key(), m.value()) for m in back) == sorted(
        (i % 2, b"k%d" % i, b"r%04d" % i) for i in range(40)
    )

    target = kafka.new_topic("cluster-eos", partitions=2)
    config = {
        "bootstrap": kafka.bootstrap,
        "source": topic,
        "target": target,
        "checkpoint": str(tmp_path / "cp"),
        "master": cluster.master_url,
        "per_trigger": 20,
    }
    env = {**cluster.env, "PYTHONPATH": str(SRC)}
    copied = subprocess.run(
        [sys.executable, str(DRIVER), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert copied.returncode == 0 and "DONE" in copied.stdout, copied.stderr[-3000:]
    values = sorted(m.value() for m in kafka.consume_all(target, partitions=2))
    assert values == [b"r%04d" % i for i in range(40)]


def test_registry_framed_avro_archived_as_typed_columns_on_a_standalone_cluster(
    cluster: StandaloneCluster, kafka: Any, tmp_path: Path
) -> None:
    """Executors look the writer schema up in the registry themselves and decode in their own workers."""
    import pyarrow.parquet as pq
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from sluice.testing import RegistryProcess

    order = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
    topic = kafka.new_topic("cluster-typed", partitions=2)
    with RegistryProcess(kafka.bootstrap) as registry:
        assert registry.url is not None
        serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(order))
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
        for i in range(20):
            value = {"id": i, "status": ["NEW", "PAID"][i % 2], "note": None if i % 3 else f"n{i}"}
            producer.produce(
                topic,
                value=serialize(value, SerializationContext(topic, MessageField.VALUE)),
                partition=i % 2,
            )
        assert producer.flush(30) == 0
        archived = _cli(
            cluster, "archive", "--topics", topic, "--to", str(tmp_path / "typed"), "--available-now",
            "--bootstrap", kafka.bootstrap, "--master", cluster.master_url,
            "--schema-registry", registry.url, "--value-format", "avro",
        )  # fmt: skip
    assert archived.returncode == 0, archived.stderr[-3000:]
    assert "archived 20 records" in archived.stderr
    rows = pq.read_table(tmp_path / "typed" / f"topic={topic}").column("value").to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == [
        {"id": i, "status": ["NEW", "PAID"][i % 2], "note": None if i % 3 else f"n{i}"} for i in range(20)
    ]
