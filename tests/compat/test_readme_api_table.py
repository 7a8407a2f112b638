"""README.md's table of Kafka APIs matches the handler registry (regenerate with tools/api_table.py --write)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sluice.broker.handlers  # noqa: F401  (registers every handler)
from sluice.broker.api import HANDLERS

ROOT = Path(__file__).resolve().parents[2]


def test_readme_api_table_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "api_table.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    readme = (ROOT / "README.md").read_text()
    assert len(HANDLERS.supported()) > 30
    for key, low, high in HANDLERS.supported():
        versions = f"{low}-{high}" if low != high else f"{low}"
        assert f"| {key} | " in readme and f" | {versions} | |" in readme
