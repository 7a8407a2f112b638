"""What the `sluice groups` commands share: clients, group and offset lookups, errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from sluice.cli.common import (
    admin_client,
    client_config,
    err_console,
    metadata_serving,
    new_client,
    parse_settings,
    serving,
)
from sluice.client.group_states import state_name

# Table cells wrap long ids onto more lines instead of cutting them short: a truncated member id is useless.
OVERFLOW = "fold"

REQUEST_TIMEOUT_S = 15.0
# -X settings of the running command, for every client it makes (set once per command by _use).
_client_settings: list[str] = []
JsonOutput = Annotated[bool, typer.Option("--json", help="Machine-readable JSON instead of tables.")]


def _fail(message: str) -> None:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


def _use(settings: list[str] | None) -> None:
    _client_settings[:] = settings or []
    parse_settings(_client_settings)  # a malformed -X fails here, before any client is made


def _admin(bootstrap: str) -> Any:
    return admin_client(bootstrap, _client_settings)


@contextmanager
def _offsets_reader(bootstrap: str) -> Iterator[Any]:
    """A Consumer that never subscribes, so it never joins any group: only for offset lookups."""
    from confluent_kafka import Consumer

    consumer = new_client(
        Consumer,
        client_config(
            bootstrap,
            _client_settings,
            group_id="sluice-groups-cli",
            enable_auto_commit=False,
            socket_timeout_ms=10000,
        ),
    )
    try:
        yield consumer
    finally:
        consumer.close()


def _kafka_error(exc: BaseException) -> Any:
    """The KafkaError inside a KafkaException from a future, or None."""
    args = getattr(exc, "args", ())
    return args[0] if args and hasattr(args[0], "code") else None


# ----- lookups -----


def _describe_group(admin: Any, group: str) -> Any | None:
    """The group's ConsumerGroupDescription, or None if the broker does not know it."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        described = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)[group]
        description = serving(admin, described.result, REQUEST_TIMEOUT_S + 5)
    except KafkaException as exc:
        error = _kafka_error(exc)
        if error is not None and error.code() == KafkaError.GROUP_ID_NOT_FOUND:
            return None
        raise
    # Brokers before DescribeGroups v6 answer an unknown group with state Dead and no error.
    if state_name(description.state) == "Dead" and not description.members:
        return None
    return description


def _committed_offsets(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions(group)]
    listed = admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group]
    result = serving(admin, listed.result, REQUEST_TIMEOUT_S + 5)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}


def _watermarks(consumer: Any, topic: str, partition: int) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S)


def _existing_partitions(admin: Any) -> set[tuple[str, int]]:
    """Every partition the cluster has now (one Metadata request for all topics, which creates none)."""
    metadata = metadata_serving(admin, REQUEST_TIMEOUT_S)
    return {
        (name, partition)
        for name, topic in metadata.topics.items()
        if topic.error is None
        for partition in topic.partitions
    }


def _topic_partitions(admin: Any, topic: str) -> list[int]:
    # All topics, not list_topics(topic=...): asking for one by name lets the broker auto-create it.
    metadata = metadata_serving(admin, REQUEST_TIMEOUT_S)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        _fail(f"topic {topic!r} does not exist")
    return sorted(described.partitions)


def _table(title: str, *columns: str) -> Any:
    """A rich Table whose cells wrap long ids onto more lines (OVERFLOW) rather than cut them."""
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow=OVERFLOW)
    return table


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _admin_result(status: int, body: Any, what: str) -> Any:
    if 200 <= status < 300:
        return body
    detail = body.get("message", body) if isinstance(body, dict) else body
    name = body.get("error", status) if isinstance(body, dict) else status
    _fail(f"{what}: {name}: {detail}")
    return None
