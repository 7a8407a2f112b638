"""`sluice` command line: serve, broker, gateway, topics, groups, produce, consume, pipeline."""

from __future__ import annotations

import base64
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sluice.broker.config import BrokerConfig

app = typer.Typer(help="Kafka from any program: an embedded broker, a kafka-pixy-compatible gateway, PySpark jobs.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
topics_app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")
console = Console()
err_console = Console(stderr=True)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
Bootstrap = Annotated[str, typer.Option("--bootstrap", "-b", help="Kafka bootstrap servers (host:port,...)")]


def _split_hostport(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise typer.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint=option)
    return host.strip("[]"), int(port)


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _broker_config(listen: str, data_dir: str, advertise: str | None, config: Path | None) -> BrokerConfig:
    host, port = _split_hostport(listen, "--listen")
    adv_host, adv_port = _split_hostport(advertise, "--advertise") if advertise else (None, None)
    overrides: dict[str, Any] = {
        "listen_host": host,
        "listen_port": port,
        "data_dir": None if data_dir == ":memory:" else Path(data_dir),
        "advertised_host": adv_host,
        "advertised_port": adv_port,
    }
    if config is not None:
        return BrokerConfig.from_file(config, **overrides)
    return BrokerConfig(**{k: v for k, v in overrides.items() if v is not None or k == "data_dir"})


@app.command()
def broker(
    listen: Annotated[str, typer.Option(help="Address for Kafka clients.")] = DEFAULT_BOOTSTRAP,
    data_dir: Annotated[str, typer.Option(help="Where logs live (':memory:' keeps nothing).")] = "./sluice-data",
    advertise: Annotated[str | None, typer.Option(help="HOST:PORT told to clients, if not the listen address.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file of broker settings.")] = None,
    verbose: bool = False,
) -> None:
    """Run the embedded Kafka-compatible broker until SIGTERM/SIGINT."""
    from sluice.eventloop import run_event_loop
    from sluice.server.app import serve_broker

    _setup_logging(verbose)
    run_event_loop(serve_broker(_broker_config(listen, data_dir, advertise, config)))


@app.command()
def serve(
    kafka_listen: Annotated[str, typer.Option(help="Kafka listener.")] = DEFAULT_BOOTSTRAP,
    grpc_listen: Annotated[str, typer.Option(help="kafka-pixy gRPC listener.")] = "127.0.0.1:19091",
    http_listen: Annotated[str, typer.Option(help="kafka-pixy HTTP listener.")] = "127.0.0.1:19092",
    data_dir: Annotated[str, typer.Option(help="Where logs live.")] = "./sluice-data",
    config: Annotated[Path | None, typer.Option(help="YAML file of broker settings.")] = None,
    verbose: bool = False,
) -> None:
    """Run the broker and the gateway beside it, on loopback by default."""
    from sluice.eventloop import run_event_loop
    from sluice.server.serve import serve_all

    _setup_logging(verbose)
    broker_config = _broker_config(kafka_listen, data_dir, None, config)
    run_event_loop(serve_all(broker_config, grpc_listen=grpc_listen, http_listen=http_listen))


@app.command()
def gateway(
    config: Annotated[Path, typer.Option(help="kafka-pixy-style YAML: named clusters (proxies) and a default.")],
    grpc_listen: Annotated[str | None, typer.Option(help="Override the config's gRPC address.")] = None,
    http_listen: Annotated[str | None, typer.Option(help="Override the config's HTTP address.")] = None,
    verbose: bool = False,
) -> None:
    """Run the kafka-pixy-compatible gateway in front of one or more Kafka clusters."""
    from sluice.gateway.config import ConfigError
    from sluice.gateway.server import serve_forever

    _setup_logging(verbose)
    try:
        serve_forever(config, grpc_listen=grpc_listen, http_listen=http_listen)
    except (ConfigError, OSError) as exc:
        _fail(str(exc))


# ----- topics -----


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def _fail(message: str) -> None:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(1)


@topics_app.command("create")
def topics_create(
    name: str,
    partitions: Annotated[int, typer.Option("--partitions", "-p")] = 1,
    config: Annotated[list[str] | None, typer.Option("--config", "-c", help="KEY=VALUE, repeatable")] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> None:
    """Create a topic."""
    from confluent_kafka.admin import NewTopic

    configs = {}
    for item in config or []:
        key, sep, value = item.partition("=")
        if not sep:
            _fail(f"--config expects KEY=VALUE, got {item!r}")
        configs[key] = value
    admin = _admin(bootstrap)  # the futures need their client alive until they resolve
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)], request_timeout=15)
    try:
        futures[name].result()
    except Exception as exc:
        _fail(f"could not create {name}: {exc}")
    console.print(f"created topic {name} with {partitions} partition(s)")


@topics_app.command("list")
def topics_list(bootstrap: Bootstrap = DEFAULT_BOOTSTRAP, json_output: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List topics."""
    metadata = _admin(bootstrap).list_topics(timeout=15)
    names = sorted(metadata.topics)
    if json_output:
        print(json.dumps([{"topic": n, "partitions": len(metadata.topics[n].partitions)} for n in names]))
        return
    for name in names:
        console.print(f"{name}\t{len(metadata.topics[name].partitions)}")


@topics_app.command("describe")
def topics_describe(name: str, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
                    json_output: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Partitions, offsets and configs of a topic."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import ConfigResource

    admin = _admin(bootstrap)
    # Ask for all topics: naming one would auto-create it on brokers that allow that.
    metadata = admin.list_topics(timeout=15)
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        _fail(f"topic {name!r} does not exist")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sluice-cli", "enable.auto.commit": False})
    partitions = []
    try:
        for index in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(name, index), timeout=10)
            partitions.append({"partition": index, "leader": topic.partitions[index].leader, "start": low, "end": high})
    finally:
        consumer.close()
    resource = ConfigResource("topic", name)
    configs = {k: v.value for k, v in admin.describe_configs([resource])[resource].result().items()}
    if json_output:
        print(json.dumps({"topic": name, "partitions": partitions, "configs": configs}))
        return
    table = Table(title=f"topic {name}")
    for column in ("partition", "leader", "start offset", "end offset"):
        table.add_column(column)
    for p in partitions:
        table.add_row(str(p["partition"]), str(p["leader"]), str(p["start"]), str(p["end"]))
    console.print(table)
    for key, value in sorted(configs.items()):
        console.print(f"{key}={value}")


@topics_app.command("delete")
def topics_delete(name: str, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> None:
    """Delete a topic and its data."""
    admin = _admin(bootstrap)
    futures = admin.delete_topics([name], request_timeout=15)
    try:
        futures[name].result()
    except Exception as exc:
        _fail(f"could not delete {name}: {exc}")
    console.print(f"deleted topic {name}")


# ----- produce / consume -----


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
    key_separator: Annotated[str | None, typer.Option(help="Split each input line into KEY<sep>VALUE.")] = None,
    header: Annotated[list[str] | None, typer.Option(help="KEY=VALUE record header, repeatable.")] = None,
    partition: Annotated[int | None, typer.Option(help="Partition (default: by key).")] = None,
    value: Annotated[str | None, typer.Option(help="Send this one message instead of reading stdin lines.")] = None,
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
        kwargs: dict[str, Any] = {"key": msg_key.encode() if msg_key is not None else None, "value": msg_value.encode(),
                                  "headers": headers or None, "on_delivery": report}
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
        producer.poll(0)
        count += 1
    remaining = producer.flush(30)
    if failures or remaining:
        _fail(f"{len(failures) + remaining} of {count} messages not delivered: {failures[:3]}")
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
        return json.dumps({
            "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
            "timestamp": msg.timestamp()[1], "key": text(msg.key()), "value": text(msg.value()),
            "headers": [{"key": k, "value": text(v)} for k, v in (msg.headers() or [])],
        })
    value = msg.value()
    return value.decode(errors="replace") if value is not None else ""


@app.command()
def consume(
    topic: str,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    group: Annotated[str | None, typer.Option(help="Consumer group (default: none, read partitions directly).")] = None,
    from_beginning: bool = False,
    count: Annotated[int | None, typer.Option(help="Stop after this many messages.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Stop after this many idle seconds.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object per message.")] = False,
) -> None:
    """Print messages of a topic as they arrive."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group or "sluice-cli-consume",
        "enable.auto.commit": group is not None,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
    })
    if group is None:
        metadata = consumer.list_topics(timeout=15)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            _fail(f"topic {topic!r} does not exist")
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


def _mount_optional() -> None:
    """Sub-apps whose parts may be absent (pipeline needs pyspark only when its commands run)."""
    try:
        from sluice.groups_cli import app as groups_app

        app.add_typer(groups_app, name="groups")
    except ImportError:
        pass
    try:
        from sluice.pipeline.cli import app as pipeline_app

        app.add_typer(pipeline_app, name="pipeline")
    except ImportError:
        pass


_mount_optional()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
