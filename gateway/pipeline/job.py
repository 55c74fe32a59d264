"""The Spark side: session, Kafka access, the streaming query and the batch replay.

:class:`PipelineJob` wires the pieces: the ingest topics are read with
Spark's Kafka connector (``format("kafka")``) when its jar is on the
classpath, else with the project's Python data source
(``format("jmsgateway_kafka")``, :mod:`gateway.pipeline.datasource`); each
Arrow batch goes through :func:`~gateway.pipeline.processing.process_arrow`
on the executors; the outcome counts are observed (they show in the query
progress); the records are written with the matching Kafka sink.

Delivery: offsets live in the checkpoint; a micro-batch is planned (offset
log), processed, written, then committed (commit log).  After a crash the
last planned but uncommitted batch is run again over the same offsets, so
nothing is lost and duplicates are limited to that batch's records (at most
``max_offsets_per_trigger``).  Nothing here runs a reactor.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from twisted.logger import Logger

from gateway.errors import ConfigError, ConnectorError
from gateway.pipeline.datasource import SOURCE_NAME, register
from gateway.pipeline.processing import OUTCOMES, OUTPUT_SCHEMA, process_arrow
from gateway.pipeline.progress import OBSERVATION, ProgressLogger
from gateway.pipeline.settings import PipelineSettings, PipelineSpec

SPARK_KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
SINK_COLUMNS = ("topic", "key", "value", "headers")


def build_spark(master: str | None = None, *, app_name: str = "jmsgateway-pipeline",
                shuffle_partitions: int = 4, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession (or the running one) with the project's Kafka data source registered.

    :param master: ``local[2]``, ``spark://host:7077`` …; None keeps what
        ``spark-submit`` or the environment chose (``local[*]`` otherwise).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def check_ingest_topics(settings: PipelineSettings, timeout: float = 15.0) -> None:
    """ConnectorError naming the first ingest topic the cluster does not list (or the bootstrap it
    cannot reach), asked with confluent-kafka on the driver before Spark starts: one line, where a
    failing query would print Spark's Java stack trace first."""
    from gateway.pipeline.kafka_source import KafkaOffsets

    options = {"bootstrap": settings.bootstrap, "subscribe": ",".join(settings.ingest_topics),
               "metadataTimeout": str(timeout), **{f"kafka.{k}": str(v) for k, v in settings.consumer.items()}}
    offsets = KafkaOffsets(options)
    try:
        offsets.partitions()
    except ConnectorError as error:
        raise ConnectorError(f"{error}: create it (docs/pipeline.md), or name another in pipeline.ingest_topics") \
            from None
    except Exception as error:  # confluent-kafka's KafkaException: no broker answered in time
        raise ConnectorError(f"cannot list the topics of {settings.bootstrap}: {error}") from None
    finally:
        offsets.close()


def has_spark_kafka(spark: Any) -> bool:
    """Whether Spark's own Kafka connector (spark-sql-kafka) is on the classpath."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass(SPARK_KAFKA_PROVIDER)
    except Exception:
        return False
    return True


def choose_kafka_access(spark: Any, wanted: str) -> str:
    """``spark`` or ``python``: ``auto`` picks Spark's connector when present.

    :raises ConfigError: ``spark`` was asked for but the jar is missing.
    """
    if wanted == "python":
        return "python"
    present = has_spark_kafka(spark)
    if wanted == "spark" and not present:
        raise ConfigError(
            "Spark's Kafka connector is not on the classpath (add --packages "
            "org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>) or use kafka_access = 'python'",
            key="pipeline.kafka_access",
        )
    return "spark" if present else "python"


@dataclass(slots=True)
class ReplayReport:
    """What a replay did: records read and their outcomes."""

    records: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


class PipelineJob:
    """The pipeline on one SparkSession.

    :param spec: what the executors run (:func:`~gateway.pipeline.settings.pipeline_spec`).
    :param progress: the listener that logs micro-batches (one is added if None).
    """

    log = Logger()

    def __init__(self, spark: Any, settings: PipelineSettings, spec: PipelineSpec,
                 progress: ProgressLogger | None = None) -> None:
        self.spark = spark
        self.settings = settings
        self.spec = spec
        self.access = choose_kafka_access(spark, settings.kafka_access)
        self.progress = progress
        self.log.info("pipeline uses {access} Kafka access ({how})", access=self.access,
                 how="format kafka" if self.access == "spark" else f"format {SOURCE_NAME}")

    # -- reading --------------------------------------------------------------------------

    def _reader_options(self, topics: tuple[str, ...]) -> dict[str, str]:
        if self.access == "spark":
            options = {"kafka.bootstrap.servers": self.settings.bootstrap, "subscribe": ",".join(topics),
                       "includeHeaders": "true", "failOnDataLoss": "true"}
        else:
            options = {"bootstrap": self.settings.bootstrap, "subscribe": ",".join(topics)}
        options.update({f"kafka.{k}": str(v) for k, v in self.settings.consumer.items()})
        return options

    def _writer_options(self) -> dict[str, str]:
        if self.access == "spark":
            options = {"kafka.bootstrap.servers": self.settings.bootstrap, "kafka.acks": "all",
                       "kafka.enable.idempotence": "true"}
        else:
            options = {"bootstrap": self.settings.bootstrap}
        options.update({f"kafka.{k}": str(v) for k, v in self.settings.producer.items()})
        return options

    def _format(self) -> str:
        return "kafka" if self.access == "spark" else SOURCE_NAME

    def stream(self) -> Any:
        """The ingest topics as a streaming DataFrame (Spark's Kafka schema)."""
        reader = self.spark.readStream.format(self._format()).options(**self._reader_options(
            self.settings.ingest_topics))
        reader = reader.option("startingOffsets", self.settings.starting_offsets)
        if self.settings.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(self.settings.max_offsets_per_trigger))
        return reader.load()

    # -- processing -----------------------------------------------------------------------

    def processed(self, records: Any, spec: PipelineSpec | None = None) -> Any:
        """``records`` transformed and routed: :data:`~gateway.pipeline.processing.OUTPUT_SCHEMA`."""
        return records.mapInArrow(functools.partial(process_arrow, spec or self.spec), OUTPUT_SCHEMA)

    @staticmethod
    def outcome_columns() -> list[Any]:
        """Aggregates counting every outcome (for ``observe``)."""
        from pyspark.sql import functions as F

        counts = [F.count(F.lit(1)).alias("messages")]
        counts += [F.sum(F.when(F.col("outcome") == name, 1).otherwise(0)).alias(name) for name in OUTCOMES]
        return counts

    # -- the streaming query --------------------------------------------------------------

    def start(self) -> Any:
        """Start the streaming query; returns Spark's ``StreamingQuery``."""
        from pyspark.sql import functions as F

        if self.progress is None:
            self.progress = ProgressLogger()
            self.spark.streams.addListener(self.progress)
        out = self.processed(self.stream()).observe(OBSERVATION, *self.outcome_columns())
        out = out.where(F.col("topic").isNotNull()).select(*SINK_COLUMNS)
        writer = (
            out.writeStream.format(self._format())
            .options(**self._writer_options())
            .option("checkpointLocation", self.settings.checkpoint)
            .queryName(self.settings.query_name)
            .outputMode("append")
        )
        if self.settings.trigger_seconds > 0:
            writer = writer.trigger(processingTime=f"{self.settings.trigger_seconds:g} seconds")
        query = writer.start()
        self.log.info("pipeline {name}: {topics} -> routes, checkpoint {checkpoint}", name=self.settings.query_name,
                 topics=",".join(self.settings.ingest_topics), checkpoint=self.settings.checkpoint)
        return query

    # -- replay ---------------------------------------------------------------------------

    def replay(self, topic: str, starting: str = "earliest", ending: str = "latest",
               spec: PipelineSpec | None = None) -> ReplayReport:
        """Run the records of ``topic`` between two offsets specs through the current
        chains and routes once (a batch job) and write the results."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        reader = self.spark.read.format(self._format()).options(**self._reader_options((topic,)))
        records = reader.option("startingOffsets", starting).option("endingOffsets", ending).load()
        observation = Observation(OBSERVATION)
        out = self.processed(records, spec).observe(observation, *self.outcome_columns())
        out = out.where(F.col("topic").isNotNull()).select(*SINK_COLUMNS)
        out.write.format(self._format()).options(**self._writer_options()).mode("append").save()
        counts = {str(k): int(v or 0) for k, v in observation.get.items()}
        report = ReplayReport(counts.pop("messages", 0), {k: v for k, v in counts.items() if v})
        self.log.info("replayed {records} record(s) of {topic}: {outcomes}", records=report.records, topic=topic,
                 outcomes=report.outcomes)
        return report
