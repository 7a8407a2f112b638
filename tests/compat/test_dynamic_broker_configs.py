"""Dynamic broker configs (KIP-226) as Kafka 4.x keeps them: (Incremental)AlterConfigs on the BROKER resource
of this node or of the cluster default (""), sources and synonyms in DescribeConfigs, the configs sluice acts
on taking effect at once, and everything surviving a restart and a kill -9 (dynamic-broker-configs.json)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

DYNAMIC_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value
FILE = "dynamic-broker-configs.json"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of its own: the dynamic configs set here must not reach other tests' topics."""
    proc = BrokerProcess(tmp_path_factory.mktemp("dynamic-configs") / "data").start()
    yield proc
    proc.stop()


def _describe(bootstrap: str, name: str, keys: list[str] | None = None) -> tuple[int, dict[str, Any]]:
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("DescribeConfigs")
        resource = R.DescribeConfigsResource(resource_type=4, resource_name=name, configuration_keys=keys)
        (result,) = wire.call("DescribeConfigs", 4, R(resources=[resource], include_synonyms=True)).results
    return result.error_code, {c.name: c for c in result.configs}


def _synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def _incremental(bootstrap: str, name: str, *ops: tuple[int, str, str | None]) -> tuple[int, str | None]:
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("IncrementalAlterConfigs")
        configs = [R.AlterableConfig(name=k, config_operation=op, value=v) for op, k, v in ops]
        resource = R.AlterConfigsResource(resource_type=4, resource_name=name, configs=configs)
        (result,) = wire.call("IncrementalAlterConfigs", 1, R(resources=[resource])).responses
    return result.error_code, result.error_message


def test_librdkafka_0081_sets_a_sasl_config_on_the_broker(node: BrokerProcess) -> None:
    """librdkafka's test 0081 alters sasl.kerberos.min.time.before.relogin on the broker resource through the
    legacy AlterConfigs: Kafka accepts it (a per-broker listener config) and describes it as dynamic."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    resource = ConfigResource("broker", "1", set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    admin.alter_configs([resource])[resource].result(10)
    seen = admin.describe_configs([ConfigResource("broker", "1")])
    entries = next(iter(seen.values())).result(10)
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert relogin.value == "58000" and relogin.source == DYNAMIC_BROKER and not relogin.is_read_only
    _, configs = _describe(node.bootstrap, "1", ["sasl.kerberos.min.time.before.relogin"])
    assert _synonyms(configs["sasl.kerberos.min.time.before.relogin"]) == [
        ("sasl.kerberos.min.time.before.relogin", "58000", DYNAMIC_BROKER),
        ("sasl.kerberos.min.time.before.relogin", "60000", DEFAULT),
    ]
    # The legacy API replaces the resource's whole set: an empty one clears it.
    admin.alter_configs([ConfigResource("broker", "1", set_config={})])[ConfigResource("broker", "1")].result(
        10
    )
    _, configs = _describe(node.bootstrap, "1", ["sasl.kerberos.min.time.before.relogin"])
    assert configs["sasl.kerberos.min.time.before.relogin"].config_source == DEFAULT


def test_cluster_default_and_node_values_layer_and_take_effect(node: BrokerProcess, topic_name: str) -> None:
    """The cluster default ("") and this node's value stack over Kafka's default in the synonyms (most
    specific first, log.retention.hours after log.retention.ms); the broker names of topic configs become the
    defaults of the topics created next, without a restart."""
    # confluent-kafka will not name the "" resource: the wire can.
    assert _incremental(node.bootstrap, "", (0, "log.retention.ms", "3600000")) == (0, None)
    code, defaults = _describe(node.bootstrap, "")
    # Beside KIP-966's cluster-level min.insync.replicas, there from the start (see below).
    assert code == 0 and list(defaults) == ["log.retention.ms", "min.insync.replicas"]
    assert _synonyms(defaults["log.retention.ms"]) == [("log.retention.ms", "3600000", DYNAMIC_DEFAULT)]
    _, configs = _describe(node.bootstrap, "1", ["log.retention.ms"])
    assert configs["log.retention.ms"].config_source == DYNAMIC_DEFAULT
    assert _synonyms(configs["log.retention.ms"]) == [
        ("log.retention.ms", "3600000", DYNAMIC_DEFAULT),
        ("log.retention.hours", "168", DEFAULT),
    ]
    assert _incremental(node.bootstrap, "1", (0, "log.retention.ms", "7200000")) == (0, None)
    _, configs = _describe(node.bootstrap, "1", ["log.retention.ms"])
    assert configs["log.retention.ms"].value == "7200000"
    assert [s[2] for s in _synonyms(configs["log.retention.ms"])] == [
        DYNAMIC_BROKER,
        DYNAMIC_DEFAULT,
        DEFAULT,
    ]
    # Honoured at once: a topic created now gets the node's value.
    with WireClient.connect(node.bootstrap) as wire:
        R = wire.request_class("CreateTopics")
        topic = R.CreatableTopic(
            name=topic_name, num_partitions=1, replication_factor=1, assignments=[], configs=[]
        )
        (created,) = wire.call("CreateTopics", 7, R(topics=[topic], timeout_ms=10_000)).topics
    assert created.error_code == 0
    assert {c.name: c.value for c in created.configs}["retention.ms"] == "7200000"
    # DELETE drops the node's value: the cluster default shows through again.
    assert _incremental(node.bootstrap, "1", (1, "log.retention.ms", None)) == (0, None)
    _, configs = _describe(node.bootstrap, "1", ["log.retention.ms"])
    assert configs["log.retention.ms"].value == "3600000"


def test_kip_966_cluster_level_min_insync_replicas(node: BrokerProcess, topic_name: str) -> None:
    """Kafka 4.1 runs with ELR: its controller writes a cluster-level min.insync.replicas (the config file's
    value) when the cluster first starts, so every broker and topic reports it as a dynamic default (what
    confluent-kafka's test_incremental_alter_configs expects among a topic's non-default configs); it may be
    changed, but neither removed nor set per broker."""
    mir = "min.insync.replicas"
    _, defaults = _describe(node.bootstrap, "", [mir])
    assert _synonyms(defaults[mir]) == [(mir, "1", DYNAMIC_DEFAULT)]
    _, configs = _describe(node.bootstrap, "1", [mir])
    assert configs[mir].config_source == DYNAMIC_DEFAULT
    assert _synonyms(configs[mir]) == [(mir, "1", DYNAMIC_DEFAULT), (mir, "1", DEFAULT)]
    # A new topic inherits it, as a default of the cluster, not as an override of its own.
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    resource = ConfigResource("topic", topic_name)
    seen = admin.describe_configs([resource])[resource].result(10)[mir]
    assert (seen.value, seen.source, seen.is_default) == ("1", DYNAMIC_DEFAULT, False)
    assert _incremental(node.bootstrap, "", (1, mir, None)) == (
        ErrorCode.INVALID_CONFIG,
        "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.",
    )
    assert _incremental(node.bootstrap, "1", (0, mir, "2")) == (
        ErrorCode.INVALID_CONFIG,
        "Broker-level min.insync.replicas cannot be altered while ELR is enabled.",
    )
    assert _incremental(node.bootstrap, "", (0, mir, "2")) == (0, None)
    try:
        seen = admin.describe_configs([resource])[resource].result(10)[mir]
        assert (seen.value, seen.source) == ("2", DYNAMIC_DEFAULT)
    finally:
        assert _incremental(node.bootstrap, "", (0, mir, "1")) == (0, None)


def test_refusals_change_nothing(node: BrokerProcess) -> None:
    """A request with one bad config is refused whole, with Kafka's code; what was set stays."""
    assert _incremental(node.bootstrap, "1", (0, "log.cleaner.threads", "2")) == (0, None)
    code, message = _incremental(
        node.bootstrap, "1", (0, "log.cleaner.backoff.ms", "5"), (0, "log.dirs", "/x")
    )
    assert (
        code == ErrorCode.INVALID_REQUEST
        and message == "Cannot update these configs dynamically: Set(log.dirs)"
    )
    code, _ = _incremental(node.bootstrap, "1", (0, "max.connections", "-1"))
    assert code == ErrorCode.INVALID_REQUEST
    _, configs = _describe(
        node.bootstrap, "1", ["log.cleaner.threads", "log.cleaner.backoff.ms", "max.connections"]
    )
    assert configs["log.cleaner.threads"].value == "2"
    assert configs["log.cleaner.backoff.ms"].config_source == DEFAULT
    assert configs["max.connections"].config_source != DYNAMIC_BROKER


def test_passwords_are_kept_but_never_shown(node: BrokerProcess) -> None:
    """A listener's key store password is accepted under its listener prefix and described as sensitive."""
    name = "listener.name.plaintext.ssl.keystore.password"
    assert _incremental(node.bootstrap, "1", (0, name, "s3cret")) == (0, None)
    _, configs = _describe(node.bootstrap, "1", [name])
    assert configs[name].is_sensitive and configs[name].value is None
    assert all(s.value is None for s in configs[name].synonyms)
    stored = json.loads((Path(node.data_dir) / FILE).read_text())
    assert stored["broker"][name] == "s3cret"
    assert (Path(node.data_dir) / FILE).stat().st_mode & 0o077 == 0


def test_max_connections_is_enforced_at_once(node: BrokerProcess) -> None:
    """max.connections, set dynamically, limits the connections of the running broker."""
    clients = [WireClient.connect(node.bootstrap)]
    try:
        limit = 4
        assert _incremental(node.bootstrap, "1", (0, "max.connections", str(limit))) == (0, None)
        refused = False
        for _ in range(limit + 1):
            try:
                client = WireClient.connect(node.bootstrap)
                clients.append(client)
                client.call(
                    "ApiVersions",
                    3,
                    client.request_class("ApiVersions")(
                        client_software_name="t", client_software_version="1"
                    ),
                )
            except (OSError, ConnectionError, EOFError):
                refused = True
                break
        assert refused
    finally:
        for client in clients:
            client.close()
        assert _incremental(node.bootstrap, "1", (1, "max.connections", None)) == (0, None)


def test_per_ip_connection_limits_are_enforced_at_once_and_checked_as_kafka_does(node: BrokerProcess) -> None:
    """max.connections.per.ip.overrides, set dynamically, limits this address's connections at once; values
    Kafka refuses are refused with its words."""
    assert _incremental(node.bootstrap, "1", (0, "max.connections.per.ip", "0")) == (
        ErrorCode.INVALID_REQUEST,
        "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set.",
    )
    assert _incremental(node.bootstrap, "1", (0, "max.connections.per.ip.overrides", "host#:5")) == (
        ErrorCode.INVALID_REQUEST,
        "max.connections.per.ip.overrides contains invalid addresses : host#",
    )
    clients = [WireClient.connect(node.bootstrap)]
    try:
        assert _incremental(node.bootstrap, "1", (0, "max.connections.per.ip.overrides", "127.0.0.1:3")) == (0, None)
        _, configs = _describe(node.bootstrap, "1", ["max.connections.per.ip.overrides"])
        assert configs["max.connections.per.ip.overrides"].value == "127.0.0.1:3"
        time.sleep(0.3)  # the broker has seen the calls' own connections close
        refused = 0
        for _ in range(4):
            try:
                client = WireClient.connect(node.bootstrap)
                clients.append(client)
                client.call("ApiVersions", 0, client.request_class("ApiVersions")())
            except (OSError, ConnectionError, EOFError):
                refused += 1
        assert len(clients) - refused == 3 and refused >= 1
    finally:
        for client in clients:
            client.close()
        time.sleep(0.3)
        assert _incremental(node.bootstrap, "1", (1, "max.connections.per.ip.overrides", None)) == (0, None)


def test_survives_restart_and_kill(tmp_path: Path) -> None:
    """Stored in dynamic-broker-configs.json (replaced atomically): back after a clean restart and a kill -9."""
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        assert _incremental(proc.bootstrap, "1", (0, "num.io.threads", "12")) == (0, None)
        assert _incremental(proc.bootstrap, "", (0, "log.segment.bytes", "1048576")) == (0, None)
        proc.kill()
        proc.start()
        _, configs = _describe(proc.bootstrap, "1", ["num.io.threads", "log.segment.bytes"])
        assert (configs["num.io.threads"].value, configs["num.io.threads"].config_source) == (
            "12",
            DYNAMIC_BROKER,
        )
        assert configs["log.segment.bytes"].config_source == DYNAMIC_DEFAULT
        proc.stop()
        proc.restart()
        _, configs = _describe(proc.bootstrap, "1", ["num.io.threads"])
        assert configs["num.io.threads"].value == "12"
        # The thread pool may only double from its value in force: 12 -> 25 is refused.
        code, message = _incremental(proc.bootstrap, "1", (0, "num.io.threads", "25"))
        assert code == ErrorCode.INVALID_REQUEST and "double the current value 12" in (message or "")
    finally:
        proc.stop()


def test_a_damaged_file_stops_the_broker_with_a_clear_error(tmp_path: Path) -> None:
    """A damaged file is not silently dropped (that would lose the operator's settings): the broker exits,
    naming the file."""
    data = tmp_path / "data"
    data.mkdir()
    (data / FILE).write_text('{"version": 1, "broker": {')
    cmd = [
        sys.executable,
        "-m",
        "sluice",
        "broker",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data),
        "--admin-listen",
        "off",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"{FILE} is damaged" in done.stderr + done.stdout
