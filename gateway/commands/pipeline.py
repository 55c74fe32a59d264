"""``jmsgateway pipeline``: start the Structured Streaming job, or replay a topic range.

Usage::

    jmsgateway pipeline --config FILE [--master URL] [--checkpoint DIR] [--set KEY=VALUE]
    jmsgateway pipeline run ...            # the same (an alias)
    jmsgateway pipeline replay --config FILE --topic DLQ [--from OFFSETS] [--to OFFSETS]
                               [--no-transform] [--master URL]
    python -m gateway.commands.pipeline --config FILE                    # same arguments
    spark-submit --master URL gateway/commands/pipeline.py --config FILE   # same arguments

OFFSETS is ``earliest``, ``latest`` or JSON ``{"topic": {"0": 42}}``.  The
job runs until it is stopped (SIGINT / SIGTERM stop the query between
micro-batches' writes; a restart resumes from the checkpoint).  A bad
configuration, or an ingest topic the cluster does not list (checked before
Spark starts), gives one line and exit status 1; a query that stops on a
failure gives its reason and exit status 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from twisted.logger import Logger, globalLogBeginner, textFileLogObserver

from gateway.config import load_config
from gateway.errors import ConfigError, ConnectorError, GatewayError
from gateway.locations import choose_config

log = Logger(namespace="gateway.pipeline")


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="run the routes and transformers on Spark")
    parser.add_argument("--config", default=None, help="the gateway TOML file (default: looked up as for "
                                                       "twistd jmsgateway, docs/operations.md)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--master", default=None, help="Spark master URL (default: spark-submit's or local[*])")
    parser.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers (overrides pipeline.bootstrap)")
    parser.add_argument("--kafka-access", choices=("auto", "spark", "python"), default=None)
    return parser


def run_parser(prog: str = "jmsgateway pipeline") -> argparse.ArgumentParser:
    """Arguments of the streaming job."""
    parser = _parser(prog)
    parser.add_argument("--checkpoint", default=None, help="checkpoint folder (overrides pipeline.checkpoint)")
    return parser


def replay_parser(prog: str = "jmsgateway pipeline replay") -> argparse.ArgumentParser:
    """Arguments of a replay."""
    parser = _parser(prog)
    parser.add_argument("--topic", required=True, help="the topic to replay (typically the dead-letter topic)")
    parser.add_argument("--from", dest="starting", default="earliest", help="first offsets (default earliest)")
    parser.add_argument("--to", dest="ending", default="latest", help="end offsets, exclusive (default latest)")
    parser.add_argument("--no-transform", action="store_true",
                        help="route the records without running the transformer chains again")
    return parser


def start_logging() -> None:
    """Send twisted.logger events to stderr (once per process)."""
    try:
        globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    except Exception:  # pragma: no cover - logging already began
        return


def main(argv: list[str] | None = None) -> int:
    """The ``jmsgateway pipeline`` subcommand; returns the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["replay"]:
        return replay(replay_parser().parse_args(arguments[1:]))
    if arguments[:1] == ["run"]:
        arguments = arguments[1:]
    return run(run_parser().parse_args(arguments))


def _load(args: argparse.Namespace, **overrides: Any) -> tuple[Any, Any]:
    from gateway.pipeline.settings import parse_pipeline_settings

    config = load_config(choose_config(args.config).path, args.set)
    settings = parse_pipeline_settings(config, bootstrap=args.bootstrap, kafka_access=args.kafka_access, **overrides)
    return config, settings


def run(args: argparse.Namespace) -> int:
    """Start the streaming query and wait until it stops."""
    from gateway.pipeline.settings import pipeline_spec

    try:
        config, settings = _load(args, checkpoint=args.checkpoint)
        spec = pipeline_spec(config, settings)
    except (ConfigError, OSError) as error:
        print(f"{error}", file=sys.stderr)
        return 1
    start_logging()
    from gateway.pipeline.job import PipelineJob, build_spark, check_ingest_topics

    try:
        check_ingest_topics(settings)  # before Spark: one line, not a Java stack trace first
    except ConnectorError as error:
        print(f"jmsgateway pipeline: {error}", file=sys.stderr)
        return 1
    spark = build_spark(args.master, shuffle_partitions=settings.shuffle_partitions)
    spark.sparkContext.setLogLevel("WARN")
    try:
        job = PipelineJob(spark, settings, spec)
        query = job.start()
    except GatewayError as error:
        print(f"{error}", file=sys.stderr)
        spark.stop()
        return 1

    stopping: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(signum)  # no Spark call here: the main thread is inside one

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        while not query.awaitTermination(1):
            if stopping:
                log.info("signal {signum}: stopping the pipeline", signum=stopping[0])
                query.stop()
    except Exception as error:
        print(f"pipeline stopped: {_reason(error)}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    return 0


def replay(args: argparse.Namespace) -> int:
    """Replay a topic range through the current chains and routes."""
    from gateway.pipeline.settings import check_offsets_spec, pipeline_spec

    try:
        config, settings = _load(args)
        check_offsets_spec(args.starting, key="--from")
        check_offsets_spec(args.ending, key="--to")
        spec = pipeline_spec(config, settings, replay=True, transform_replayed=not args.no_transform)
    except (ConfigError, OSError) as error:
        print(f"{error}", file=sys.stderr)
        return 1
    start_logging()
    from gateway.pipeline.job import PipelineJob, build_spark

    spark = build_spark(args.master, app_name="jmsgateway-replay", shuffle_partitions=settings.shuffle_partitions)
    spark.sparkContext.setLogLevel("WARN")
    try:
        report = PipelineJob(spark, settings, spec).replay(args.topic, args.starting, args.ending)
    except GatewayError as error:
        print(f"{error}", file=sys.stderr)
        return 1
    except Exception as error:
        print(f"replay failed: {_reason(error)}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    outcomes = ", ".join(f"{name} {count}" for name, count in sorted(report.outcomes.items())) or "nothing"
    print(f"replayed {report.records} record(s) of {args.topic}: {outcomes}")
    return 0


def _reason(error: BaseException) -> str:
    """The first line of a Spark/Python error worth showing to a user."""
    text = str(error)
    for marker in ("PipelineStopped: ", "ConnectorError: ", "ConfigError: "):
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
