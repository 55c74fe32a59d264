"""The ``[pipeline]`` configuration: what the Spark job reads, where it writes, how fast.

:func:`parse_pipeline_settings` resolves the ``[pipeline]`` model's defaults;
:func:`pipeline_spec` bundles everything an executor needs to rebuild the router and
the transformer chains (:class:`PipelineSpec`, plain picklable data, no compiled
predicates).  Keys: docs/configuration.md.  Nothing here imports Spark or Twisted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, PrivateAttr, field_validator

from gateway.errors import ConfigError
from gateway.identity import resolve_gateway_id
from gateway.locations import resolve_plugin_folder
from gateway.routing.config import RoutingSection, parse_routing_config
from gateway.schema import Int, Seconds, Section, Str, Table, validate
from gateway.transform.config import TransformConfig

KAFKA_ACCESS = ("auto", "spark", "python")
UNROUTED_POLICIES = ("dead-letter", "drop")


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


class PipelineSettings(Section):
    """The ``[pipeline]`` table: what the Spark job reads, where it writes, how fast."""

    ingest_topics: Annotated[tuple[Annotated[Str, Field(min_length=1)], ...], Field(min_length=1)]
    """Topics the STOMP gateways write to (a name or a list)."""
    bootstrap: Str = ""
    """Kafka bootstrap servers (default: the routing connector's uri)."""
    origin: Str = ""
    """jmsbridge.origin written (default: [gateway] id)."""
    checkpoint: Str = ""
    """Spark checkpoint folder (default: <data_dir>/pipeline-checkpoint)."""
    kafka_access: Literal["auto", "spark", "python"] = "auto"
    """spark: format "kafka"; python: the project's own source/sink; auto: spark when its jar is there."""
    starting_offsets: Str = "earliest"
    """earliest | latest | JSON {"topic": {"0": 42}}."""
    max_offsets_per_trigger: Annotated[Int, Field(ge=0)] = 10_000
    """Records per micro-batch (0: no limit)."""
    trigger_seconds: Seconds = 1.0
    """Micro-batch interval (0: as fast as possible)."""
    unrouted: Literal["dead-letter", "drop"] = "dead-letter"
    """What happens to a message no route includes (counted either way)."""
    query_name: Str = "jmsgateway-pipeline"
    """Name of the streaming query."""
    shuffle_partitions: Annotated[Int, Field(ge=1)] = 4
    """spark.sql.shuffle.partitions."""
    producer: Table = {}
    """librdkafka producer settings merged over ours (python access)."""
    consumer: Table = {}
    """librdkafka consumer settings merged over ours (python access)."""
    _path: str = PrivateAttr("")

    @field_validator("ingest_topics", mode="before", json_schema_input_type=str | list[str])
    @classmethod
    def _one_topic(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("starting_offsets")
    @classmethod
    def _offsets(cls, value: str) -> str:
        try:
            check_offsets_spec(value)
        except ConfigError as error:
            raise ValueError(error.problem) from None
        return value

    @property
    def path(self) -> str:
        """The configuration file."""
        return self._path


PipelineSection = PipelineSettings
"""``[pipeline]`` as the configuration file gives it (defaults resolved by :func:`parse_pipeline_settings`)."""


class WholeConfig(Protocol):
    """What the pipeline reads of the whole configuration (:class:`gateway.config.GatewayConfig`
    provides it; the configuration composes ``[pipeline]``, so this package cannot import it)."""

    @property
    def pipeline(self) -> PipelineSection | None: ...
    @property
    def routing(self) -> RoutingSection: ...
    @property
    def transform(self) -> TransformConfig: ...
    @property
    def connectors(self) -> Mapping[str, Any]: ...
    @property
    def path(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def data_dir(self) -> str: ...
    def data_path(self, name: str) -> str: ...


def _bootstrap_from_connector(config: WholeConfig) -> str:
    options = config.connectors.get(config.routing.connector or "kafka")
    bootstrap = getattr(options, "bootstrap", None)
    return bootstrap if isinstance(bootstrap, str) else ""


def parse_pipeline_settings(config: WholeConfig, **overrides: Any) -> PipelineSettings:
    """``[pipeline]`` with its defaults resolved (raises ConfigError naming file and key).

    :param overrides: values given on the command line (``checkpoint``,
        ``bootstrap`` …); None values are ignored.
    """
    raw = config.pipeline.model_dump(exclude_unset=True) if config.pipeline is not None else {}
    raw.update({k: v for k, v in overrides.items() if v is not None})
    settings = validate(PipelineSettings, raw, path=config.path, prefix="pipeline")
    bootstrap = settings.bootstrap or _bootstrap_from_connector(config)
    if not bootstrap:
        raise ConfigError("no Kafka bootstrap servers: set pipeline.bootstrap or the routing connector's uri",
                          path=config.path, key="pipeline.bootstrap")
    settings = settings.model_copy(update={
        "bootstrap": bootstrap, "origin": settings.origin or resolve_gateway_id(config.id, config.data_dir),
        "checkpoint": settings.checkpoint or config.data_path("pipeline-checkpoint")})
    settings._path = config.path
    return settings


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


def pipeline_spec(config: WholeConfig, settings: PipelineSettings, *, replay: bool = False,
                  transform_replayed: bool = True) -> PipelineSpec:
    """The executors' recipe, validated on the driver first (raises ConfigError).

    The routes are parsed here so a bad route fails before Spark starts; the
    executors get the ``[routing]`` table with its properties file inlined
    (file first, then inline properties: the same precedence) and the
    ``[transform]`` table with absolute plugin folders.
    """
    parse_routing_config(config.routing, config.path)
    routing = config.routing.model_dump(exclude_none=True)
    if "properties_file" in routing:
        file_name = str(routing.pop("properties_file"))
        if not os.path.isabs(file_name):
            file_name = os.path.join(os.path.dirname(config.path) or ".", file_name)
        with open(file_name, encoding="utf-8") as handle:
            text = handle.read()
        routing["properties"] = text + "\n" + str(routing.get("properties", ""))
    transform = config.transform.model_dump(exclude_defaults=True)
    # absolute, as the driver finds them (``plugins`` missing here: the package's shipped plugins)
    transform["plugin_dirs"] = [os.path.abspath(resolve_plugin_folder(d)) for d in config.transform.plugin_dirs]
    return PipelineSpec(
        routing=routing,
        transform=transform,
        origin=settings.origin,
        path=config.path,
        unrouted=settings.unrouted,
        replay=replay,
        transform_replayed=transform_replayed,
    )
