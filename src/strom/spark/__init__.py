"""PySpark data source ``strom``: Spark's Kafka source and sink in pure Python.

After ``pip install strom pyspark`` the format is found automatically (the top-level module
:mod:`pyspark_strom` exports ``DefaultSource``, which Spark 4's data source lookup registers).
Where automatic lookup is not available, register by hand::

    from strom.spark import StromDataSource
    spark.dataSource.register(StromDataSource)
    df = spark.readStream.format("strom").option("kafka.bootstrap.servers", "host:9092") \\
        .option("subscribe", "events").load()
"""

from strom.spark.options import StromOptionError
from strom.spark.source import DataLossError, StromDataSource, kafka_schema

__all__ = ["DataLossError", "StromDataSource", "StromOptionError", "kafka_schema", "register"]


def register(spark: object) -> None:
    """``spark.dataSource.register(StromDataSource)`` (idempotent)."""
    spark.dataSource.register(StromDataSource)  # type: ignore[attr-defined]
