"""The documented pytest plugin, used the way a user's project uses it: a separate pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pytest"


def test_the_example_project_passes_with_the_plugin(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "sluice.pytest_plugin", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(EXAMPLES)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_without_the_plugin_the_fixtures_are_missing(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:sluice", "--rootdir",
         str(tmp_path), str(EXAMPLES / "test_orders.py") + "::test_an_order_is_published"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ},
    )
    assert result.returncode != 0 and "fixture 'kafka_bootstrap' not found" in result.stdout
