"""The pipeline on Spark (``local[2]``) against the in-process router: the same 10,000
messages give the same records (topic, key, headers, body) on a real Kafka-protocol broker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import pytest_twisted

from gateway.pipeline.job import PipelineJob
from gateway.pipeline.progress import ProgressLogger
from gateway.pipeline.settings import parse_pipeline_settings, pipeline_spec
from tests.pipeline.workload import (
    explain_difference,
    gateway_config,
    generate,
    output_records,
    produce_ingest,
    run_reference,
    topic_names,
    wait_for,
)
from tests.support.kafka import TansuBroker, create_topics

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MESSAGES = 10_000


@pytest_twisted.ensureDeferred
async def test_pipeline_matches_in_process_router(spark: Any, kafka_bootstrap: str, tmp_path: Any) -> None:
    suffix = uuid.uuid4().hex[:8]
    topics = topic_names(suffix)
    ingest = f"ingest-{suffix}"
    messages = generate(MESSAGES)
    config = gateway_config(topics, ingest=ingest, bootstrap=kafka_bootstrap, checkpoint=str(tmp_path / "ckpt"))

    # the in-process gateway, on a broker of its own (same topic names)
    with TansuBroker() as reference:
        create_topics(reference.bootstrap, *topics.values())
        outcomes, per_topic = await run_reference(reference.bootstrap, config, messages)
        expected_counts = {name: per_topic[topic] for name, topic in topics.items()}
        expected = output_records(reference.bootstrap, topics, expected_counts)

    # the pipeline on Spark
    create_topics(kafka_bootstrap, *topics.values())
    produce_ingest(kafka_bootstrap, ingest, messages)
    settings = parse_pipeline_settings(config)
    progress = ProgressLogger()
    spark.streams.addListener(progress)
    query = PipelineJob(spark, settings, pipeline_spec(config, settings), progress).start()
    try:
        query.processAllAvailable()
        assert wait_for(lambda: progress.totals.get("messages", 0) >= MESSAGES, 15), (
            f"the query processed {progress.totals.get('messages', 0)} of {MESSAGES} ingest records")
    finally:
        query.stop()
        spark.streams.removeListener(progress)
    actual = output_records(kafka_bootstrap, topics, expected_counts)

    # every kind of result occurs, so an empty or one-sided run cannot pass
    assert outcomes["routed"] > 5000 and outcomes["dead-lettered"] > 200 and outcomes["skipped"] > 50
    assert outcomes["unrouted"] > 100
    assert len(expected) == outcomes["routed"] + outcomes["dead-lettered"]
    assert {name for name, *_ in expected} == set(topics)
    assert len(actual) == len(expected), explain_difference(kafka_bootstrap, topics, expected, actual)
    mismatched = [pair for pair in zip(expected, actual, strict=True) if pair[0] != pair[1]]
    assert not mismatched, f"{len(mismatched)} records differ, first: {mismatched[0]}"

    # the progress the user sees adds up to the same outcomes
    assert progress.batches, "no micro-batch progress was reported"
    assert progress.totals.get("messages") == MESSAGES
    for name in ("routed", "dead-lettered", "skipped", "unrouted"):
        assert progress.totals.get(name) == outcomes[name], name
    assert all(batch.lag is not None and batch.lag >= 0 for batch in progress.batches)

