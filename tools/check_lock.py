"""Fail when the lock files no longer match what pyproject.toml asks for.

requirements/lock.txt pins everything `make test` installs: the package's dependencies, its test, pipeline
and bench extras, and requirements/build.in (pip, setuptools, wheel). requirements/runtime.txt pins what
`make serve` installs: the dependencies and build.in only, at the same versions as lock.txt.
Every requirement must be pinned with `==` at a version its range admits, and every pin must carry a
`--hash`. `make lock` rewrites both; `make test` runs this first, so a dependency added to pyproject.toml
without a new lock fails loudly instead of installing whatever is newest.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a fresh venv has only pip, which carries its own copy: the check runs before installing
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]
    from pip._vendor.packaging.version import Version  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
RUNTIME_LOCK = ROOT / "requirements" / "runtime.txt"
EXTRAS = ("test", "pipeline", "bench")
# The machine the lock is for: CPython 3.11 on Linux (markers are evaluated against it).
TARGET = {
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def wanted(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    build_in = ROOT / "requirements" / "build.in"
    lines += [ln.strip() for ln in build_in.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    reqs = [Requirement(line) for line in lines]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(TARGET)]


def pinned(lock: Path) -> tuple[dict[str, Version], list[str]]:
    """name -> pinned version, and the names whose pin has no hash."""
    text = lock.read_text().replace("\\\n", " ")
    pins: dict[str, Version] = {}
    unhashed: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.match(r"([A-Za-z0-9_.\-\[\],]+)==([^\s;]+)", line)
        if not match:
            raise SystemExit(f"{lock.name}: not an exact pin: {line[:80]}")
        name = canonicalize_name(match.group(1).split("[", 1)[0])
        pins[name] = Version(match.group(2))
        if "--hash=" not in line:
            unhashed.append(name)
    return pins, unhashed


def problems_of(lock: Path, extras: tuple[str, ...]) -> tuple[dict[str, Version], list[str]]:
    if not lock.exists():
        return {}, [f"{lock.relative_to(ROOT)} is missing"]
    pins, unhashed = pinned(lock)
    problems = [f"{lock.name}: {name} is pinned without a hash" for name in unhashed]
    for req in wanted(extras):
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{lock.name}: {req} is not pinned")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{lock.name}: {req} does not admit the pinned {name}=={pins[name]}")
    return pins, problems


def main() -> int:
    pins, problems = problems_of(LOCK, EXTRAS)
    runtime_pins, runtime_problems = problems_of(RUNTIME_LOCK, ())
    problems += runtime_problems
    problems += [
        f"runtime.txt pins {name}=={version} but lock.txt has {pins.get(name)}"
        for name, version in runtime_pins.items()
        if pins and pins.get(name) != version
    ]
    if problems:
        print("the lock files no longer match pyproject.toml (run `make lock`):", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(f"lock ok: {len(pins)} pins for make test, {len(runtime_pins)} for make serve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
