"""register(spark): Spark's Python workers must be able to import sluice, or the error says what to set."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def python_without_sluice(directory: Path) -> str:
    """An interpreter of the same version that cannot import sluice: the system Python, with every
    PYTHONPATH entry that holds a sluice package removed (Spark hands the driver's PYTHONPATH on)."""
    system = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    if system is None or os.path.realpath(system) == os.path.realpath(sys.executable):
        pytest.skip("needs a system python3 apart from this environment's")
    script = directory / "python-without-sluice"
    script.write_text(
        "#!/bin/sh\n"
        f"PYTHONPATH=$({system} -c 'import os; print(os.pathsep.join(p for p in "
        "os.environ.get(\"PYTHONPATH\", \"\").split(os.pathsep) if p and not "
        "os.path.isdir(os.path.join(p, \"sluice\"))))')\n"
        "export PYTHONPATH\n"
        f'exec {system} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_register_checks_the_workers_and_names_the_setting(
        spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sluice.pipeline import register
    from sluice.pipeline.workers import SparkWorkersCannotImportSluice

    context = spark.sparkContext
    register(spark)  # this venv's interpreter: the workers import sluice
    assert context.pythonExec == sys.executable
    other = python_without_sluice(tmp_path)
    monkeypatch.setenv("PYSPARK_PYTHON", other)  # a user's choice is respected...
    try:
        with pytest.raises(SparkWorkersCannotImportSluice) as failure:
            register(spark)
        message = str(failure.value)
        # ...and the error names the interpreter the workers run and exactly what to set instead.
        assert other in message
        assert f"PYSPARK_PYTHON={sys.executable}" in message and "spark.pyspark.python" in message
    finally:
        monkeypatch.delenv("PYSPARK_PYTHON")
        context.pythonExec = "python3"  # what Spark picks when nothing is set
        # A local master with nothing set: the workers run this interpreter (and later tests get a
        # session whose data source runs it).
        register(spark)
    assert context.pythonExec == sys.executable
