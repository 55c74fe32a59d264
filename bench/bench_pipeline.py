"""Issue 9 benchmark: the Spark pipeline on ``local[1]`` and ``local[2]`` against the
in-process router, over the same input, in one run.

Input: COUNT generated messages (text and bytes, three routes, a header-map
transformer, bad keys dead-lettered; ``tests/pipeline/workload.py``) written
to a 4-partition ingest topic of a Tansu broker.

* in-process: the gateway's inbound chains + KafkaRouter publishing through the
  Kafka connector (one reactor thread), from the first send to the last
  acknowledgement;
* Spark: the streaming query (project's Kafka source/sink) from start to
  ``processAllAvailable()``, after a warm-up query on the same session (so
  JVM start and Python worker start are not counted); the per-batch
  processing rate Spark reports is printed too.

Run: ``.venv/bin/python -m bench.bench_pipeline [COUNT]`` (default 40000).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any

from twisted.internet.defer import ensureDeferred

from bench.common import report
from bench.reactor_thread import run_in_reactor
from gateway.pipeline.job import PipelineJob, build_spark
from gateway.pipeline.progress import ProgressLogger
from gateway.pipeline.settings import parse_pipeline_settings, pipeline_spec
from tests.pipeline.workload import gateway_config, generate, produce_ingest, run_reference, topic_names
from tests.support.kafka import TansuBroker, create_topics

PARTITIONS = 4


def busy_seconds() -> float:
    """CPU seconds the whole machine spent busy so far (/proc/stat), to show how many
    cores a run kept busy."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def spark_run(master: str, bootstrap: str, ingest: str, warmup: str, count: int) -> tuple[float, float, float]:
    """(wall-clock rate, Spark's mean processing rate, cores busy) of one master on the ingest topic."""
    spark = build_spark(master, app_name=f"bench-{master}", shuffle_partitions=2)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for topic, timed in ((warmup, False), (ingest, True)):
            topics = topic_names(uuid.uuid4().hex[:8])
            create_topics(bootstrap, *topics.values())
            with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as checkpoint:
                config = gateway_config(topics, ingest=topic, bootstrap=bootstrap, checkpoint=checkpoint,
                                        trigger_seconds=0, max_offsets_per_trigger=20_000)
                settings = parse_pipeline_settings(config, kafka_access="python")
                progress = ProgressLogger()
                spark.streams.addListener(progress)
                started, cpu = time.perf_counter(), busy_seconds()
                query = PipelineJob(spark, settings, pipeline_spec(config, settings), progress).start()
                try:
                    query.processAllAvailable()
                    elapsed = time.perf_counter() - started
                    cores = (busy_seconds() - cpu) / elapsed
                finally:
                    query.stop()
                    spark.streams.removeListener(progress)
            if timed:
                progress_rows = sum(b.rows for b in progress.batches)
                busy = sum(b.duration_ms for b in progress.batches if b.rows) / 1000.0
                return count / elapsed, (progress_rows / busy if busy else 0.0), cores
    finally:
        spark.stop()
    raise AssertionError("unreachable")


def main(count: int = 40_000) -> None:
    messages = generate(count, seed=11)
    with TansuBroker() as broker:
        bootstrap = broker.bootstrap
        ingest, warmup = f"bench-ingest-{uuid.uuid4().hex[:6]}", f"bench-warmup-{uuid.uuid4().hex[:6]}"
        produce_ingest(bootstrap, ingest, messages, partitions=PARTITIONS)
        produce_ingest(bootstrap, warmup, messages[: min(2000, count)], partitions=PARTITIONS)

        topics = topic_names("inproc")
        create_topics(bootstrap, *topics.values())
        config = gateway_config(topics, ingest=ingest, bootstrap=bootstrap)
        started, cpu = time.perf_counter(), busy_seconds()
        outcomes, _ = run_in_reactor(lambda: ensureDeferred(run_reference(bootstrap, config, messages)))
        elapsed = time.perf_counter() - started
        in_process, in_process_cores = count / elapsed, (busy_seconds() - cpu) / elapsed

        rates: dict[str, Any] = {}
        for master in ("local[1]", "local[2]"):
            rates[master] = spark_run(master, bootstrap, ingest, warmup, count)

    rows = [("in-process router (chains + KafkaRouter, 1 reactor)", in_process)]
    rows += [(f"spark {master}, wall clock incl. batch planning", wall) for master, (wall, _, _) in rates.items()]
    rows += [(f"spark {master}, Spark's processing rate per batch", busy) for master, (_, busy, _) in rates.items()]
    report(f"Pipeline throughput, {count} messages ({dict(outcomes)})", rows,
           "in-process router (chains + KafkaRouter, 1 reactor)")
    scaling = rates["local[2]"][0] / rates["local[1]"][0]
    print(f"\n  local[2] / local[1] (wall clock): {scaling:.2f}")
    cores = ", ".join(f"{master} {c:.1f}" for master, (_, _, c) in rates.items())
    print(f"  machine cores busy during each run (of {os.cpu_count()}): in-process {in_process_cores:.1f}, {cores}")
    print(json.dumps({"count": count, "in_process": round(in_process),
                      **{m: [round(w), round(b), round(c, 2)] for m, (w, b, c) in rates.items()}}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40_000)
