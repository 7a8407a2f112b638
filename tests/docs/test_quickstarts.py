"""Every quickstart, and the README's tour, works as written: the snippets run in order against one real
`sluice serve`.

A page's ```bash blocks run one after another in one bash (so a variable or a background job of one block is
there for the next), with `set -eo pipefail`: each must end with exit status 0. Its ```python blocks run one
after another in one namespace, in this process (the Spark page in the suite's shared SparkSession: starting
one costs about 20 s of CPU). A ```text block right after a block lists lines its output must hold, in any
order (partitions interleave); `...` in a line stands for any text. A quickstart holds no other shell-like
block, so nothing a reader is told to type goes unrun (the README shows `make serve` and `make test`, which
this test stands in for).

The pages name `sluice serve`'s default addresses (127.0.0.1:9092, localhost:8082, and 9094 for the
operator's own broker), every one of them (`-b 127.0.0.1:9092` too: an address left to a default could not be
rewritten); here each is served on a free port and the snippets' addresses are rewritten to them, so a page
reads exactly as a reader types it after `make serve`. Pages run in the order of DOCS_ORDER, all
in one working directory (the operator page verifies `./sluice-data`, the serve's data directory).
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.testing import SluiceCommand, free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICKSTARTS = ROOT / "docs" / "quickstart"
# The order the pages run in, after the README (a page not listed runs after these, by name).
DOCS_ORDER = ["application.md", "gateways.md", "spark.md", "operator.md"]
RUNNABLE = {"bash", "python"}
UNRUN_SHELLS = {"sh", "shell", "console", "zsh", "shell-session"}
# The addresses a page may name: `sluice serve`'s listeners, and the operator's secured broker.
DEFAULT_PORTS = {
    "kafka": 9092,
    "secure": 9094,
    "grpc": 19091,
    "http": 19092,
    "console": 8080,
    "registry": 8081,
    "rest": 8082,
    "admin": 9644,
}
BLOCK_TIMEOUT_S = 120

# Quickstart pages run on a Spark worker (tests/conftest.py), so the Spark page shares its SparkSession.
SHARES_A_SPARK_WORKER = True


@dataclass
class Block:
    language: str
    code: str
    line: int
    expected: list[str]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the ```text block that follows it (blank lines between), if any."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    previous_end = -1  # the line after the previous block's closing fence
    index = 0
    while index < len(lines):
        opening = re.match(r"^```(\S*)", lines[index])
        if not opening:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        code = "\n".join(lines[index + 1 : end])
        follows = found and previous_end >= 0 and not "".join(lines[previous_end:index]).strip()
        if opening.group(1) == "text" and follows:
            found[-1].expected = [line for line in code.splitlines() if line.strip()]
        else:
            found.append(Block(opening.group(1), code, index + 1, []))
        previous_end = index = end + 1
    return found


def rewrite(text: str, ports: dict[str, int]) -> str:
    """The page's default addresses, as served here."""
    by_default = {str(DEFAULT_PORTS[name]): port for name, port in ports.items()}
    pattern = r"\b(localhost|127\.0\.0\.1):(" + "|".join(by_default) + r")\b"
    return re.sub(pattern, lambda m: f"{m.group(1)}:{by_default[m.group(2)]}", text)


def missing_lines(expected: list[str], output: str) -> list[str]:
    printed = [line.rstrip() for line in output.splitlines()]
    missing = []
    for line in expected:
        pattern = re.compile(".*".join(re.escape(part) for part in line.rstrip().split("...")))
        if not any(pattern.fullmatch(out) for out in printed):
            missing.append(line)
    return missing


class Shell:
    """One bash for a page: blocks are sent to it one at a time, each followed by a marker line."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            text=True,
            start_new_session=True,  # its background jobs share its process group, ended with it
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.marker = f"--- snippet done {os.getpid()}-{time.monotonic_ns()} ---"
        self._send("set -eo pipefail")

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def run(self, code: str, timeout: float) -> tuple[int, str]:
        """(exit status, output) of one block; the shell ends at the first failing command (set -e)."""
        self._send(f"{code}\necho; echo '{self.marker}'")
        output: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                return -1, "".join(output) + f"\n[no end after {timeout} s]"
            if line is None:
                return self.proc.wait(timeout=10) or 1, "".join(output)
            if line.rstrip("\n") == self.marker:
                return 0, "".join(output)
            output.append(line)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever a page left running in the background
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


@dataclass
class Served:
    ports: dict[str, int]
    workdir: Path

    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        # A reader's shell: sluice's own variables unset (a page names every address it uses, so the test can
        # rewrite it), this venv's `sluice` and `python` first on the PATH.
        env = {name: value for name, value in os.environ.items() if not name.startswith("SLUICE_")}
        return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": "200"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("quickstarts")
    ports = {name: free_port() for name in DEFAULT_PORTS}
    args = ["serve", "--data-dir", str(workdir / "sluice-data")]
    for option, name in (
        ("--kafka-listen", "kafka"),
        ("--grpc-listen", "grpc"),
        ("--http-listen", "http"),
        ("--console-listen", "console"),
        ("--registry-listen", "registry"),
        ("--rest-listen", "rest"),
        ("--admin-listen", "admin"),
    ):
        args += [option, f"127.0.0.1:{ports[name]}"]
    with SluiceCommand(*args, ready_prefix="sluice console on"):
        yield Served(ports, workdir)


def _quickstarts() -> list[Path]:
    order = {name: index for index, name in enumerate(DOCS_ORDER)}
    return sorted(QUICKSTARTS.glob("*.md"), key=lambda page: (order.get(page.name, len(order)), page.name))


def _pages() -> list[Path]:
    return [README, *_quickstarts()]


def test_every_quickstart_is_run() -> None:
    """Every quickstart has runnable blocks, and none shows a shell block that would not run."""
    pages = _quickstarts()
    assert [page.name for page in pages][: len(DOCS_ORDER)] == DOCS_ORDER
    for page in pages:
        found = blocks(page)
        assert any(block.language in RUNNABLE for block in found), page
        unrun = [block.line for block in found if block.language in UNRUN_SHELLS]
        assert not unrun, f"{page.name}: shell blocks at lines {unrun} would not be run; fence them ```bash"


def _run_python(code: str, namespace: dict[str, Any]) -> tuple[int, str]:
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            exec(compile(code, "<quickstart>", "exec"), namespace)
    except Exception:
        return 1, f"{captured.getvalue()}\n{traceback.format_exc()}"
    return 0, captured.getvalue()


@pytest.fixture
def page_blocks(page: Path, request: pytest.FixtureRequest) -> list[Block]:
    """The page's runnable blocks; for a page that uses Spark, the suite's SparkSession is started first (its
    getOrCreate() then returns that session)."""
    found = [block for block in blocks(page) if block.language in RUNNABLE]
    if any(block.language == "python" and "pyspark" in block.code for block in found):
        request.getfixturevalue("spark")
    return found


@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.stem.lower())
def test_quickstart(page: Path, page_blocks: list[Block], served: Served) -> None:
    found = page_blocks
    namespace: dict[str, Any] = {"__name__": "__quickstart__"}
    shell = Shell(served.workdir, served.env())
    try:
        for block in found:
            code = rewrite(block.code, served.ports)
            if block.language == "bash":
                status, output = shell.run(code, BLOCK_TIMEOUT_S)
            else:
                status, output = _run_python(code, namespace)
            where = f"{page.name}:{block.line}"
            assert status == 0, f"{where} ended with exit status {status}:\n{output}"
            missing = missing_lines([rewrite(line, served.ports) for line in block.expected], output)
            assert not missing, f"{where} did not print {missing}; it printed:\n{output}"
    finally:
        shell.close()
