"""The official Java consumer reads a compacted partition across its gaps, from offset 0 and from an
offset that was cleaned away."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from compaction_helpers import check_compacted, create_compacted, produce_updates, read_all, updates, wait_for

from sluice.testing import BrokerProcess

_TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_TESTS / "java"))
sys.path.insert(0, str(_TESTS / "groups"))


@pytest.mark.parametrize("version", ["3.9.0", "4.3.0"])
def test_java_consumer_reads_across_the_gaps(
    cleaner_broker: BrokerProcess, topic_name: str, version: str, tmp_path: Path
) -> None:
    if shutil.which("javac") is None:
        pytest.skip("a JDK (javac) is needed for the Java client tests")
    from java_driver import JavaClient, build

    bootstrap = cleaner_broker.bootstrap
    create_compacted(bootstrap, topic_name)
    written = produce_updates(bootstrap, topic_name, updates(10, 30))
    wait_for(lambda: len(read_all(bootstrap, topic_name)) < len(written) / 2, 30, "the topic to shrink")
    expected = read_all(bootstrap, topic_name)
    check_compacted(expected, written)
    end = written[-1][0] + 1
    classpath = build([version])[version]
    client = JavaClient(version, classpath, bootstrap, tmp_path / "java.log")
    try:
        got = client.call("consume", topic_name, 0, 0, end)
        assert [(r["offset"], bytes.fromhex(r["key"]), bytes.fromhex(r["value"])) for r in got] == expected
        # Seeking to an offset the cleaner removed lands on the next record that is still there.
        removed = next(offset for offset in range(end) if offset not in {r[0] for r in expected})
        later = client.call("consume", topic_name, 0, removed, end)
        assert [r["offset"] for r in later] == [r[0] for r in expected if r[0] > removed]
    finally:
        client.close()
