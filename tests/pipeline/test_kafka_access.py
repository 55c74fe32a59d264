"""Choosing the Kafka access: Spark's connector when its jar is on the classpath, else the
project's Python data source; asking for the connector without the jar is a clear error."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.pipeline.job import choose_kafka_access, has_spark_kafka

pytestmark = pytest.mark.spark


def test_without_the_connector_jar_the_python_source_is_chosen(spark: Any) -> None:
    assert has_spark_kafka(spark) is False  # no Maven access on these machines
    assert choose_kafka_access(spark, "auto") == "python"
    assert choose_kafka_access(spark, "python") == "python"
    with pytest.raises(ConfigError, match="spark-sql-kafka") as caught:
        choose_kafka_access(spark, "spark")
    assert caught.value.key == "pipeline.kafka_access"


def test_the_project_source_is_registered(spark: Any) -> None:
    with pytest.raises(Exception, match="subscribe"):
        spark.read.format("jmsgateway_kafka").option("bootstrap", "127.0.0.1:1").load().collect()
