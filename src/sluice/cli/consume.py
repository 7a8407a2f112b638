"""`sluice consume`: messages out to a terminal, with kcat's flags (-o offsets, -f formats, -J, -e).

It reads in batches (``Consumer.consume(num_messages=...)``) and writes bytes to a buffered
binary stdout: per message only the formatter runs in Python, so a plain `-e` dump keeps up with kcat.
"""

from __future__ import annotations

import base64
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer

from sluice.cli.app import app
from sluice.cli.common import (
    DEFAULT_BOOTSTRAP,
    Bootstrap,
    Settings,
    client_config,
    end_on_authentication_failure,
    err_console,
    fail,
    metadata_serving,
    unescape,
)
from sluice.client.stuck import stuck_at

BATCH = 10_000  # messages per consume() call: large enough that the Python loop is not the bottleneck


# ----- consume: the -o offset grammar -----


class OffsetKind(StrEnum):
    BEGINNING = "beginning"
    END = "end"
    STORED = "stored"
    ABSOLUTE = "absolute"
    TAIL = "tail"
    START_TIME = "start-time"


@dataclass(frozen=True)
class StartSpec:
    kind: OffsetKind
    value: int = 0
    end_time_ms: int | None = None  # e@MS: stop each partition at its first message at or after this


def parse_offset(text: str) -> StartSpec:
    """kcat's -o: beginning|end|stored|N|-N|s@MS|e@MS."""
    t = text.strip()
    named = {"beginning": OffsetKind.BEGINNING, "end": OffsetKind.END, "stored": OffsetKind.STORED}
    if t in named:
        return StartSpec(named[t])
    try:
        if t.startswith("s@"):
            return StartSpec(OffsetKind.START_TIME, int(t[2:]))
        if t.startswith("e@"):
            return StartSpec(OffsetKind.BEGINNING, end_time_ms=int(t[2:]))
        number = int(t)
    except ValueError:
        raise typer.BadParameter(
            f"expected beginning, end, stored, N, -N, s@MS or e@MS, got {text!r}", param_hint="-o"
        ) from None
    if number < 0:
        return StartSpec(OffsetKind.TAIL, -number)
    return StartSpec(OffsetKind.ABSOLUTE, number)


# ----- consume: output formats -----

Formatter = Callable[[Any], bytes]


def _b(value: bytes | None) -> bytes:
    return value if value is not None else b""


def _headers_text(msg: Any) -> bytes:
    return b",".join(k.encode() + b"=" + _b(v) for k, v in msg.headers() or [])


def _length(value: bytes | None) -> bytes:
    return b"-1" if value is None else str(len(value)).encode()


_TOKENS: dict[str, Formatter] = {
    "t": lambda m: m.topic().encode(),
    "p": lambda m: str(m.partition()).encode(),
    "o": lambda m: str(m.offset()).encode(),
    "k": lambda m: _b(m.key()),
    "s": lambda m: _b(m.value()),
    "T": lambda m: str(m.timestamp()[1]).encode(),
    "h": _headers_text,
    "K": lambda m: _length(m.key()),
    "S": lambda m: _length(m.value()),
}


def compile_format(fmt: str) -> Formatter:
    """kcat's -f: %t %p %o %k %s %T %h %K %S, %% for a percent sign, with \\n/\\t escapes."""
    parts: list[bytes | Formatter] = []
    literal = ""
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%" and i + 1 < len(fmt):
            token = fmt[i + 1]
            if token == "%":
                literal += "%"
            elif token in _TOKENS:
                if literal:
                    parts.append(unescape(literal))
                    literal = ""
                parts.append(_TOKENS[token])
            else:
                raise typer.BadParameter(f"unknown format token %{token}", param_hint="-f")
            i += 2
            continue
        literal += c
        i += 1
    if literal:
        parts.append(unescape(literal))

    def render(msg: Any) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(msg) for p in parts)

    return render


def _text(b: bytes | None) -> str | None:
    if b is None:
        return None
    try:
        return b.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(b).decode()


def render_json(msg: Any) -> bytes:
    return (
        json.dumps(
            {
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "timestamp": msg.timestamp()[1],
                "key": _text(msg.key()),
                "value": _text(msg.value()),
                "headers": [{"key": k, "value": _text(v)} for k, v in (msg.headers() or [])],
            }
        ).encode()
        + b"\n"
    )


# ----- consume -----


@dataclass
class _EndTracker:
    """-e: which partitions still have messages before their end as it was at start."""

    ends: dict[int, int]  # partition -> high watermark at start
    open: set[int]

    def passed(self, partition: int, offset: int) -> None:
        if offset + 1 >= self.ends.get(partition, 0):
            self.open.discard(partition)

    def passed_batch(self, batch: list[Any]) -> None:
        """The same for a batch, looking only at each partition's last message (they come in order)."""
        if len(self.ends) == 1:
            self.passed(batch[-1].partition(), batch[-1].offset())
            return
        last: dict[int, int] = {}
        for msg in reversed(batch):
            last.setdefault(msg.partition(), msg.offset())
            if len(last) == len(self.ends):
                break
        for partition, offset in last.items():
            self.passed(partition, offset)


def _start_offsets(consumer: Any, topic: str, partitions: list[int], spec: StartSpec) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, TopicPartition

    if spec.kind is OffsetKind.START_TIME:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, spec.value) for p in partitions], timeout=15
        )
        # -1: every record is older than the time, so the partition starts at its end.
        return [
            TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found
        ]
    starts = []
    for p in partitions:
        if spec.kind is OffsetKind.BEGINNING:
            offset = OFFSET_BEGINNING
        elif spec.kind is OffsetKind.END:
            offset = OFFSET_END
        elif spec.kind is OffsetKind.STORED:
            offset = OFFSET_STORED
        elif spec.kind is OffsetKind.TAIL:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            offset = max(low, high - spec.value)
        else:
            offset = spec.value
        starts.append(TopicPartition(topic, p, offset))
    return starts


@app.command()
def consume(
    topic: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    setting: Settings = None,
    group: Annotated[
        str | None,
        typer.Option("--group", "-g", help="Consumer group: subscribe and commit (default: read directly)."),
    ] = None,
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", help="Only this partition (repeatable).")
    ] = None,
    offset: Annotated[
        str | None, typer.Option("--offset", "-o", help="beginning|end|stored|N|-N|s@MS|e@MS (kcat's -o).")
    ] = None,
    from_beginning: Annotated[bool, typer.Option(help="Same as -o beginning.")] = False,
    count: Annotated[int | None, typer.Option("--count", "-c", help="Stop after this many messages.")] = None,
    exit_at_end: Annotated[
        bool, typer.Option("--exit", "-e", help="Exit once every partition's end (as of start) is reached.")
    ] = False,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help="Output format: %t %p %o %k %s %T %h %K %S.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", "-J", help="One JSON object per message.")] = False,
    isolation: Annotated[
        str, typer.Option(help="read_committed or read_uncommitted (Kafka's isolation.level).")
    ] = "read_committed",
    timeout: Annotated[float | None, typer.Option(help="Stop after this many idle seconds.")] = None,
) -> None:
    """Print messages of a topic (kcat -C): value per line by default, or -f/-J."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message

    if isolation not in {"read_committed", "read_uncommitted"}:
        raise typer.BadParameter(f"unknown isolation level {isolation!r}", param_hint="--isolation")
    if count is not None and count < 0:
        raise typer.BadParameter("must be zero or more", param_hint="-c")
    spec = parse_offset(offset) if offset is not None else None
    if spec is None:
        spec = StartSpec(
            OffsetKind.BEGINNING if from_beginning else OffsetKind.STORED if group else OffsetKind.END
        )
    if spec.kind is OffsetKind.STORED and group is None:
        fail("-o stored needs a consumer group (-g GROUP)")
    render: Formatter | None
    if json_output:
        render = render_json
    elif fmt is None or fmt == "%s\\n":
        render = None  # the fast path: values joined by newlines
    else:
        render = compile_format(fmt)
    subscribe = (
        group is not None
        and not partition
        and spec.kind
        in {
            OffsetKind.BEGINNING,
            OffsetKind.END,
            OffsetKind.STORED,
        }
    )
    try:
        consumer = Consumer(
            client_config(
                bootstrap,
                setting,
                error_cb=end_on_authentication_failure,
                group_id=group or "sluice-cli-consume",
                enable_auto_commit=group is not None,
                auto_offset_reset="earliest" if spec.kind is OffsetKind.BEGINNING else "latest",
                isolation_level=isolation,
                enable_partition_eof=exit_at_end,
                # Prefetch deep: librdkafka stalls between fetches when its queue drains below the minimum.
                queued_min_messages=1_000_000,
                queued_max_messages_kbytes=256 * 1024,
                fetch_wait_max_ms=100,
            )
        )
    except KafkaException as exc:
        fail(f"bad client settings: {exc}")
    metadata = metadata_serving(consumer, 15)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        consumer.close()
        fail(f"topic {topic!r} does not exist")
        return
    available = sorted(described.partitions)
    chosen = sorted(set(partition)) if partition else available
    missing = [p for p in chosen if p not in available]
    if missing:
        consumer.close()
        fail(f"topic {topic!r} has no partition {', '.join(map(str, missing))}")
    tracker: _EndTracker | None = None
    if exit_at_end:
        from confluent_kafka import TopicPartition

        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in chosen}
        tracker = _EndTracker(ends, set(chosen))
    if subscribe:
        consumer.subscribe([topic])
    else:
        starts = _start_offsets(consumer, topic, chosen, spec)
        if tracker is not None:
            for tp in starts:
                # A partition that starts at or past its end (OFFSET_END is -1) has nothing to read.
                if tp.offset == -1 or tp.offset >= tracker.ends[tp.partition]:
                    tracker.open.discard(tp.partition)
            # ...and is not assigned at all: librdkafka could otherwise still be fetching it (an offset past
            # the end is first refused, then reset) when the consumer closes, and close() then waited for
            # that for up to a minute.
            starts = [tp for tp in starts if tp.partition in tracker.open]
        if starts:
            consumer.assign(starts)
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    out = sys.stdout.buffer
    end_time = spec.end_time_ms
    stopped_at_time: set[int] = set()
    unreadable: set[tuple[int, int]] = set()
    seen = 0
    idle_since = time.monotonic()
    fast = render is None and end_time is None and count is None
    message_error, message_value = Message.error, Message.value  # unbound: map() skips a lookup each
    try:
        while not stop["now"] and (count is None or seen < count):
            if tracker is not None and not tracker.open:
                break
            if end_time is not None and not subscribe and stopped_at_time >= set(chosen):
                break  # e@MS: every partition reached the end time
            want = BATCH if count is None else min(BATCH, count - seen)
            # consume(n, t) blocks until n messages or t: take what is queued now, else wait for one.
            batch = consumer.consume(num_messages=want, timeout=0) or consumer.consume(1, 0.5)
            if not batch:
                if timeout is not None and time.monotonic() - idle_since > timeout:
                    break
                continue
            idle_since = time.monotonic()
            if fast and not any(map(message_error, batch)):
                # The default output of a plain dump: no per-message Python beyond fetching the values.
                try:
                    out.write(b"\n".join(map(message_value, batch)))
                except TypeError:  # a null value among them
                    out.write(b"\n".join([m.value() or b"" for m in batch]))
                out.write(b"\n")
                out.flush()
                seen += len(batch)
                if tracker is not None:
                    tracker.passed_batch(batch)
                continue
            chunk: list[bytes] = []
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if tracker is not None:
                            tracker.open.discard(msg.partition())
                        continue
                    stuck = stuck_at(msg)
                    if stuck is not None:
                        # Said once; with -e the partition is done; the exit status says not everything was read.
                        where = (msg.partition(), msg.offset())
                        if where not in unreadable:
                            unreadable.add(where)
                            err_console.print(f"[red]error:[/red] partition {where[0]} of {topic} {stuck}")
                        if tracker is not None:
                            tracker.open.discard(msg.partition())
                        continue
                    err_console.print(f"[yellow]{err}[/yellow]")
                    continue
                if end_time is not None:
                    p = msg.partition()
                    if p in stopped_at_time or msg.timestamp()[1] >= end_time:
                        stopped_at_time.add(p)
                        if tracker is not None:
                            tracker.open.discard(p)
                        continue
                if render is None:
                    value = msg.value()
                    chunk.append(value if value is not None else b"")
                    chunk.append(b"\n")
                else:
                    chunk.append(render(msg))
                if tracker is not None:
                    tracker.passed(msg.partition(), msg.offset())
                seen += 1
                if count is not None and seen >= count:
                    break
            out.write(b"".join(chunk))
            out.flush()
    except BrokenPipeError:
        pass  # `| head`: the reader is gone, which is a normal way to stop
    finally:
        consumer.close()
    if unreadable:
        raise typer.Exit(1)
