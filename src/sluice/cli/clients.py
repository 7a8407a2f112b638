"""`sluice produce` and `sluice consume`: messages in and out from a terminal."""

from __future__ import annotations

import base64
import json
import signal
import sys
import time
from typing import Annotated, Any

import typer

from sluice.cli.app import app
from sluice.cli.common import DEFAULT_BOOTSTRAP, Bootstrap, err_console, fail


def _parse_header(item: str) -> tuple[str, bytes]:
    key, sep, value = item.partition("=")
    if not sep:
        raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--header")
    return key, value.encode()


@app.command()
def produce(
    topic: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    key: Annotated[str | None, typer.Option(help="Key of every message.")] = None,
    key_separator: Annotated[
        str | None, typer.Option(help="Split each input line into KEY<sep>VALUE.")
    ] = None,
    header: Annotated[list[str] | None, typer.Option(help="KEY=VALUE record header, repeatable.")] = None,
    partition: Annotated[int | None, typer.Option(help="Partition (default: by key).")] = None,
    value: Annotated[
        str | None, typer.Option(help="Send this one message instead of reading stdin lines.")
    ] = None,
    acks: Annotated[str, typer.Option(help="0, 1 or all")] = "all",
) -> None:
    """Produce messages: one per line of standard input (or --value)."""
    from confluent_kafka import Producer

    headers = [_parse_header(h) for h in header or []]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all"})
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    lines = [value] if value is not None else (line.rstrip("\n") for line in sys.stdin)
    count = 0
    for line in lines:
        msg_key: str | None = key
        msg_value = line
        if key_separator is not None and key_separator in line:
            msg_key, msg_value = line.split(key_separator, 1)
        kwargs: dict[str, Any] = {
            "key": msg_key.encode() if msg_key is not None else None,
            "value": msg_value.encode(),
            "headers": headers or None,
            "on_delivery": report,
        }
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
        producer.poll(0)
        count += 1
    remaining = producer.flush(30)
    if failures or remaining:
        fail(f"{len(failures) + remaining} of {count} messages not delivered: {failures[:3]}")
    err_console.print(f"produced {count} message(s) to {topic}")


def _render(msg: Any, json_output: bool) -> str:
    if json_output:

        def text(b: bytes | None) -> str | None:
            if b is None:
                return None
            try:
                return b.decode()
            except UnicodeDecodeError:
                return "base64:" + base64.b64encode(b).decode()

        return json.dumps(
            {
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "timestamp": msg.timestamp()[1],
                "key": text(msg.key()),
                "value": text(msg.value()),
                "headers": [{"key": k, "value": text(v)} for k, v in (msg.headers() or [])],
            }
        )
    value = msg.value()
    return value.decode(errors="replace") if value is not None else ""


@app.command()
def consume(
    topic: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    group: Annotated[
        str | None, typer.Option(help="Consumer group (default: none, read partitions directly).")
    ] = None,
    from_beginning: bool = False,
    count: Annotated[int | None, typer.Option(help="Stop after this many messages.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Stop after this many idle seconds.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object per message.")] = False,
) -> None:
    """Print messages of a topic as they arrive."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or "sluice-cli-consume",
            "enable.auto.commit": group is not None,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
        }
    )
    if group is None:
        metadata = consumer.list_topics(timeout=15)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            fail(f"topic {topic!r} does not exist")
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in metadata.topics[topic].partitions])
    else:
        consumer.subscribe([topic])
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    seen = 0
    idle_since = time.monotonic()
    try:
        while not stop["now"] and (count is None or seen < count):
            msg = consumer.poll(0.5)
            if msg is None:
                if timeout is not None and time.monotonic() - idle_since > timeout:
                    break
                continue
            if msg.error():
                err_console.print(f"[yellow]{msg.error()}[/yellow]")
                continue
            idle_since = time.monotonic()
            print(_render(msg, json_output), flush=True)
            seen += 1
    finally:
        consumer.close()
