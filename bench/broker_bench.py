"""sluice vs Tansu, side by side: produce, consume, end-to-end latency and (optionally) RSS.

    .venv/bin/python bench/broker_bench.py                      # full scale, 3 rounds
    .venv/bin/python bench/broker_bench.py --scale 0.1 --rounds 2 --json-out /tmp/bench.json
    .venv/bin/python bench/broker_bench.py --rounds 0 --rss     # only sluice's RSS holding 1 GB

Each round runs the whole workload on a freshly started sluice, then on a freshly started Tansu
(memory engine), so the two alternate and share whatever else the machine is doing. Figures are medians
over rounds; the broker's CPU per message comes from /proc/<pid>/stat. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka import libversion as rdkafka_version
from confluent_kafka import version as confluent_version
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BROKERS,
    Broker,
    SluiceBroker,
    TansuBroker,
    free_port,
    median,
    mem_available_bytes,
    percentile,
    ratio,
)

perf_counter = time.perf_counter
KIB = 1024
MB = 1_000_000  # throughput and sizes in the tables are decimal megabytes

# --- workload -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProduceSpec:
    count: int
    size: int
    acks: str  # "1" or "all"
    compression: str  # "none" or "lz4"

    @property
    def size_label(self) -> str:
        return f"{self.size} B" if self.size < KIB else f"{self.size // KIB} KiB"

    @property
    def name(self) -> str:
        return f"produce {self.size_label} acks={self.acks} {self.compression}"

    @property
    def topic(self) -> str:
        return f"p-{self.size}-acks{self.acks}-{self.compression}"


def produce_specs(scale: float) -> list[ProduceSpec]:
    specs = []
    for count, size in ((1_000_000, 100), (200_000, KIB)):
        for acks in ("1", "all"):
            for compression in ("none", "lz4"):
                specs.append(ProduceSpec(max(1000, int(count * scale)), size, acks, compression))
    return specs


_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "order",
    "payment",
    "user",
    "event",
    "click",
    "view",
    "cart",
    "checkout",
    "session",
    "device",
    "region",
    "status",
    "ok",
    "error",
    "retry",
]


def make_values(size: int, n: int = 512, seed: int = 7) -> list[bytes]:
    """`n` distinct payloads of exactly `size` bytes: a random word salad (lz4 gets roughly 2:1) with a
    unique prefix."""
    rnd = random.Random(seed)
    values = []
    for i in range(n):
        text = f"{i:08d} " + " ".join(rnd.choice(_WORDS) for _ in range(size // 4 + 4))
        values.append(text.encode()[:size])
    return values


# --- results ------------------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: str
    broker: str
    round: int
    messages: int = 0
    seconds: float = 0.0
    payload_bytes: int = 0
    broker_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def msg_per_s(self) -> float | None:
        return self.messages / self.seconds if self.messages and self.seconds > 0 else None

    @property
    def mb_per_s(self) -> float | None:
        return self.payload_bytes / MB / self.seconds if self.messages and self.seconds > 0 else None

    @property
    def broker_us_per_msg(self) -> float | None:
        return self.broker_cpu_s / self.messages * 1e6 if self.messages else None

    @property
    def client_us_per_msg(self) -> float | None:
        return self.client_cpu_s / self.messages * 1e6 if self.messages else None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            msg_per_s=self.msg_per_s,
            mb_per_s=self.mb_per_s,
            broker_us_per_msg=self.broker_us_per_msg,
            client_us_per_msg=self.client_us_per_msg,
        )
        return out


def client_cpu() -> float:
    t = os.times()
    return t.user + t.system


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- the produce() loop, shared by the broker scenarios and the client ceiling ---------------------------


def produce_loop(producer: Producer, topic: str, values: list[bytes], count: int) -> None:
    """`count` produce() calls; on a full local queue wait for room and retry. Callbacks are served every
    16k messages (only failed deliveries call back: delivery.report.only.error)."""
    produce = producer.produce
    poll = producer.poll
    nv = len(values)
    for i in range(count):
        value = values[i % nv]
        try:
            produce(topic, value)
        except BufferError:
            while True:
                poll(0.05)
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    continue
        if not i & 0x3FFF:
            poll(0)


def producer_config(
    bootstrap: str, acks: str, compression: str, on_error: Callable[..., None]
) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "compression.type": compression,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 10_000_000,
        "queue.buffering.max.kbytes": 4 * 1024 * 1024,  # 4 GiB: never the limit here
        "delivery.report.only.error": True,
        "on_delivery": on_error,
        "log_level": 4,
    }


def client_ceiling(spec_count: int, size: int, values: list[bytes], rnd: int) -> Result:
    """The produce() loop alone: a producer whose only bootstrap address refuses connections, so nothing
    is sent, nothing is delivered and the local queue only grows. Times just the calls."""
    failed = [0]

    def on_error(err: KafkaError | None, msg: Message) -> None:
        failed[0] += 1

    conf = producer_config(f"127.0.0.1:{free_port()}", "1", "none", on_error)
    conf.update({"log_level": 0, "reconnect.backoff.ms": 10_000, "reconnect.backoff.max.ms": 10_000})
    producer = Producer(conf)
    c0 = client_cpu()
    t0 = perf_counter()
    produce_loop(producer, "ceiling", values, spec_count)
    seconds = perf_counter() - t0
    c1 = client_cpu()
    producer.purge(in_queue=True, in_flight=True)
    producer.flush(0)
    del producer
    return Result(
        f"client produce() ceiling {size} B" if size < KIB else f"client produce() ceiling {size // KIB} KiB",
        "client",
        rnd,
        messages=spec_count,
        seconds=seconds,
        payload_bytes=spec_count * size,
        client_cpu_s=c1 - c0,
    )


def run_produce(broker: Broker, spec: ProduceSpec, values: list[bytes], rnd: int) -> Result:
    failed = [0]

    def on_error(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed[0] += 1

    producer = Producer(producer_config(broker.bootstrap, spec.acks, spec.compression, on_error))
    producer.list_topics(spec.topic, timeout=30)  # connection and metadata before the clock starts
    (u0, s0), c0 = broker.cpu_times(), client_cpu()
    t0 = perf_counter()
    produce_loop(producer, spec.topic, values, spec.count)
    remaining = producer.flush(600)
    seconds = perf_counter() - t0
    (u1, s1), c1 = broker.cpu_times(), client_cpu()
    b0, b1 = u0 + s0, u1 + s1
    if remaining:
        producer.purge(in_queue=True, in_flight=True)
        producer.flush(5)
    delivered = spec.count - failed[0] - remaining
    res = Result(
        spec.name,
        broker.name,
        rnd,
        messages=delivered,
        seconds=seconds,
        payload_bytes=delivered * spec.size,
        broker_cpu_s=b1 - b0,
        client_cpu_s=c1 - c0,
        extra={
            "sent": spec.count,
            "failed": failed[0],
            "undelivered_at_timeout": remaining,
            "broker_user_s": u1 - u0,
            "broker_sys_s": s1 - s0,
        },
    )
    if delivered != spec.count:
        res.error = f"{spec.count - delivered} of {spec.count} not delivered"
    return res


# --- consume ------------------------------------------------------------------------------------------


def run_consume(
    broker: Broker, topic: str, expected: int, size: int, mode: str, rnd: int, stall_timeout: float = 30.0
) -> Result:
    """Read `expected` messages from the start of `topic` (one partition), by assign or by subscribe.
    The clock (and the broker CPU meter) starts at assign(), or for subscribe when the group hands over
    the partition (on_assign), and stops at the last message; time to the first message is kept apart
    (for subscribe it holds the group join)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "log_level": 4,
        "group.id": f"bench-{mode}-{topic}-{rnd}-{time.monotonic_ns()}",
        # librdkafka stops fetching for fetch.queue.backoff.ms (1 s by default) whenever its local queue
        # holds queued.min.messages (100k); at 100 B this loop drains that in well under a second, so with
        # the default both brokers sat idle most of the scenario and the clock timed librdkafka's sleeps.
        "fetch.queue.backoff.ms": 10,
    }
    if mode == "assign":
        conf["enable.auto.commit"] = False
    else:
        # librdkafka's rebalance timeout is max.poll.interval.ms (300 s by default); Tansu holds a
        # JoinGroup for a while, so keep these short.
        conf.update(
            {"auto.offset.reset": "earliest", "session.timeout.ms": 6000, "max.poll.interval.ms": 10000}
        )
    consumer = Consumer(conf)
    label = f"consume {'1 KiB' if size == KIB else f'{size} B'} {mode}"
    start: list[float] = []  # [perf_counter, broker cpu] when the partition is ours

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions and not start:
            start.extend((perf_counter(), broker.cpu_seconds()))

    c0 = client_cpu()
    t0 = perf_counter()
    if mode == "assign":
        start.extend((t0, broker.cpu_seconds()))
        consumer.assign([TopicPartition(topic, 0, 0)])
    else:
        consumer.subscribe([topic], on_assign=on_assign)
    count = 0
    nbytes = 0
    t_first = t_last = None
    last_progress = perf_counter()
    error = None
    try:
        while count < expected:
            # Never ask for more than what is left: consume() waits for the full count or the timeout.
            batch = consumer.consume(min(1000, expected - count), 0.5)
            now = perf_counter()
            for msg in batch:
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        error = str(msg.error())
                    continue
                count += 1
                nbytes += len(msg.value() or b"")
            if batch:
                if t_first is None:
                    t_first = now
                t_last = now
                last_progress = now
            elif now - last_progress > stall_timeout:
                error = f"stalled at {count} of {expected}"
                break
    finally:
        b1, c1 = broker.cpu_seconds(), client_cpu()
        consumer.close()
    t_start, b0 = start if start else (t0, b1)
    seconds = (t_last - t_start) if t_last is not None else 0.0
    res = Result(
        label,
        broker.name,
        rnd,
        messages=count,
        seconds=seconds,
        payload_bytes=nbytes,
        broker_cpu_s=b1 - b0,
        client_cpu_s=c1 - c0,
        extra={
            "expected": expected,
            "time_to_assignment_s": t_start - t0,
            "time_to_first_message_s": (t_first - t0) if t_first is not None else None,
            "total_s": (t_last or t0) - t0,
        },
    )
    if count < expected and error is None:
        error = f"read {count} of {expected}"
    res.error = error
    return res


# --- end-to-end latency -------------------------------------------------------------------------------


def run_latency(
    broker: Broker, rate: float, duration: float, rnd: int, warmup: float = 1.0, size: int = 100
) -> Result:
    """A producer thread paced at `rate` msg/s (acks=all, linger.ms=0) writes perf_counter() into each
    value; a consumer thread (assign, offset 0, librdkafka fetch defaults) records receive - send.
    The first `warmup` seconds are sent but not counted."""
    topic = "latency"
    total = int(rate * (warmup + duration))
    n_warm = int(rate * warmup)
    latencies: list[float] = []
    done = threading.Event()
    consumer_ready = threading.Event()
    errors: list[str] = []
    pad = b"x" * max(0, size - 9)

    def consume() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"lat-{rnd}",
                "enable.auto.commit": False,
                "log_level": 4,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.consume(1, 0.5)  # connect and start fetching
        consumer_ready.set()
        seen = 0
        deadline = None
        try:
            while seen < total:
                msg = consumer.poll(0.1)  # returns as soon as one message is there
                now = perf_counter()
                if msg is not None and msg.error() is None:
                    seen += 1
                    warm, sent = struct.unpack_from("<?d", msg.value() or b"")
                    if not warm:
                        latencies.append(now - sent)
                if done.is_set():
                    deadline = deadline or now + 10.0
                    if now > deadline:
                        errors.append(f"latency consumer got {seen} of {total}")
                        break
        finally:
            consumer.close()

    failed = [0]

    def on_error(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed[0] += 1

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "delivery.report.only.error": True,
            "on_delivery": on_error,
            "log_level": 4,
        }
    )
    producer.list_topics(topic, timeout=30)
    consumer_ready.wait(30)
    b0 = broker.cpu_seconds()
    t0 = perf_counter()
    for i in range(total):
        target = t0 + i / rate
        delay = target - perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, struct.pack("<?d", i < n_warm, perf_counter()) + pad)
        producer.poll(0)
    producer.flush(30)
    done.set()
    thread.join(30)
    b1 = broker.cpu_seconds()
    lat = sorted(latencies)
    extra: dict[str, Any] = {"rate": rate, "duration_s": duration, "samples": len(lat), "failed": failed[0]}
    if lat:
        extra.update(
            p50_ms=percentile(lat, 50) * 1e3,
            p99_ms=percentile(lat, 99) * 1e3,
            max_ms=lat[-1] * 1e3,
            mean_ms=sum(lat) / len(lat) * 1e3,
        )
    res = Result(
        f"latency {rate:.0f} msg/s",
        broker.name,
        rnd,
        messages=len(lat),
        seconds=perf_counter() - t0,
        payload_bytes=len(lat) * size,
        broker_cpu_s=b1 - b0,
        extra=extra,
    )
    # CPU per message over everything sent, warm-up included (it ran while the meter was on).
    res.extra["broker_us_per_msg_sent"] = (b1 - b0) / total * 1e6
    if errors or failed[0]:
        res.error = "; ".join(errors + ([f"{failed[0]} failed"] if failed[0] else []))
    return res


# --- RSS ----------------------------------------------------------------------------------------------


def run_rss(broker: Broker, total_bytes: int, values: list[bytes]) -> dict[str, Any]:
    """Produce `total_bytes` of 1 KiB messages (acks=1, no compression), then read them all back, and
    report the broker's RSS along the way."""
    spec = ProduceSpec(total_bytes // KIB, KIB, "1", "none")
    create_topics(broker, [spec.topic])
    out: dict[str, Any] = {
        "broker": broker.name,
        "payload_bytes": spec.count * KIB,
        "rss_idle": broker.rss_bytes(),
    }
    t0 = perf_counter()
    produced = run_produce(broker, spec, values, 0)
    out["produce"] = produced.as_json()
    out["rss_after_produce"] = broker.rss_bytes()
    time.sleep(2)
    out["rss_after_produce_2s"] = broker.rss_bytes()
    consumed = run_consume(broker, spec.topic, produced.messages, KIB, "assign", 0)
    out["consume"] = consumed.as_json()
    out["rss_after_consume"] = broker.rss_bytes()
    out["peak_rss"] = broker.peak_rss_bytes()
    out["seconds"] = perf_counter() - t0
    return out


# --- orchestration ------------------------------------------------------------------------------------


def create_topics(broker: Broker, topics: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in topics], operation_timeout=30)
    for topic, fut in futures.items():
        try:
            fut.result(60)
        except Exception as exc:  # an existing topic is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"create topic {topic} on {broker.name}: {exc}") from exc


def make_broker(name: str, args: argparse.Namespace) -> Broker:
    if name == "sluice":
        return SluiceBroker(args.data_root)
    return TansuBroker()


def guarded(results: list[Result], scenario: str, broker: str, rnd: int, fn: Callable[[], Result]) -> Result:
    try:
        res = fn()
    except Exception as exc:
        traceback.print_exc()
        res = Result(scenario, broker, rnd, error=f"{type(exc).__name__}: {exc}")
    results.append(res)
    parts = [f"[round {rnd} {broker:6}] {res.scenario:34}"]
    if res.msg_per_s:
        parts.append(
            f"{res.messages:>9} msg {res.seconds:7.2f} s {res.msg_per_s:10.0f} msg/s {res.mb_per_s:7.2f} MB/s"
        )
    if res.broker_cpu_s:
        parts.append(f"broker {res.broker_us_per_msg:6.1f} us/msg")
    if res.client_cpu_s:
        parts.append(f"client {res.client_us_per_msg:6.1f} us/msg")
    if "p50_ms" in res.extra:
        parts.append(
            f"p50 {res.extra['p50_ms']:.2f} ms p99 {res.extra['p99_ms']:.2f} ms "
            f"max {res.extra['max_ms']:.2f} ms"
        )
    if res.error:
        parts.append(f"ERROR {res.error}")
    log(" ".join(parts))
    return res


def run_broker_round(
    name: str,
    rnd: int,
    args: argparse.Namespace,
    specs: list[ProduceSpec],
    values: dict[int, list[bytes]],
    results: list[Result],
) -> None:
    broker = make_broker(name, args)
    t_start = perf_counter()
    broker.start()
    try:
        log(
            f"[round {rnd} {name:6}] started pid {broker.pid} on {broker.bootstrap} "
            f"({perf_counter() - t_start:.1f} s), rss {broker.rss_bytes() / MB:.0f} MB"
        )
        create_topics(broker, [s.topic for s in specs] + ["latency"])
        delivered: dict[str, int] = {}
        for spec in specs:
            res = guarded(
                results,
                spec.name,
                name,
                rnd,
                lambda spec=spec: run_produce(broker, spec, values[spec.size], rnd),
            )
            delivered[spec.topic] = res.messages
        # Read back the acks=all, uncompressed topics of each size.
        for spec in specs:
            if spec.acks != "all" or spec.compression != "none" or not delivered.get(spec.topic):
                continue
            for mode in ("assign", "subscribe"):
                label = f"consume {spec.size_label} {mode}"
                guarded(
                    results,
                    label,
                    name,
                    rnd,
                    lambda spec=spec, mode=mode: run_consume(
                        broker, spec.topic, delivered[spec.topic], spec.size, mode, rnd
                    ),
                )
        if args.latency_seconds > 0:
            guarded(
                results,
                f"latency {args.latency_rate:.0f} msg/s",
                name,
                rnd,
                lambda: run_latency(broker, args.latency_rate, args.latency_seconds, rnd),
            )
        rss = broker.rss_bytes()
        results.append(Result("broker rss at end of round", name, rnd, extra={"rss_bytes": rss}))
        log(
            f"[round {rnd} {name:6}] rss at end {rss / MB:.0f} MB; round took {perf_counter() - t_start:.0f} s"
        )
    finally:
        broker.stop()


# --- report -------------------------------------------------------------------------------------------


def summarize(results: list[Result]) -> dict[str, Any]:
    by: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        by.setdefault((r.scenario, r.broker), []).append(r)
    scenarios: list[str] = []
    for r in results:
        if r.scenario not in scenarios:
            scenarios.append(r.scenario)
    summary: dict[str, Any] = {}
    for sc in scenarios:
        entry: dict[str, Any] = {}
        for broker in ("sluice", "tansu", "client"):
            runs = [r for r in by.get((sc, broker), []) if r.error is None]
            all_runs = by.get((sc, broker), [])
            if not all_runs:
                continue
            med: dict[str, Any] = {
                "rounds_ok": len(runs),
                "rounds": len(all_runs),
                "msg_per_s": median(r.msg_per_s for r in runs),
                "mb_per_s": median(r.mb_per_s for r in runs),
                "broker_us_per_msg": median(r.broker_us_per_msg for r in runs)
                if broker != "client"
                else None,
                "client_us_per_msg": median(r.client_us_per_msg for r in runs),
                "errors": [r.error for r in all_runs if r.error],
            }
            for key in (
                "p50_ms",
                "p99_ms",
                "max_ms",
                "time_to_assignment_s",
                "time_to_first_message_s",
                "rss_bytes",
            ):
                vals = [r.extra.get(key) for r in all_runs if r.extra.get(key) is not None]
                if vals:
                    med[key] = median(vals)
            shares = [
                r.extra["broker_sys_s"] / r.broker_cpu_s
                for r in runs
                if r.broker_cpu_s and "broker_sys_s" in r.extra
            ]
            if shares:
                med["broker_sys_share"] = median(shares)
            entry[broker] = med
        s, t = entry.get("sluice", {}), entry.get("tansu", {})
        entry["ratio_sluice_over_tansu"] = {
            "throughput": ratio(s.get("msg_per_s"), t.get("msg_per_s")),
            "broker_cpu_per_msg": ratio(s.get("broker_us_per_msg"), t.get("broker_us_per_msg")),
        }
        for key in ("p50_ms", "p99_ms"):
            if key in s and key in t:
                entry["ratio_sluice_over_tansu"][key] = ratio(s[key], t[key])
        summary[sc] = entry
    return summary


def fmt(v: float | None, spec: str = ",.0f", width: int = 9) -> str:
    return f"{v:{spec}}".rjust(width) if v is not None else "—".rjust(width)


def print_client_bounds(summary: dict[str, Any]) -> None:
    """The most any broker could reach in each produce scenario, from the client's own CPU per message.

    The client and the broker share this machine's cores. Even a broker costing nothing leaves the client
    `cpus / client CPU per message` messages per second (the client CPU is the median of the sluice rounds;
    with lz4 it includes librdkafka's compression). Dividing by Tansu's rate gives the largest throughput
    ratio any broker could show against Tansu here.
    """
    cpus = os.cpu_count() or 1
    print()
    print(f"Bound by the client's own CPU ({cpus} cpus / client us per msg; a broker costing nothing):")
    for sc, e in summary.items():
        client_us = e.get("sluice", {}).get("client_us_per_msg")
        tansu_rate = e.get("tansu", {}).get("msg_per_s")
        if not sc.startswith("produce") or not client_us:
            continue
        bound = cpus / (client_us / 1e6)
        print(
            f"  {sc:32} client {client_us:5.2f} us/msg -> at most {bound:>12,.0f} msg/s"
            f" = {fmt(ratio(bound, tansu_rate), '.2f', 5)} x tansu"
        )


def print_tables(summary: dict[str, Any], rounds: int) -> None:
    ceilings = {
        sc.rsplit(" ", 2)[-2] + " " + sc.rsplit(" ", 2)[-1]: e.get("client", {}).get("msg_per_s")
        for sc, e in summary.items()
        if sc.startswith("client produce() ceiling")
    }
    print()
    print(
        f"Medians over {rounds} round(s). msg/s and MB/s = payload throughput; us/msg = broker process "
        "CPU (user+sys) per message; ratios are sluice / tansu."
    )
    head = (
        f"{'scenario':32} | {'sluice msg/s':>12} {'MB/s':>7} {'us/msg':>7} | {'tansu msg/s':>12} "
        f"{'MB/s':>7} {'us/msg':>7} | {'thr s/t':>7} {'cpu s/t':>7} | {'s/ceil':>6} {'t/ceil':>6}"
    )
    print(head)
    print("-" * len(head))
    for sc, e in summary.items():
        if (
            sc.startswith("client produce() ceiling")
            or sc.startswith("latency")
            or sc.startswith("broker rss")
        ):
            continue
        s, t, r = e.get("sluice", {}), e.get("tansu", {}), e["ratio_sluice_over_tansu"]
        ceil = None
        if sc.startswith("produce"):
            ceil = ceilings.get(" ".join(sc.split()[1:3]))
        line = (
            f"{sc:32} | {fmt(s.get('msg_per_s'), width=12)} {fmt(s.get('mb_per_s'), '.1f', 7)} "
            f"{fmt(s.get('broker_us_per_msg'), '.2f', 7)} | {fmt(t.get('msg_per_s'), width=12)} "
            f"{fmt(t.get('mb_per_s'), '.1f', 7)} {fmt(t.get('broker_us_per_msg'), '.2f', 7)} | "
            f"{fmt(r['throughput'], '.2f', 7)} {fmt(r['broker_cpu_per_msg'], '.2f', 7)} | "
            f"{fmt(ratio(s.get('msg_per_s'), ceil), '.0%', 6)} {fmt(ratio(t.get('msg_per_s'), ceil), '.0%', 6)}"
        )
        notes = []
        for b, d in (("sluice", s), ("tansu", t)):
            if d.get("errors"):
                notes.append(f"{b}: {d['rounds_ok']}/{d['rounds']} ok ({d['errors'][0]})")
            if sc.endswith("subscribe") and d.get("time_to_assignment_s") is not None:
                notes.append(f"{b} joined in {d['time_to_assignment_s']:.2f} s")
        if notes:
            line += "   # " + "; ".join(notes)
        print(line)
    for sc, e in summary.items():
        if sc.startswith("client produce() ceiling"):
            c = e["client"]
            print(
                f"{sc:32} | {fmt(c.get('msg_per_s'), width=12)} {fmt(c.get('mb_per_s'), '.1f', 7)} "
                f"(the produce() calls alone, no broker; client {fmt(c.get('client_us_per_msg'), '.1f', 0)} "
                "us/msg CPU)"
            )
    print_client_bounds(summary)
    for sc, e in summary.items():
        if sc.startswith("latency"):
            print()
            print(f"End-to-end {sc} (acks=all, linger.ms=0, consumer with librdkafka fetch defaults):")
            for b in ("sluice", "tansu"):
                d = e.get(b)
                if d:
                    print(
                        f"  {b:6}  p50 {fmt(d.get('p50_ms'), '.2f', 7)} ms  p99 {fmt(d.get('p99_ms'), '.2f', 7)} ms"
                        f"  max {fmt(d.get('max_ms'), '.2f', 7)} ms  broker {fmt(d.get('broker_us_per_msg'), '.0f', 5)}"
                        f" us/msg{'  ERR ' + d['errors'][0] if d.get('errors') else ''}"
                    )
            r = e["ratio_sluice_over_tansu"]
            print(f"  ratio   p50 {fmt(r.get('p50_ms'), '.4f', 7)}     p99 {fmt(r.get('p99_ms'), '.4f', 7)}")
    for sc, e in summary.items():
        if sc.startswith("broker rss"):
            print()
            print(
                "Broker RSS at the end of a round (median): "
                + ", ".join(f"{b} {e[b]['rss_bytes'] / MB:.0f} MB" for b in ("sluice", "tansu") if b in e)
            )


def print_rss(rss: list[dict[str, Any]]) -> None:
    for r in rss:
        if "error" in r:
            print(f"RSS {r['broker']}: ERROR {r['error']}")
            continue
        p = r["produce"]
        print(
            f"RSS {r['broker']} holding {r['payload_bytes'] / MB:.0f} MB of 1 KiB messages: idle "
            f"{r['rss_idle'] / MB:.0f} MB, after produce {r['rss_after_produce'] / MB:.0f} MB "
            f"(+2 s {r['rss_after_produce_2s'] / MB:.0f} MB), after reading it all back "
            f"{r['rss_after_consume'] / MB:.0f} MB, peak {r['peak_rss'] / MB:.0f} MB; "
            f"produce {fmt(p['msg_per_s'], width=0)} msg/s at {fmt(p['broker_us_per_msg'], '.1f', 0)} us/msg, "
            f"consume {fmt(r['consume']['msg_per_s'], width=0)} msg/s"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="sluice+tansu rounds (0: none)")
    ap.add_argument("--scale", type=float, default=1.0, help="message counts x this (0.1 for a quick run)")
    ap.add_argument("--brokers", default="sluice,tansu", help="comma list, in the order they alternate")
    ap.add_argument("--latency-rate", type=float, default=1000.0)
    ap.add_argument("--latency-seconds", type=float, default=10.0, help="0 skips the latency scenario")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the client produce() ceiling")
    ap.add_argument("--rss", action="store_true", help="also measure sluice's RSS holding --rss-mb of data")
    ap.add_argument("--rss-mb", type=float, default=1000.0, help="payload MB (10^6) for --rss")
    ap.add_argument(
        "--rss-tansu",
        choices=("auto", "yes", "no"),
        default="auto",
        help="also Tansu for --rss (auto: if MemAvailable > 3x the payload)",
    )
    ap.add_argument("--data-root", default=None, help="where sluice data dirs go (default: $TMPDIR)")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args(argv)

    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    for b in brokers:
        if b not in BROKERS:
            ap.error(f"unknown broker {b!r}")
    specs = produce_specs(args.scale)
    values = {size: make_values(size) for size in {s.size for s in specs}}
    results: list[Result] = []
    t_start = perf_counter()
    log(
        f"sluice vs tansu: {args.rounds} round(s), scale {args.scale}, brokers {brokers}; "
        f"confluent-kafka {confluent_version()[0]} librdkafka {rdkafka_version()[0]}; {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for rnd in range(1, args.rounds + 1):
        if not args.no_ceiling:
            for size in sorted(values):
                count = next(s.count for s in specs if s.size == size)
                label = (
                    f"client produce() ceiling {size} B"
                    if size < KIB
                    else f"client produce() ceiling {size // KIB} KiB"
                )
                guarded(
                    results,
                    label,
                    "client",
                    rnd,
                    lambda count=count, size=size, rnd=rnd: client_ceiling(count, size, values[size], rnd),
                )
        for name in brokers:
            try:
                run_broker_round(name, rnd, args, specs, values, results)
            except Exception as exc:
                traceback.print_exc()
                results.append(Result("broker start", name, rnd, error=f"{type(exc).__name__}: {exc}"))

    rss: list[dict[str, Any]] = []
    if args.rss:
        total = int(args.rss_mb * MB)
        rss_brokers = ["sluice"]
        if args.rss_tansu == "yes" or (args.rss_tansu == "auto" and mem_available_bytes() > 3 * total):
            rss_brokers.append("tansu")
        for name in rss_brokers:
            broker = make_broker(name, args)
            broker.start()
            try:
                log(f"[rss {name}] producing {total / MB:.0f} MB of 1 KiB messages")
                rss.append(run_rss(broker, total, values.get(KIB) or make_values(KIB)))
            except Exception as exc:
                traceback.print_exc()
                rss.append({"broker": name, "error": f"{type(exc).__name__}: {exc}"})
            finally:
                broker.stop()

    summary = summarize(results)
    if results:
        print_tables(summary, args.rounds)
    if rss:
        print()
        print_rss(rss)
    print(f"\ntotal {perf_counter() - t_start:.0f} s")
    if args.json_out:
        doc = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "env": {
                "python": platform.python_version(),
                "confluent_kafka": confluent_version()[0],
                "librdkafka": rdkafka_version()[0],
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "loadavg_at_end": os.getloadavg(),
            },
            "produce_specs": [asdict(s) | {"name": s.name, "topic": s.topic} for s in specs],
            "summary": summary,
            "results": [r.as_json() for r in results],
            "rss": rss,
        }
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(doc, indent=2))
        log(f"wrote {args.json_out}")
    failed = [r for r in results if r.error]
    return 1 if failed and len(failed) == len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
