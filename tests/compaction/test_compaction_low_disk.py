"""The cleaner needs room for a cleaned copy before it frees anything: while the broker refuses writes for
lack of disk space it starts no pass, and it cleans once space is back."""

from __future__ import annotations

import time
from pathlib import Path

from compaction_helpers import (
    check_compacted,
    cleaner_status,
    create_compacted,
    produce_updates,
    read_all,
    updates,
    wait_cleaned,
    write_config,
)

from sluice.testing import BrokerProcess


def test_no_cleaning_while_writes_are_refused_for_disk_space(tmp_path: Path, topic_name: str) -> None:
    data = tmp_path / "data"
    off = write_config(tmp_path, "log_cleaner_enable: false\n")
    proc = BrokerProcess(data, config=off).start()
    try:
        create_compacted(proc.bootstrap, topic_name)
        written = produce_updates(proc.bootstrap, topic_name, updates(10, 40))
    finally:
        proc.stop()

    on = tmp_path / "on"
    on.mkdir()
    # More free space than any disk has: every write is refused, so the cleaner must wait.
    proc = BrokerProcess(data, config=write_config(on), min_free_bytes=1 << 60).start()
    try:
        time.sleep(2)  # twenty cleaner backoffs
        ratio, cleaned = cleaner_status(proc.bootstrap, topic_name)
        assert cleaned == -1 and ratio > 0.5, "no pass may start while writes are refused"
        assert read_all(proc.bootstrap, topic_name) == written
    finally:
        proc.stop()

    proc = BrokerProcess(data, config=write_config(on)).start()
    try:
        wait_cleaned(proc.bootstrap, topic_name)
        check_compacted(read_all(proc.bootstrap, topic_name), written)
    finally:
        proc.stop()
