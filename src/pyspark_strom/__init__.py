"""Spark 4 discovers Python data sources in top-level modules named ``pyspark_*`` that export
``DefaultSource``; this module makes ``format("strom")`` work without registration."""

from strom.spark.source import StromDataSource as DefaultSource

__all__ = ["DefaultSource"]
