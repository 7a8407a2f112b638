"""Kafka topics as a PySpark data source and sink, plus archive/replay/stats jobs.

This is the only sluice package that imports pyspark; it is imported lazily so that
``sluice.cli.pipeline`` can be mounted without the optional ``pipeline`` extra installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession, *, check_workers: bool = True) -> None:
    """Make ``spark.read.format("sluice")`` and friends available in ``spark``.

    For a local master Spark's Python workers are set to run this interpreter (unless PYSPARK_PYTHON or
    spark.pyspark.python says otherwise); with ``check_workers`` one tiny task checks that they can
    import sluice, and :class:`~sluice.pipeline.workers.SparkWorkersCannotImportSluice` says what to set.
    """
    from sluice.pipeline.source import register as register_source
    from sluice.pipeline.workers import check_workers_import_sluice, choose_worker_python

    choose_worker_python(spark)  # before registering: the data source keeps the interpreter it was given
    if check_workers:
        check_workers_import_sluice(spark)
    register_source(spark)


__all__ = ["register"]
