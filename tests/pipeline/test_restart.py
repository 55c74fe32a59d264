"""Crash and restart: the pipeline process is killed (SIGKILL, JVM included) in the middle
of a stream and restarted on its checkpoint; nothing is lost, and the duplicates stay
within the documented bound (the records of one micro-batch: ``max_offsets_per_trigger``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gateway.pipeline.job import PipelineJob
from gateway.pipeline.kafka_source import KafkaOffsets
from gateway.pipeline.settings import parse_pipeline_settings, pipeline_spec
from tests.pipeline.workload import generate, produce_ingest, wait_for
from tests.support.kafka import create_topics, read_records

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MESSAGES = 2000
BATCH = 250

CONFIG = """
[gateway]
id = "gw-pipeline"

[transform]
plugin_dirs = []
load_entry_points = false

[routing]
properties = '''
routing.dead-letter.topic={dlq}
routes.all.in.include=msg.address==orders
routes.all.out.topic={out}
routes.all.conv.key=msg.header.CorrelationId
routes.all.on-soft-failure=dead-letter
'''

[pipeline]
ingest_topics = ["{ingest}"]
bootstrap = "{bootstrap}"
checkpoint = "{checkpoint}"
max_offsets_per_trigger = {batch}
trigger_seconds = 0.3
shuffle_partitions = 2
"""


def start_pipeline(config_file: Path, log_file: Path) -> subprocess.Popen[bytes]:
    """``python -m gateway.commands.pipeline`` on ``config_file`` (local[1]), output to ``log_file``."""
    with log_file.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gateway.commands.pipeline", "--config", str(config_file), "--master", "local[1]"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=Path(__file__).parents[2],
        )


def stop_pipeline(process: subprocess.Popen[bytes], signum: int) -> None:
    """Make sure ``process`` and its JVM are gone."""
    if process.poll() is None:
        os.killpg(process.pid, signum)
        process.wait(timeout=30)


def written(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` so far."""
    offsets = KafkaOffsets({"bootstrap": bootstrap, "subscribe": topic})
    try:
        return sum(offsets.latest()[topic].values())
    finally:
        offsets.close()


def test_kill_and_restart_on_checkpoint(kafka_bootstrap: str, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    ingest, out, dlq = f"ingest-{suffix}", f"out-{suffix}", f"dlq-{suffix}"
    create_topics(kafka_bootstrap, out, dlq)
    messages = generate(MESSAGES, seed=3)
    for index, message in enumerate(messages):
        message.destination = "/queue/orders"
        message.correlation_id = f"c{index}"
    produce_ingest(kafka_bootstrap, ingest, messages)
    config_file = tmp_path / "pipeline.toml"
    config_file.write_text(CONFIG.format(dlq=dlq, out=out, ingest=ingest, bootstrap=kafka_bootstrap,
                                         checkpoint=tmp_path / "ckpt", batch=BATCH))

    first = start_pipeline(config_file, tmp_path / "first-run.log")
    try:
        started = wait_for(lambda: written(kafka_bootstrap, out) >= 3 * BATCH, timeout=180)
        assert started, (tmp_path / "first-run.log").read_text()[-3000:]
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        first.wait(timeout=30)
    finally:
        stop_pipeline(first, signal.SIGKILL)
    before = written(kafka_bootstrap, out)
    assert 0 < before < MESSAGES, "the first run was not stopped mid-stream"

    second = start_pipeline(config_file, tmp_path / "second-run.log")
    try:
        finished = wait_for(lambda: written(kafka_bootstrap, out) >= MESSAGES, timeout=240)
        assert finished, (tmp_path / "second-run.log").read_text()[-3000:]
        assert wait_for(lambda: "lag 0 record(s)" in (tmp_path / "second-run.log").read_text(), timeout=30)
        second.send_signal(signal.SIGTERM)  # a clean stop: exit status 0
        assert second.wait(timeout=60) == 0, (tmp_path / "second-run.log").read_text()[-3000:]
    finally:
        stop_pipeline(second, signal.SIGKILL)
    progress = [line for line in (tmp_path / "second-run.log").read_text().splitlines() if "micro-batch" in line]
    assert progress and all("rows/s processed, lag " in line for line in progress)

    records = read_records(kafka_bootstrap, out, MESSAGES, timeout=60, settle=1.0)
    ids = Counter(dict(record.headers())["jms.MessageId"] for record in records)
    assert set(ids) == {message.message_id.encode() for message in messages}, "messages were lost"
    duplicates = sum(ids.values()) - len(ids)
    assert duplicates <= BATCH, f"{duplicates} duplicates, more than one micro-batch ({BATCH})"
    assert read_records(kafka_bootstrap, dlq, 1, timeout=2) == []
    print(f"killed after {before} records; {duplicates} duplicate(s) after the restart (bound {BATCH})")


def test_a_stopping_route_fails_the_query_and_a_fixed_restart_loses_nothing(
    spark: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    from gateway.config import parse_config

    suffix = uuid.uuid4().hex[:8]
    ingest, out, dlq = f"ingest-{suffix}", f"out-{suffix}", f"dlq-{suffix}"
    create_topics(kafka_bootstrap, out, dlq)
    messages = generate(30, seed=5)
    for index, message in enumerate(messages):
        message.destination = "/queue/orders"
        message.correlation_id = None if index == 17 else f"c{index}"
    produce_ingest(kafka_bootstrap, ingest, messages)

    def config(policy: str) -> Any:
        routes = (f"routing.dead-letter.topic={dlq}\nroutes.all.in.include=msg.address==orders\n"
                  f"routes.all.out.topic={out}\nroutes.all.conv.key=msg.header.CorrelationId\n"
                  f"routes.all.on-soft-failure={policy}\n")
        return parse_config({"gateway": {"id": "gw-pipeline"}, "routing": {"properties": routes},
                             "transform": {"plugin_dirs": [], "load_entry_points": False},
                             "pipeline": {"ingest_topics": [ingest], "bootstrap": kafka_bootstrap,
                                          "checkpoint": str(tmp_path / "ckpt"), "trigger_seconds": 0.2}})

    stopping = config("stop")
    settings = parse_pipeline_settings(stopping)
    query = PipelineJob(spark, settings, pipeline_spec(stopping, settings)).start()
    with pytest.raises(StreamingQueryException, match="route all stopped by a soft failure"):
        query.awaitTermination(120)
    # tasks of the failed batch that had finished may have written their records: they are
    # the documented duplicates of the last unfinished micro-batch

    fixed = config("dead-letter")
    settings = parse_pipeline_settings(fixed)
    query = PipelineJob(spark, settings, pipeline_spec(fixed, settings)).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    routed = Counter(r.key() for r in read_records(kafka_bootstrap, out, 29, timeout=30, settle=1.0))
    dead = read_records(kafka_bootstrap, dlq, 1, timeout=30, settle=1.0)
    assert set(routed) == {f"c{index}".encode() for index in range(30) if index != 17}
    assert sum(routed.values()) - len(routed) <= len(messages)
    assert [r.key() for r in dead] == [messages[17].message_id.encode()]
