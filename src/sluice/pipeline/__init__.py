"""Kafka topics as a PySpark data source and sink, plus archive/replay/stats jobs.

This is the only sluice package that imports pyspark; it is imported lazily so that
``sluice.cli.pipeline`` can be mounted without the optional ``pipeline`` extra installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("sluice")`` and friends available in ``spark``."""
    from sluice.pipeline.source import register as register_source

    register_source(spark)


__all__ = ["register"]
