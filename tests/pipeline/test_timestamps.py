"""startingTimestamp / endingTimestamp resolved by the broker's ListOffsets, end to end."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark

BASE_MS = 1_700_000_000_000


def test_batch_read_between_timestamps(spark: Any, kafka: Any) -> None:
    topic = kafka.new_topic("ts", partitions=2)
    kafka.produce(topic, [{"value": b"v%d" % i, "partition": i % 2, "timestamp": BASE_MS + 1000 * i}
                          for i in range(10)])
    frame = (
        spark.read.format("sluice")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingTimestamp", str(BASE_MS + 3500))
        .option("endingTimestamp", str(BASE_MS + 7500))
        .load()
    )
    values = sorted(bytes(r.value) for r in frame.collect())
    # Records at 4 s..7 s: the start is the first record at or after the timestamp, the end is exclusive.
    assert values == [b"v4", b"v5", b"v6", b"v7"]
