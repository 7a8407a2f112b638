"""`sluice topics|produce|consume` as a person at a terminal uses them, against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys


def sluice(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sluice", *args], input=stdin, text=True, capture_output=True,
                          timeout=120)


def test_topics_produce_consume(bootstrap: str, topic_name: str) -> None:
    created = sluice("topics", "create", topic_name, "-p", "2", "-c", "retention.ms=60000", "-b", bootstrap)
    assert created.returncode == 0, created.stderr
    again = sluice("topics", "create", topic_name, "-b", bootstrap)
    assert again.returncode == 1 and "already exists" in again.stderr.lower()

    listed = json.loads(sluice("topics", "list", "--json", "-b", bootstrap).stdout)
    assert {"topic": topic_name, "partitions": 2} in listed

    produced = sluice("produce", topic_name, "-b", bootstrap, "--key-separator", ":", "--header", "origin=cli",
                      stdin="a:first\nb:second\nc:third\n")
    assert produced.returncode == 0, produced.stderr
    assert "produced 3" in produced.stderr

    consumed = sluice("consume", topic_name, "-b", bootstrap, "--from-beginning", "--count", "3", "--json",
                      "--timeout", "20")
    assert consumed.returncode == 0, consumed.stderr
    messages = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted((m["key"], m["value"]) for m in messages) == [("a", "first"), ("b", "second"), ("c", "third")]
    assert all(m["headers"] == [{"key": "origin", "value": "cli"}] for m in messages)

    described = json.loads(sluice("topics", "describe", topic_name, "--json", "-b", bootstrap).stdout)
    assert sum(p["end"] for p in described["partitions"]) == 3
    assert described["configs"]["retention.ms"] == "60000"

    deleted = sluice("topics", "delete", topic_name, "-b", bootstrap)
    assert deleted.returncode == 0, deleted.stderr
    missing = sluice("topics", "describe", topic_name, "-b", bootstrap)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_bad_listen_address_is_a_clear_error() -> None:
    result = sluice("broker", "--listen", "nonsense", "--data-dir", ":memory:")
    assert result.returncode != 0
    assert "HOST:PORT" in result.stderr
