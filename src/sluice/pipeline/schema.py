"""The row schema of Kafka records in Spark, shared by the source, the sink and the jobs.

It is Spark's Kafka connector's, so DataFrames are interchangeable with ``format("kafka")``.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True
)


def kafka_schema(
    include_headers: bool, key_type: DataType | None = None, value_type: DataType | None = None
) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType[, headers].

    ``key_type``/``value_type`` replace binary for registry-decoded columns (a struct, usually).
    """
    fields = [
        StructField("key", key_type or BinaryType(), True),
        StructField("value", value_type or BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)
