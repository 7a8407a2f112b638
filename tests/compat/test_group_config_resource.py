"""GROUP config resources (KIP-848, Kafka 4.0): IncrementalAlterConfigs and DescribeConfigs name a consumer
group by id (resource type 32 on the wire) to set its own consumer.session.timeout.ms and
consumer.heartbeat.interval.ms. librdkafka's test 0081 expects this of every broker announcing 4.x, as sluice
does. Refusals carry Kafka's INVALID_CONFIG and texts; the configs survive a restart and a kill -9
(group-configs.json), and the KIP-848 coordinator hands members the group's heartbeat interval."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from sluice.client.wire import WireClient
from sluice.errors import ErrorCode
from sluice.testing import BrokerProcess

GROUP_SOURCE = 8  # ConfigSource.GROUP_CONFIG on the wire
DEFAULT = ConfigSource.DEFAULT_CONFIG.value
GROUP_TYPE = 32


def _group() -> str:
    return f"group-config-{uuid.uuid4().hex}"


def _set(admin: AdminClient, group: str, **configs: str) -> None:
    change = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    admin.incremental_alter_configs([change])[change].result(timeout=10)


def _describe(admin: AdminClient, group: str) -> dict[str, Any]:
    wanted = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([wanted])[wanted].result(timeout=10)


def _incremental(bootstrap: str, group: str, *ops: tuple[int, str, str | None]) -> tuple[int, str | None]:
    with WireClient.connect(bootstrap) as wire:
        R = wire.request_class("IncrementalAlterConfigs")
        configs = [R.AlterableConfig(name=k, config_operation=op, value=v) for op, k, v in ops]
        resource = R.AlterConfigsResource(resource_type=GROUP_TYPE, resource_name=group, configs=configs)
        (result,) = wire.call("IncrementalAlterConfigs", 1, R(resources=[resource])).responses
    return result.error_code, result.error_message


def test_a_group_config_is_set_and_described(ck_admin: AdminClient) -> None:
    group = _group()
    _set(ck_admin, group, consumer_session_timeout_ms="50000")
    configs = _describe(ck_admin, group)
    assert configs["consumer.session.timeout.ms"].value == "50000"
    assert "consumer.heartbeat.interval.ms" in configs


def test_sources_and_synonyms(ck_admin: AdminClient) -> None:
    """Unset configs show the broker's default (DEFAULT_CONFIG); a set one GROUP_CONFIG, then the broker
    setting it overrides among its synonyms. Deleting it brings the default back."""
    group = _group()
    before = _describe(ck_admin, group)
    assert set(before) >= {
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "share.session.timeout.ms",
        "share.record.lock.duration.ms",
        "streams.num.standby.replicas",
    }
    assert all(c.source == DEFAULT and c.is_default for c in before.values())
    _set(ck_admin, group, consumer_heartbeat_interval_ms="6000")
    interval = _describe(ck_admin, group)["consumer.heartbeat.interval.ms"]
    assert (interval.value, interval.source, interval.is_default) == ("6000", GROUP_SOURCE, False)
    assert [(s.name, s.source) for s in interval.synonyms.values()] == [
        ("consumer.heartbeat.interval.ms", GROUP_SOURCE),
        ("group.consumer.heartbeat.interval.ms", DEFAULT),
    ]
    delete = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "consumer.heartbeat.interval.ms", None, incremental_operation=AlterConfigOpType.DELETE
            )
        ],
    )
    ck_admin.incremental_alter_configs([delete])[delete].result(timeout=10)
    assert _describe(ck_admin, group)["consumer.heartbeat.interval.ms"].source == DEFAULT


@pytest.mark.parametrize(
    ("ops", "code", "message"),
    [
        ([(0, "no.such.config", "1")], ErrorCode.INVALID_CONFIG, "Unknown group config name: no.such.config"),
        (
            [(0, "consumer.session.timeout.ms", "soon")],
            ErrorCode.INVALID_CONFIG,
            "Invalid value soon for configuration consumer.session.timeout.ms: Not a number of type INT",
        ),
        (
            [(0, "consumer.session.timeout.ms", "0")],
            ErrorCode.INVALID_CONFIG,
            "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at least 1",
        ),
        (
            [(0, "consumer.session.timeout.ms", "600000")],
            ErrorCode.INVALID_CONFIG,
            "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms",
        ),
        (
            [(0, "consumer.heartbeat.interval.ms", "16000")],
            ErrorCode.INVALID_CONFIG,
            "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms",
        ),
        (
            [(0, "streams.num.standby.replicas", "3")],
            ErrorCode.INVALID_CONFIG,
            "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas",
        ),
        (
            [(0, "share.isolation.level", "dirty")],
            ErrorCode.INVALID_CONFIG,
            "Invalid value dirty for configuration share.isolation.level: "
            "String must be one of: read_committed, read_uncommitted",
        ),
        (
            [(2, "consumer.session.timeout.ms", "50000")],
            ErrorCode.INVALID_CONFIG,
            "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.",
        ),
    ],
)
def test_refusals_carry_kafkas_code_and_text(
    bootstrap: str, ck_admin: AdminClient, ops: list[tuple[int, str, str]], code: ErrorCode, message: str
) -> None:
    """A refused request changes nothing: the group still shows its defaults."""
    group = _group()
    assert _incremental(bootstrap, group, *ops) == (code, message)
    assert all(c.source == DEFAULT for c in _describe(ck_admin, group).values())


def test_the_client_sees_the_refusal(ck_admin: AdminClient) -> None:
    with pytest.raises(KafkaException) as caught:
        _set(ck_admin, _group(), consumer_session_timeout_ms="many")
    assert caught.value.args[0].code() == ErrorCode.INVALID_CONFIG


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("group-configs") / "data").start()
    yield proc
    proc.stop()


def test_survives_restart_and_kill(node: BrokerProcess) -> None:
    """Kept in group-configs.json (replaced atomically): back after a kill -9 and after a clean restart."""
    group = _group()
    _set(AdminClient({"bootstrap.servers": node.bootstrap}), group, consumer_session_timeout_ms="55000")
    node.kill()
    node.start()
    configs = _describe(AdminClient({"bootstrap.servers": node.bootstrap}), group)
    assert (configs["consumer.session.timeout.ms"].value, configs["consumer.session.timeout.ms"].source) == (
        "55000",
        GROUP_SOURCE,
    )
    assert node.stop() == 0
    node.restart()
    configs = _describe(AdminClient({"bootstrap.servers": node.bootstrap}), group)
    assert configs["consumer.session.timeout.ms"].value == "55000"


def _heartbeat_interval(bootstrap: str, group: str, topic: str) -> int:
    with WireClient.connect(bootstrap) as wire:
        request = wire.request_class("ConsumerGroupHeartbeat")(
            group_id=group,
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=[topic],
            topic_partitions=[],
        )
        response = wire.call("ConsumerGroupHeartbeat", 1, request)
        # Leave at once: the member must not keep the topic's partition from the consumer joining later.
        request.member_epoch, request.topic_partitions, request.subscribed_topic_names = -1, None, None
        left = wire.call("ConsumerGroupHeartbeat", 1, request)
    assert (response.error_code, left.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    return response.heartbeat_interval_ms


def test_kip848_members_get_the_groups_heartbeat_interval(
    node: BrokerProcess, topic_name: str, tmp_path: Path
) -> None:
    """A member of the group is told the group's interval from its next heartbeat on, also after a restart;
    a librdkafka consumer (group.protocol=consumer) in that group joins and consumes."""
    group, other = _group(), _group()
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    default = _heartbeat_interval(node.bootstrap, group, topic_name)
    wanted = "7000" if default != 7000 else "8000"
    _set(admin, group, consumer_heartbeat_interval_ms=wanted)
    assert _heartbeat_interval(node.bootstrap, group, topic_name) == int(wanted)
    assert _heartbeat_interval(node.bootstrap, other, topic_name) == default
    node.kill()
    node.start()
    assert _heartbeat_interval(node.bootstrap, group, topic_name) == int(wanted)

    producer = Producer({"bootstrap.servers": node.bootstrap})
    producer.produce(topic_name, b"configured")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic_name])
        message = None
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.value() == b"configured"
    finally:
        consumer.close()


def test_legacy_alter_configs_replaces_the_whole_set(ck_admin: AdminClient) -> None:
    """The legacy AlterConfigs takes a group too: the configs it names become the group's whole set."""
    group = _group()
    _set(ck_admin, group, consumer_session_timeout_ms="50000")
    legacy = ConfigResource(ResourceType.GROUP, group, set_config={"consumer.heartbeat.interval.ms": "6000"})
    ck_admin.alter_configs([legacy])[legacy].result(timeout=10)
    configs = _describe(ck_admin, group)
    assert (
        configs["consumer.heartbeat.interval.ms"].value,
        configs["consumer.heartbeat.interval.ms"].source,
    ) == (
        "6000",
        GROUP_SOURCE,
    )
    assert configs["consumer.session.timeout.ms"].source == DEFAULT


@pytest.mark.parametrize(
    "damage",
    [
        '{"version": 1, "groups": {',
        '{"version": 1, "groups": {"g": 5}}',
        '{"version": 1, "groups": {"g": {"consumer.session.timeout.ms": "x"}}}',
    ],
)
def test_a_damaged_file_stops_the_broker_with_a_clear_error(tmp_path: Path, damage: str) -> None:
    """Dropping a damaged file would silently lose the operator's settings: the broker exits, naming it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "group-configs.json").write_text(damage)
    cmd = [sys.executable, "-m", "sluice", "broker", "--listen", "127.0.0.1:0", "--data-dir", str(data)]
    done = subprocess.run([*cmd, "--admin-listen", "off"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "group-configs.json is damaged" in done.stderr + done.stdout


def test_a_full_disk_refuses_the_change_and_keeps_the_old_set(mount_tmpfs: Callable[[str], Path]) -> None:
    """The file cannot be written: KAFKA_STORAGE_ERROR, and the group keeps what it had; with space back,
    the change goes through."""
    disk = mount_tmpfs("16m")
    proc = BrokerProcess(disk / "data").start()
    try:
        group = _group()
        assert _incremental(proc.bootstrap, group, (0, "consumer.session.timeout.ms", "50000")) == (0, None)
        filler = disk / "filler"
        with filler.open("wb") as out, pytest.raises(OSError):
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        code, message = _incremental(proc.bootstrap, group, (0, "consumer.session.timeout.ms", "55000"))
        assert code == ErrorCode.KAFKA_STORAGE_ERROR and "saving the group configs failed" in (message or "")
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        assert _describe(admin, group)["consumer.session.timeout.ms"].value == "50000"
        filler.unlink()
        assert _incremental(proc.bootstrap, group, (0, "consumer.session.timeout.ms", "55000")) == (0, None)
        assert _describe(admin, group)["consumer.session.timeout.ms"].value == "55000"
    finally:
        proc.stop()
