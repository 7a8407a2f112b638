"""`sluice topics`: create, list, describe and delete topics on any Kafka cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer

from sluice.cli.app import app
from sluice.cli.common import (
    DEFAULT_BOOTSTRAP,
    Bootstrap,
    Settings,
    admin_client,
    client_config,
    console,
    fail,
    metadata_serving,
    new_client,
    parse_settings,
    serving,
)

topics_app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


@topics_app.command("create")
def topics_create(
    name: str,
    partitions: Annotated[int, typer.Option("--partitions", "-p")] = 1,
    config: Annotated[list[str] | None, typer.Option("--config", "-c", help="KEY=VALUE, repeatable")] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
) -> None:
    """Create a topic."""
    from confluent_kafka.admin import NewTopic

    configs = {}
    for item in config or []:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--config expects KEY=VALUE, got {item!r}")
        configs[key] = value
    admin = admin_client(bootstrap, setting)  # the futures need their client alive until they resolve
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)], request_timeout=15)
    try:
        serving(admin, futures[name].result, 20)
    except Exception as exc:
        fail(f"could not create {name}: {exc}")
    console.print(f"created topic {name} with {partitions} partition(s)")


@topics_app.command("list")
def topics_list(
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List topics."""
    admin = admin_client(bootstrap, setting)
    metadata = metadata_serving(admin, 15)
    names = sorted(metadata.topics)
    if json_output:
        print(json.dumps([{"topic": n, "partitions": len(metadata.topics[n].partitions)} for n in names]))
        return
    for name in names:
        console.print(f"{name}\t{len(metadata.topics[name].partitions)}")


@topics_app.command("describe")
def topics_describe(
    name: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    json_output: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Partitions, offsets and configs of a topic."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import ConfigResource

    admin = admin_client(bootstrap, setting)
    # Ask for all topics: naming one would auto-create it on brokers that allow that.
    metadata = metadata_serving(admin, 15)
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        fail(f"topic {name!r} does not exist")
    consumer = new_client(
        Consumer, client_config(bootstrap, setting, group_id="sluice-cli", enable_auto_commit=False)
    )
    partitions = []
    try:
        for index in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(name, index), timeout=10)
            partitions.append(
                {"partition": index, "leader": topic.partitions[index].leader, "start": low, "end": high}
            )
    finally:
        consumer.close()
    # Here, not at the top: importing sluice.storage loads the whole storage engine, which every other
    # command (consume included) would pay for at start-up.
    from sluice.storage.config import CLEANER_DIRTY_RATIO, CLEANER_LAST_CLEANED_MS

    resource = ConfigResource("topic", name)
    described = admin.describe_configs([resource])[resource]
    configs = {k: v.value for k, v in serving(admin, described.result, 20).items()}
    # A sluice broker reports compaction per partition in read-only entries; other brokers do not.
    status = (
        _cleaner_status(bootstrap, setting, name)
        if "compact" in (configs.get("cleanup.policy") or "")
        else {}
    )
    dirty = _per_partition(status.get(CLEANER_DIRTY_RATIO))
    cleaned = _per_partition(status.get(CLEANER_LAST_CLEANED_MS))
    compaction = bool(dirty or cleaned)
    for p in partitions:
        if compaction:
            p["dirty_ratio"] = float(dirty[p["partition"]]) if p["partition"] in dirty else None
            last = int(cleaned.get(p["partition"], "-1"))
            p["last_cleaned_ms"] = last
    if json_output:
        print(json.dumps({"topic": name, "partitions": partitions, "configs": configs}))
        return
    from rich.table import Table

    table = Table(title=f"topic {name}")
    columns = ["partition", "leader", "start offset", "end offset"]
    if compaction:
        columns += ["dirty ratio", "last cleaned"]
    for column in columns:
        table.add_column(column)
    for p in partitions:
        row = [str(p["partition"]), str(p["leader"]), str(p["start"]), str(p["end"])]
        if compaction:
            ratio = p["dirty_ratio"]
            row.append("-" if ratio is None else f"{ratio:.2f}")
            row.append(_when(p["last_cleaned_ms"]))
        table.add_row(*row)
    console.print(table)
    for key, value in sorted(configs.items()):
        console.print(f"{key}={value}")


def _cleaner_status(bootstrap: str, setting: list[str] | None, topic: str) -> dict[str, str | None]:
    """A sluice broker's read-only compaction entries of `topic`. It lists them only to a DescribeConfigs
    that names them, which confluent-kafka cannot send, so the wire client asks. {} when the broker has
    none (not sluice) or the wire client cannot connect with these settings (OAUTHBEARER, GSSAPI)."""
    from sluice.client.configs import describe_topic_configs
    from sluice.client.secure import SecureConnectError, connect_secure
    from sluice.errors import KafkaError, ProtocolError
    from sluice.storage.config import CLEANER_DIRTY_RATIO, CLEANER_LAST_CLEANED_MS

    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        with connect_secure(host.strip("[]"), int(port), parse_settings(setting), 10.0) as client:
            return describe_topic_configs(client, topic, [CLEANER_DIRTY_RATIO, CLEANER_LAST_CLEANED_MS])
    except (OSError, ValueError, SecureConnectError, KafkaError, ProtocolError):
        return {}


def _per_partition(value: str | None) -> dict[int, str]:
    """ "0=0.42,1=0.10" -> {0: "0.42", 1: "0.10"}."""
    result: dict[int, str] = {}
    for item in (value or "").split(","):
        index, sep, rest = item.partition("=")
        if sep and index.strip().isdigit():
            result[int(index)] = rest.strip()
    return result


def _when(ms: int) -> str:
    if ms < 0:
        return "never"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@topics_app.command("delete")
def topics_delete(name: str, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP, setting: Settings = None) -> None:
    """Delete a topic and its data."""
    admin = admin_client(bootstrap, setting)
    futures = admin.delete_topics([name], request_timeout=15)
    try:
        serving(admin, futures[name].result, 20)
    except Exception as exc:
        fail(f"could not delete {name}: {exc}")
    console.print(f"deleted topic {name}")
