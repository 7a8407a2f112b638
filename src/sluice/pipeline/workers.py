"""Spark's Python workers must import sluice: pick their interpreter for local masters, check it otherwise.

PySpark starts workers with ``SparkContext.pythonExec`` (PYSPARK_PYTHON, else ``python3`` from PATH),
fixed when the context starts and baked into each registered data source. In a virtual environment that
was not activated, ``python3`` is another interpreter and every task fails with "No module named
'sluice'" deep in an executor log. For a local master the workers run on this machine, so the driver's
own interpreter (which has sluice) is the right one; elsewhere only the user can say which interpreter
the executors have, so we check and say exactly what to set.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkWorkersCannotImportSluice(RuntimeError):
    """Spark's Python workers run an interpreter without sluice."""


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster")


def choose_worker_python(spark: SparkSession) -> str:
    """For a local master with no interpreter chosen by the user, run workers on this interpreter."""
    context = spark.sparkContext
    chosen = os.environ.get("PYSPARK_PYTHON") or context.getConf().get("spark.pyspark.python")
    if chosen:
        context.pythonExec = chosen
    elif _is_local(context.master):
        context.pythonExec = sys.executable
    return str(context.pythonExec)


def check_workers_import_sluice(spark: SparkSession) -> None:
    """Run one tiny task that imports sluice; raise with the exact setting to change if it cannot."""
    context = spark.sparkContext

    def probe(_: Any) -> str:
        import sluice  # noqa: F401  (the point of the probe)

        return sys.executable

    try:
        context.parallelize([0], 1).map(probe).collect()
    except Exception as exc:
        executable = context.pythonExec
        raise SparkWorkersCannotImportSluice(
            f"Spark's Python workers cannot import sluice: they run {executable!r}, which does not have it "
            f"(this driver runs {sys.executable!r}). Set PYSPARK_PYTHON={sys.executable} in the environment "
            f"before the SparkSession starts, or build it with "
            f".config('spark.pyspark.python', {sys.executable!r}) (for a cluster: an interpreter on the "
            f"executors that has sluice installed). Spark said: {str(exc).strip().splitlines()[-1][:300]}"
        ) from None
