"""`sluice produce` and `sluice consume` with kcat's flags, against a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from sluice.testing import create_topic


def sluice(*args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess[str]:
    text = not isinstance(stdin, bytes)
    result = subprocess.run([sys.executable, "-m", "sluice", *args], input=stdin, capture_output=True,
                            timeout=timeout, text=text, env={**os.environ, **(env or {})})
    if not text:
        result.stdout = result.stdout.decode()
        result.stderr = result.stderr.decode()
    return result


@pytest.fixture
def two_partitions(bootstrap: str) -> str:
    """Partition 0: k0..k4 = v0..v4 at timestamps 1000..5000; partition 1: k5..k7 at 6000..8000."""
    topic = create_topic(bootstrap, partitions=2, prefix="flags")
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(8):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0 if i < 5 else 1,
                         timestamp=(i + 1) * 1000, headers=[("h", f"x{i}".encode())])
    assert producer.flush(30) == 0
    return topic


def values(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_offset_forms_with_exit_at_end(bootstrap: str, two_partitions: str) -> None:
    t = two_partitions
    assert sorted(values(sluice("consume", t, "-b", bootstrap, "-o", "beginning", "-e"))) == [f"v{i}" for i in range(8)]
    assert values(sluice("consume", t, "-b", bootstrap, "-o", "end", "-e")) == []
    assert values(sluice("consume", t, "-b", bootstrap, "-p", "0", "-o", "3", "-e")) == ["v3", "v4"]
    assert sorted(values(sluice("consume", t, "-b", bootstrap, "-o", "-1", "-e"))) == ["v4", "v7"]
    assert sorted(values(sluice("consume", t, "-b", bootstrap, "-o", "-2", "-e", "-p", "1"))) == ["v6", "v7"]
    assert values(sluice("consume", t, "-b", bootstrap, "-p", "0", "-o", "s@3000", "-e")) == ["v2", "v3", "v4"]
    assert values(sluice("consume", t, "-b", bootstrap, "-p", "0", "-o", "e@3000")) == ["v0", "v1"]
    # -o beyond the end of a partition starts there: nothing to read before the end.
    assert values(sluice("consume", t, "-b", bootstrap, "-p", "0", "-o", "99", "-e")) == []


def test_count_and_partition(bootstrap: str, two_partitions: str) -> None:
    assert values(sluice("consume", two_partitions, "-b", bootstrap, "-p", "1", "-o", "beginning", "-c", "2")) \
        == ["v5", "v6"]


def test_format_tokens_and_escapes(bootstrap: str, two_partitions: str) -> None:
    out = values(sluice("consume", two_partitions, "-b", bootstrap, "-p", "1", "-o", "beginning", "-e",
                        "-f", "%t|%p|%o|%k|%s|%T|%h|%K|%S|100%%\\t.\\n"))
    assert out == [f"{two_partitions}|1|{i - 5}|k{i}|v{i}|{(i + 1) * 1000}|h=x{i}|2|2|100%\t." for i in (5, 6, 7)]


def test_json_lines(bootstrap: str, two_partitions: str) -> None:
    out = values(sluice("consume", two_partitions, "-b", bootstrap, "-p", "0", "-o", "4", "-e", "-J"))
    assert [json.loads(line) for line in out] == [{
        "topic": two_partitions, "partition": 0, "offset": 4, "timestamp": 5000, "key": "k4", "value": "v4",
        "headers": [{"key": "h", "value": "x4"}]}]


def test_group_stored_offsets(bootstrap: str, two_partitions: str, group_name: str) -> None:
    first = values(sluice("consume", two_partitions, "-b", bootstrap, "-g", group_name, "-p", "0",
                          "-o", "beginning", "-c", "2"))
    assert first == ["v0", "v1"]
    # The group committed where it stopped: -o stored continues from there.
    deadline = time.monotonic() + 20
    again: list[str] = []
    while time.monotonic() < deadline:
        again = values(sluice("consume", two_partitions, "-b", bootstrap, "-g", group_name, "-p", "0",
                              "-o", "stored", "-e"))
        if again == ["v2", "v3", "v4"]:
            break
    assert again == ["v2", "v3", "v4"]
    refused = sluice("consume", two_partitions, "-b", bootstrap, "-o", "stored", "-e")
    assert refused.returncode != 0 and "needs a consumer group" in refused.stderr


def test_old_option_spellings_still_work(bootstrap: str, two_partitions: str) -> None:
    out = values(sluice("consume", two_partitions, "-b", bootstrap, "--from-beginning", "--count", "8",
                        "--json", "--timeout", "20"))
    assert len(out) == 8 and all("value" in json.loads(line) for line in out)


def test_bootstrap_from_environment_and_x_settings(bootstrap: str, two_partitions: str) -> None:
    env = {"SLUICE_BOOTSTRAP": bootstrap}
    out = values(sluice("consume", two_partitions, "-p", "1", "-o", "beginning", "-e",
                        "-X", "client.id=flags-test", "-X", "fetch.wait.max.ms=50", env=env))
    assert out == ["v5", "v6", "v7"]
    bad = sluice("consume", two_partitions, "-e", "-X", "no.such.setting=1", env=env)
    assert bad.returncode != 0 and "no.such.setting" in bad.stderr
    malformed = sluice("consume", two_partitions, "-e", "-X", "justakey", env=env)
    assert malformed.returncode != 0 and "KEY=VALUE" in malformed.stderr


def test_isolation_levels_with_an_open_transaction(bootstrap: str) -> None:
    """read_committed (the default) stops before an open transaction's records and -e still exits;
    read_uncommitted shows them; after the commit both levels read everything; an unknown level is
    refused."""
    topic = create_topic(bootstrap, prefix="iso")
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"committed")
    assert plain.flush(30) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"pending")
    assert txn.flush(30) == 0  # written, not committed
    assert values(sluice("consume", topic, "-b", bootstrap, "-o", "beginning", "-e")) == ["committed"]
    assert values(sluice("consume", topic, "-b", bootstrap, "-o", "beginning", "-e",
                         "--isolation", "read_committed")) == ["committed"]
    assert values(sluice("consume", topic, "-b", bootstrap, "-o", "beginning", "-e",
                         "--isolation", "read_uncommitted")) == ["committed", "pending"]
    txn.commit_transaction(30)
    for level in ("read_committed", "read_uncommitted"):
        assert values(sluice("consume", topic, "-b", bootstrap, "-o", "beginning", "-e",
                             "--isolation", level)) == ["committed", "pending"]
    bad = sluice("consume", topic, "-b", bootstrap, "-e", "--isolation", "dirty")
    assert bad.returncode != 0 and "isolation" in bad.stderr


def test_bad_offsets_and_missing_things(bootstrap: str, two_partitions: str) -> None:
    for bad in ("latest-ish", "s@soon", "@"):
        result = sluice("consume", two_partitions, "-b", bootstrap, "-o", bad, "-e")
        assert result.returncode != 0 and "-o" in result.stderr
    no_partition = sluice("consume", two_partitions, "-b", bootstrap, "-p", "9", "-e")
    assert no_partition.returncode == 1 and "no partition 9" in no_partition.stderr
    no_topic = sluice("consume", "no-such-topic-flags", "-b", bootstrap, "-e")
    assert no_topic.returncode == 1 and "does not exist" in no_topic.stderr
    token = sluice("consume", two_partitions, "-b", bootstrap, "-e", "-f", "%q")
    assert token.returncode != 0 and "%q" in token.stderr


def test_produce_delimiters_partition_headers_acks(bootstrap: str) -> None:
    topic = create_topic(bootstrap, partitions=3, prefix="prod")
    result = sluice("produce", topic, "-b", bootstrap, "-D", ";", "-K", "=", "-p", "2", "-H", "a=1", "-H", "b=2",
                    "--acks", "1", stdin="k1=one;k2=two;three")
    assert result.returncode == 0, result.stderr
    assert "produced 3" in result.stderr
    out = values(sluice("consume", topic, "-b", bootstrap, "-p", "2", "-o", "beginning", "-e", "-f", "%k:%s:%h\\n"))
    assert out == ["k1:one:a=1,b=2", "k2:two:a=1,b=2", ":three:a=1,b=2"]
    # Every other partition is still empty.
    assert values(sluice("consume", topic, "-b", bootstrap, "-p", "0", "-p", "1", "-o", "beginning", "-e")) == []
    binary = sluice("produce", topic, "-b", bootstrap, "-p", "0", "--acks", "0", "-D", "\\x00",
                    stdin=b"a\nb\x00c")
    assert binary.returncode == 0, binary.stderr
    assert values(sluice("consume", topic, "-b", bootstrap, "-p", "0", "-o", "beginning", "-e", "-f", "%S\\n")) \
        == ["3", "1"]
    bad_acks = sluice("produce", topic, "-b", bootstrap, "--acks", "2", stdin="x\n")
    assert bad_acks.returncode != 0 and "--acks" in bad_acks.stderr


def test_produce_reports_each_failure_by_kafka_error_name(bootstrap: str) -> None:
    topic = create_topic(bootstrap, prefix="fail")
    result = sluice("produce", topic, "-b", bootstrap, "-p", "5", stdin="a\nb\n")
    assert result.returncode == 1
    assert "message 0: _UNKNOWN_PARTITION" in result.stderr
    assert "message 1: _UNKNOWN_PARTITION" in result.stderr
    assert "2 of 2 messages not delivered" in result.stderr
    # The broker's own refusal: a record over the topic's max.message.bytes.
    limited = topic + "-small"
    assert sluice("topics", "create", limited, "-b", bootstrap, "-c", "max.message.bytes=200").returncode == 0
    big = sluice("produce", limited, "-b", bootstrap, "-X", "message.max.bytes=100000", stdin="y" * 5000 + "\n")
    assert big.returncode == 1
    assert "message 0: MSG_SIZE_TOO_LARGE" in big.stderr
    assert "1 of 1 messages not delivered" in big.stderr


def test_null_values_print_as_empty_lines_in_the_plain_dump(bootstrap: str) -> None:
    topic = create_topic(bootstrap, prefix="nulls")
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in (b"a", None, b"c"):
        producer.produce(topic, value=value, key=b"k")
    assert producer.flush(30) == 0
    assert values(sluice("consume", topic, "-b", bootstrap, "-o", "beginning", "-e")) == ["a", "", "c"]


def test_offset_end_waits_for_new_messages_only(bootstrap: str, two_partitions: str) -> None:
    """-o end without -e: nothing already there, the first message produced afterwards (kcat -o end)."""
    proc = subprocess.Popen([sys.executable, "-m", "sluice", "consume", two_partitions, "-b", bootstrap, "-p", "0",
                             "-o", "end", "-c", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    producer = Producer({"bootstrap.servers": bootstrap})
    try:
        deadline = time.monotonic() + 60
        sent = 0
        # Keep producing until the consumer, positioned at the end at some point, takes one and exits.
        while proc.poll() is None and time.monotonic() < deadline:
            producer.produce(two_partitions, value=f"new{sent}".encode(), partition=0)
            producer.flush(10)
            sent += 1
            time.sleep(0.2)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    [line] = out.splitlines()
    assert line.startswith("new") and int(line[3:]) < sent


def test_exit_at_end_over_a_corrupt_batch_reads_around_it_and_fails(
    corrupt_batch: Callable[[int], Any],  # tests/conftest.py's CorruptBatch
) -> None:
    """`-e` over a partition with a corrupt batch: what precedes it is printed, the other partition is read to
    its end, the damage is named once (partition and offset), and the command exits 1 instead of waiting
    forever for an end it can never reach."""
    damaged = corrupt_batch(2)
    result = sluice("consume", "bits", "-b", damaged.broker.bootstrap, "-o", "beginning", "-e", timeout=120)
    first_bad, _ = damaged.damage()
    assert result.returncode == 1, result.stderr
    printed = result.stdout.splitlines()
    assert "other" in printed
    assert sorted(v for v in printed if v != "other") == [f"{n:06d}".ljust(100, "q") for n in range(first_bad)]
    said = " ".join(result.stderr.split())  # as wrapped for the terminal
    assert said.count(f"partition 0 of bits cannot be read at offset {first_bad}") == 1, said
