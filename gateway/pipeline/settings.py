"""The ``[pipeline]`` configuration: what the Spark job reads, where it writes, how fast.

:func:`parse_pipeline_settings` validates the raw ``[pipeline]`` table into a
:class:`PipelineSettings`; :func:`pipeline_spec` bundles everything an
executor needs to rebuild the router and the transformer chains
(:class:`PipelineSpec`, plain picklable data, no compiled predicates).
Shape::

    [pipeline]
    ingest_topics = ["jms-ingest"]       # what the STOMP gateways write to (required)
    bootstrap = "kafka1:9092"            # default: the routing connector's uri
    origin = "jmsgateway"                # jmsbridge.origin written; default: [gateway] id
    checkpoint = "var/pipeline-checkpoint"
    kafka_access = "auto"                # auto | spark (format "kafka") | python (own source/sink)
    starting_offsets = "earliest"        # earliest | latest | JSON {"topic": {"0": 42}}
    max_offsets_per_trigger = 10000      # 0: no limit
    trigger_seconds = 1.0                # micro-batch interval (0: as fast as possible)
    unrouted = "dead-letter"             # no route matched: dead-letter | drop (both counted)
    query_name = "jmsgateway-pipeline"
    shuffle_partitions = 4
    producer = { "linger.ms" = 5 }       # librdkafka settings merged over ours (python access)
    consumer = { }

Nothing here imports Spark or Twisted.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from gateway.config import GatewayConfig
from gateway.errors import ConfigError, did_you_mean
from gateway.routing.config import parse_routing_config

KAFKA_ACCESS = ("auto", "spark", "python")
UNROUTED_POLICIES = ("dead-letter", "drop")
_KEYS = (
    "ingest_topics",
    "bootstrap",
    "origin",
    "checkpoint",
    "kafka_access",
    "starting_offsets",
    "max_offsets_per_trigger",
    "trigger_seconds",
    "unrouted",
    "query_name",
    "shuffle_partitions",
    "producer",
    "consumer",
)


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """What every executor needs to process records exactly like the in-process router.

    Plain data (picklable): the executors compile routes and load plugins
    themselves, once per Python worker.

    :ivar routing: the ``[routing]`` table with ``properties_file`` read and inlined.
    :ivar transform: the ``[transform]`` table with ``plugin_dirs`` made absolute.
    :ivar origin: the gateway id written as ``jmsbridge.origin``.
    :ivar unrouted: ``dead-letter`` or ``drop`` for messages no route includes.
    :ivar replay: records come from a dead-letter topic: undo what dead-lettering added.
    :ivar transform_replayed: run the transformer chains on replayed records too.
    """

    routing: dict[str, Any]
    transform: dict[str, Any]
    origin: str
    path: str = ""
    unrouted: str = "dead-letter"
    text_records: bool = True
    replay: bool = False
    transform_replayed: bool = True


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """The validated ``[pipeline]`` table (see the module docstring)."""

    ingest_topics: tuple[str, ...]
    bootstrap: str
    origin: str
    checkpoint: str
    kafka_access: str = "auto"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 10_000
    trigger_seconds: float = 1.0
    unrouted: str = "dead-letter"
    query_name: str = "jmsgateway-pipeline"
    shuffle_partitions: int = 4
    producer: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    path: str = ""



def _bootstrap_from_connector(config: GatewayConfig) -> str:
    name = str(config.routing.get("connector", "kafka"))
    options = config.connectors.get(name)
    if not isinstance(options, dict):
        return ""
    bootstrap = options.get("bootstrap")
    if isinstance(bootstrap, str) and bootstrap:
        return bootstrap
    uri = options.get("uri")
    return uri.split("://", 1)[-1].rstrip("/") if isinstance(uri, str) else ""


def parse_pipeline_settings(config: GatewayConfig, **overrides: Any) -> PipelineSettings:
    """Validate ``config.pipeline`` (raises ConfigError naming file and key).

    :param overrides: values given on the command line (``checkpoint``,
        ``bootstrap`` …); None values are ignored.
    """
    raw = dict(config.pipeline)
    path = config.path
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"unknown key{did_you_mean(key, _KEYS)}", path=path, key=f"pipeline.{key}")
    raw.update({k: v for k, v in overrides.items() if v is not None})

    def typed(key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, kind):  # no boolean setting here
            raise ConfigError(f"expected {_kind_name(kind)}, got {value!r}", path=path, key=f"pipeline.{key}")
        return value

    topics = raw.get("ingest_topics")
    if isinstance(topics, str):
        topics = [topics]
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise ConfigError("expected a non-empty array of topic names", path=path, key="pipeline.ingest_topics")
    bootstrap = typed("bootstrap", str, "") or _bootstrap_from_connector(config)
    if not bootstrap:
        raise ConfigError(
            "no Kafka bootstrap servers: set pipeline.bootstrap or the routing connector's uri",
            path=path,
            key="pipeline.bootstrap",
        )
    access = typed("kafka_access", str, "auto")
    if access not in KAFKA_ACCESS:
        raise ConfigError(f"expected one of {', '.join(KAFKA_ACCESS)}, got {access!r}", path=path,
                          key="pipeline.kafka_access")
    unrouted = typed("unrouted", str, "dead-letter")
    if unrouted not in UNROUTED_POLICIES:
        raise ConfigError(f"expected one of {', '.join(UNROUTED_POLICIES)}, got {unrouted!r}", path=path,
                          key="pipeline.unrouted")
    starting = typed("starting_offsets", str, "earliest")
    check_offsets_spec(starting, path=path, key="pipeline.starting_offsets")
    max_offsets = typed("max_offsets_per_trigger", int, 10_000)
    trigger = float(typed("trigger_seconds", (int, float), 1.0))
    shuffle = typed("shuffle_partitions", int, 4)
    for key, value in (("max_offsets_per_trigger", max_offsets), ("trigger_seconds", trigger)):
        if value < 0:
            raise ConfigError(f"must not be negative, got {value}", path=path, key=f"pipeline.{key}")
    if shuffle < 1:
        raise ConfigError(f"must be at least 1, got {shuffle}", path=path, key="pipeline.shuffle_partitions")
    checkpoint = typed("checkpoint", str, "") or config.data_path("pipeline-checkpoint")
    return PipelineSettings(
        ingest_topics=tuple(topics),
        bootstrap=bootstrap,
        origin=typed("origin", str, "") or config.id,
        checkpoint=checkpoint,
        kafka_access=access,
        starting_offsets=starting,
        max_offsets_per_trigger=max_offsets,
        trigger_seconds=trigger,
        unrouted=unrouted,
        query_name=typed("query_name", str, "jmsgateway-pipeline"),
        shuffle_partitions=shuffle,
        producer=dict(typed("producer", dict, {})),
        consumer=dict(typed("consumer", dict, {})),
        path=path,
    )


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "a string", int: "an integer", float: "a number", dict: "a table"}.get(k, k.__name__)
                       for k in kinds)


def check_offsets_spec(text: str, *, path: str = "", key: str = "") -> None:
    """Raise ConfigError unless ``text`` is ``earliest``, ``latest`` or offsets JSON."""
    if text in ("earliest", "latest"):
        return
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
        isinstance(parts, dict) and all(isinstance(o, int) for o in parts.values()) for parts in parsed.values()
    ):
        raise ConfigError(
            'expected earliest, latest or JSON like {"topic": {"0": 42}} (-2: earliest, -1: latest)',
            path=path,
            key=key,
        )


def pipeline_spec(config: GatewayConfig, settings: PipelineSettings, *, replay: bool = False,
                  transform_replayed: bool = True) -> PipelineSpec:
    """The executors' recipe, validated on the driver first (raises ConfigError).

    The routes are parsed here so a bad route fails before Spark starts; the
    executors get the ``[routing]`` table with its properties file inlined
    (file first, then inline properties: the same precedence) and the
    ``[transform]`` table with absolute plugin folders.
    """
    parse_routing_config(config.routing, config.path)
    routing = dict(config.routing)
    if "properties_file" in routing:
        file_name = str(routing.pop("properties_file"))
        if not os.path.isabs(file_name):
            file_name = os.path.join(os.path.dirname(config.path) or ".", file_name)
        with open(file_name, encoding="utf-8") as handle:
            text = handle.read()
        routing["properties"] = text + "\n" + str(routing.get("properties", ""))
    transform = dict(config.transform)
    dirs = transform.get("plugin_dirs", ["plugins"])
    if isinstance(dirs, list):
        transform["plugin_dirs"] = [os.path.abspath(d) if isinstance(d, str) else d for d in dirs]
    return PipelineSpec(
        routing=routing,
        transform=transform,
        origin=settings.origin,
        path=config.path,
        unrouted=settings.unrouted,
        replay=replay,
        transform_replayed=transform_replayed,
    )
