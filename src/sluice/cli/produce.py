"""`sluice produce`: messages in from a terminal (a value per line or per -D delimiter, keys split off with -K,
headers with -H), with kcat's flags."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any, BinaryIO

import typer

from sluice.cli.app import app
from sluice.cli.common import (
    DEFAULT_BOOTSTRAP,
    Bootstrap,
    Settings,
    client_config,
    err_console,
    fail,
    unescape,
)

MAX_DELIMITER = 64


def _parse_header(item: str) -> tuple[str, bytes]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="-H/--header")
    return key, value.encode()


def _records(stream: BinaryIO, delimiter: bytes) -> Iterator[bytes]:
    """Split a byte stream on `delimiter` without reading it all first; a trailing delimiter ends the last."""
    pending = b""
    while chunk := stream.read(1 << 16):
        pending += chunk
        *complete, pending = pending.split(delimiter)
        yield from complete
    if pending:
        yield pending


@app.command()
def produce(
    topic: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    key: Annotated[str | None, typer.Option("--key", "-k", help="Key of every message.")] = None,
    key_separator: Annotated[
        str | None,
        typer.Option("--key-separator", "-K", help="Split each message into KEY<delim>VALUE (kcat -K)."),
    ] = None,
    delimiter: Annotated[
        str, typer.Option("--delimiter", "-D", help="Message delimiter in the input (kcat -D).")
    ] = "\\n",
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="KEY=VALUE record header, repeatable.")
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Partition (default: by key).")
    ] = None,
    value: Annotated[
        str | None, typer.Option(help="Send this one message instead of reading standard input.")
    ] = None,
    acks: Annotated[str, typer.Option(help="0, 1 or all (-1)")] = "all",
) -> None:
    """Produce messages: one per line of standard input (or per -D delimiter, or --value).

    Each message that fails is reported on stderr with its number and the Kafka error name; the exit
    status is 1 if any failed.
    """
    from confluent_kafka import KafkaException, Producer

    if acks not in {"0", "1", "all", "-1"}:
        raise typer.BadParameter(f"expected 0, 1, all or -1, got {acks!r}", param_hint="--acks")
    delim = unescape(delimiter)
    key_delim = unescape(key_separator) if key_separator is not None else None
    if not delim or len(delim) > MAX_DELIMITER or (key_delim is not None and not key_delim):
        raise typer.BadParameter(f"delimiters must be 1 to {MAX_DELIMITER} bytes")
    headers = [_parse_header(h) for h in header or []]
    idempotent = acks in {"all", "-1"}
    try:
        producer = Producer(
            client_config(bootstrap, setting, acks=acks, enable_idempotence=idempotent, linger_ms=5)
        )
    except KafkaException as exc:
        fail(f"bad client settings: {exc}")
    failures = 0
    number = {"sent": 0}

    def report_for(index: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            nonlocal failures
            if err is not None:
                failures += 1
                err_console.print(
                    f"message {index}: {err.name()}: {err.str()}", markup=False, highlight=False
                )

        return report

    records = iter([value.encode()]) if value is not None else _records(sys.stdin.buffer, delim)
    const_key = key.encode() if key is not None else None
    for record in records:
        msg_key = const_key
        msg_value = record
        if key_delim is not None and key_delim in record:
            msg_key, msg_value = record.split(key_delim, 1)
        index = number["sent"]
        kwargs: dict[str, Any] = {"key": msg_key, "value": msg_value, "on_delivery": report_for(index)}
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain it
            except KafkaException as exc:
                failures += 1
                error = exc.args[0]
                err_console.print(f"message {index}: {error.name()}: {error.str()}", markup=False)
                break
        number["sent"] += 1
        producer.poll(0)
    remaining = producer.flush(30)
    count = number["sent"]
    if failures or remaining:
        fail(f"{failures + remaining} of {count} messages not delivered")
    err_console.print(f"produced {count} message(s) to {topic}")
