"""The documented pytest plugin, used the way a user's project uses it: a separate pytest run.

An installed sluice registers the plugin through the pytest11 entry point declared in pyproject.toml; the
shared development environment may predate that declaration, so the runs below that need it install the
declaration itself as a distribution's metadata on the path (what pip writes, read from pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "pytest"


def installed_entry_point(directory: Path) -> dict[str, str]:
    """Environment in which pyproject.toml's pytest11 entry points are installed metadata."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    dist = directory / "site" / "sluice_plugin_metadata-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sluice-plugin-metadata\nVersion: 0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in declared.items())
    (dist / "entry_points.txt").write_text(f"[pytest11]\n{lines}")
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(directory / "site")) if p)
    return {**os.environ, "PYTHONPATH": path}


def run_pytest(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(project), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=project,
        env=env,
    )


def test_the_example_project_passes_with_the_plugin(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, {**os.environ}, "-p", "sluice.pytest_plugin", str(EXAMPLES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_installed_the_fixtures_are_simply_there_and_naming_the_plugin_too(tmp_path: Path) -> None:
    env = installed_entry_point(tmp_path)
    one_test = str(EXAMPLES / "test_orders.py") + "::test_an_order_is_published"
    auto = run_pytest(tmp_path, env, one_test)
    assert auto.returncode == 0, auto.stdout + auto.stderr
    # Naming the plugin as the application quickstart (docs/quickstart/application.md) says, while the entry point loaded it, is no double registration.
    named = run_pytest(tmp_path, env, "-p", "sluice.pytest_plugin", one_test)
    assert named.returncode == 0, named.stdout + named.stderr
    assert "1 passed" in auto.stdout and "1 passed" in named.stdout


def test_without_the_plugin_the_fixtures_are_missing(tmp_path: Path) -> None:
    env = installed_entry_point(tmp_path)
    result = run_pytest(
        tmp_path,
        env,
        "-p",
        "no:sluice.pytest_plugin",
        str(EXAMPLES / "test_orders.py") + "::test_an_order_is_published",
    )
    assert result.returncode != 0 and "fixture 'kafka_bootstrap' not found" in result.stdout
