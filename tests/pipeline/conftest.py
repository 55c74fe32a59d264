"""Fixtures of the pipeline tests: one local Spark session for all of them, and Kafka.

Spark starts once per test session (``local[2]``, two shuffle partitions)
and is stopped at the end; the Kafka-protocol broker is the shared
``kafka_bootstrap`` fixture (Tansu unless ``JMSGATEWAY_KAFKA_BOOTSTRAP`` is set).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.kafka import kafka_bootstrap

__all__ = ["kafka_bootstrap"]


@pytest.fixture(scope="session")
def spark(kafka_bootstrap: str) -> Iterator[Any]:
    """The SparkSession every pipeline test shares (the project's Kafka data source registered).

    It depends on the broker so that Spark (and the producers its Python workers keep)
    stops before the broker does."""
    from gateway.pipeline.job import build_spark

    session = build_spark("local[2]", app_name="jmsgateway-pipeline-tests", shuffle_partitions=2)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
