"""The project's Kafka data source for Spark: ``format("jmsgateway_kafka")``.

Registers :class:`KafkaDataSource` (PySpark's Python data source API) whose
readers live in :mod:`gateway.pipeline.kafka_source` and writers in
:mod:`gateway.pipeline.kafka_sink`.  Used when Spark's own Kafka connector
is not on the classpath (or ``kafka_access = "python"``).  Options::

    bootstrap               host:port[,host:port]
    subscribe               topic[,topic]            (readers)
    startingOffsets         earliest | latest | {"topic": {"0": 42}}
    endingOffsets           latest | JSON            (batch reader)
    maxOffsetsPerTrigger    records per micro-batch  (stream reader)
    kafka.<setting>         any librdkafka setting
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from gateway.pipeline.kafka_sink import KafkaBatchWriter, KafkaStreamWriter
from gateway.pipeline.kafka_source import KAFKA_SCHEMA, KafkaBatchReader, KafkaStreamReader

SOURCE_NAME = "jmsgateway_kafka"


class KafkaDataSource(DataSource):
    """Kafka through confluent-kafka, as a Spark data source."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        return KafkaBatchWriter(self.options)


def register(spark: Any) -> None:
    """Make ``format("jmsgateway_kafka")`` known to ``spark``."""
    spark.dataSource.register(KafkaDataSource)
