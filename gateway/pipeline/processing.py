"""What the pipeline does to one record: the same decisions as the in-process gateway.

:class:`RecordProcessor` turns an ingest record into a message
(:func:`~gateway.message.kafka_records.record_to_message`), runs the
inbound transformer chains (:class:`~gateway.transform.TransformChains`,
plugins loaded by the same plugin manager) and the routes
(:class:`~gateway.routing.router.Router`), and returns the record to
publish as an :class:`Output`.  It imports neither Spark nor a reactor:
:func:`process_arrow` is the Spark-side wrapper (``mapInArrow``), and tests
call the processor directly.

Mirrors the gateway's order (STOMP SEND -> inbound chain -> routing):

* the ingest gateway's ``jmsbridge.origin`` is the ingest marker, not part of
  the message: it is removed before the chain (the in-process router never
  sees it), and the output carries the pipeline's own origin;
* chain outcomes: Deliver (a branch changes the destination), Dropped (no
  output, counted), DeadLettered (the message goes on to the routes with the
  transform dead-letter destination, as in the gateway), Rejected (the
  gateway would answer the SEND with an ERROR frame; here the record goes to
  the routing dead-letter topic with the reason, or the query stops);
* routing decisions: routed, soft failure under ``dead-letter`` / ``skip``
  exactly as :class:`~gateway.routing.service.KafkaRouter`; ``stop`` stops
  the query (:class:`PipelineStopped`): the batch is not committed, so a
  restart after fixing the data or the config loses nothing;
* no route: the gateway refuses the SEND; here ``unrouted = dead-letter``
  writes it to the dead-letter topic, ``drop`` only counts it.

Replay (``spec.replay``) first undoes what dead-lettering added: the
``jmsbridge.error`` / ``jmsbridge.route`` headers, and for transform dead
letters the cause properties and the original destination.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.errors import GatewayError
from gateway.message.kafka_records import (
    ERROR_HEADER,
    ORIGIN_HEADER,
    ROUTE_HEADER,
    Header,
    dead_letter_record,
    record_to_message,
)
from gateway.message.model import Message
from gateway.pipeline.settings import PipelineSpec
from gateway.routing.config import parse_routing_config
from gateway.routing.router import CYCLE, ROUTED, UNROUTED, Router
from gateway.transform import (
    DeadLettered,
    Deliver,
    Dropped,
    Outcome,
    Rejected,
    TransformChains,
    TransformContext,
    parse_transform_config,
    plugin_manager_for,
)
from gateway.transform.chain import DEAD_LETTER_CAUSE, DEAD_LETTER_TRANSFORMER, ORIGINAL_DESTINATION

OUTPUT_SCHEMA = (
    "topic string, key binary, value binary, headers array<struct<key: string, value: binary>>, "
    "outcome string, route string, message_id string"
)
"""Spark columns of the processed stream: Kafka sink columns, then bookkeeping."""

OUTCOMES = ("routed", "dead-lettered", "skipped", "dropped", "unrouted", "rejected", "cycle")
"""Every ``outcome`` value (``dead-lettered``: a routing soft failure)."""

_REPLAY_PROPERTIES = (ERROR_HEADER, ROUTE_HEADER, ORIGIN_HEADER)


class PipelineStopped(GatewayError):
    """A route with the ``stop`` soft-failure policy met a message it cannot convert:
    the micro-batch fails and the query stops (nothing is committed)."""


@dataclass(frozen=True, slots=True)
class Output:
    """What became of one record, and the record to publish if any.

    :ivar topic: where to publish; None when nothing is published.
    """

    outcome: str
    message_id: str
    route: str = "-"
    topic: str | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()

    def row(self) -> dict[str, Any]:
        """The output as an ``OUTPUT_SCHEMA`` row."""
        return {
            "topic": self.topic,
            "key": self.key,
            "value": self.value,
            "headers": [{"key": name, "value": raw} for name, raw in self.headers],
            "outcome": self.outcome,
            "route": self.route,
            "message_id": self.message_id,
        }


class RecordProcessor:
    """Processes ingest records by a :class:`PipelineSpec` (see the module docstring).

    :param plugin_manager: the loaded plugins; built from ``spec.transform`` when None.
    """

    log = Logger()

    def __init__(self, spec: PipelineSpec, *, plugin_manager: Any = None) -> None:
        self.spec = spec
        self.routing = parse_routing_config(spec.routing, spec.path)
        self.router = Router(self.routing, spec.origin)
        transform_config = parse_transform_config(spec.transform or None, spec.path)
        manager = plugin_manager if plugin_manager is not None else plugin_manager_for(transform_config)
        self.chains = TransformChains(manager, transform_config, registry=CollectorRegistry())

    # -- records -> messages ------------------------------------------------------------

    def message_of(
        self, key: bytes | None, value: bytes | None, headers: Sequence[Header] | None,
        topic: str = "", partition: int = 0, offset: int = 0,
    ) -> Message:
        """The message an ingest (or, replaying, a dead-letter) record carries."""
        message = record_to_message(
            key, value, headers, text_records=self.spec.text_records,
            fallback_id=f"kafka:{topic}:{partition}:{offset}",
        )
        if self.spec.replay:
            for name in _REPLAY_PROPERTIES:
                message.properties.pop(name, None)
            if DEAD_LETTER_CAUSE in message.properties:
                original = message.properties.pop(ORIGINAL_DESTINATION, None)
                if isinstance(original, str) and original:
                    message.destination = original
                message.properties.pop(DEAD_LETTER_CAUSE, None)
                message.properties.pop(DEAD_LETTER_TRANSFORMER, None)
        else:
            message.properties.pop(ORIGIN_HEADER, None)
        return message

    # -- messages -> outputs ------------------------------------------------------------

    def transform(self, message: Message) -> Outcome:
        """The inbound chain's outcome, as the STOMP session would run it."""
        if self.spec.replay and not self.spec.transform_replayed:
            return Deliver(message, message.destination)
        context = TransformContext("inbound", message.destination, message.destination, None)
        outcome = self.chains.run_now(message, context, owned=True)
        if isinstance(outcome, Deferred):
            return _settled(outcome)
        return outcome

    def process(self, message: Message) -> Output:
        """Transform and route ``message`` (raises PipelineStopped under ``stop``)."""
        outcome = self.transform(message)
        if isinstance(outcome, Dropped):
            return Output("dropped", message.message_id)
        if isinstance(outcome, Rejected):
            return self._dead_letter(message, "rejected", f"transform-rejected: {outcome.error}")
        if isinstance(outcome, Deliver):
            message = outcome.message
            message.destination = outcome.destination
        else:
            assert isinstance(outcome, DeadLettered)
            message = outcome.message
        decision = self.router.route(message)
        if decision.outcome == ROUTED:
            return Output("routed", message.message_id, decision.route_name, decision.topic, decision.key,
                          decision.value, decision.headers)
        if decision.outcome == CYCLE:
            return Output("cycle", message.message_id)
        if decision.outcome == UNROUTED:
            if self.spec.unrouted == "dead-letter":
                return self._dead_letter(message, "unrouted",
                                         f"unrouted: no route includes destination {message.destination}")
            return Output("unrouted", message.message_id)
        failure = decision.failure
        assert failure is not None
        if decision.policy == "dead-letter" and decision.topic is not None:
            return Output("dead-lettered", message.message_id, decision.route_name, decision.topic, decision.key,
                          decision.value, decision.headers)
        if decision.policy == "skip":
            self.log.debug("route {route}: skipped message {id}: {problem}", route=decision.route_name,
                           id=message.message_id, problem=failure.detail)
            return Output("skipped", message.message_id, decision.route_name)
        raise PipelineStopped(
            f"route {decision.route_name} stopped by a soft failure (on-soft-failure=stop): "
            f"message {message.message_id}: {failure.reason}: {failure.detail}; fix the message or the route "
            "and restart the pipeline on its checkpoint"
        )

    def _dead_letter(self, message: Message, outcome: str, reason: str) -> Output:
        topic = self.routing.dead_letter_topic
        if topic is None:
            if outcome == "unrouted":
                return Output("unrouted", message.message_id)
            raise PipelineStopped(f"message {message.message_id}: {reason}; no routing dead-letter topic is set")
        key, value, headers = dead_letter_record(message, reason, "-", self.spec.origin)
        return Output(outcome, message.message_id, "-", topic, key, value, tuple(headers))

    def process_record(self, row: dict[str, Any]) -> Output:
        """:meth:`process` for one row of Spark's Kafka schema."""
        headers = [(h["key"], h["value"]) for h in row.get("headers") or ()]
        message = self.message_of(row.get("key"), row.get("value"), headers, row.get("topic") or "",
                                  row.get("partition") or 0, row.get("offset") or 0)
        return self.process(message)


def _settled(outcome: Deferred[Outcome]) -> Outcome:
    """The result of a chain Deferred that already fired; a pending one is Rejected
    (executors run no reactor: asynchronous transformers must answer at once)."""
    from gateway.errors import TransformError

    results: list[Any] = []
    outcome.addBoth(results.append)
    if results and isinstance(results[0], Deliver | Dropped | DeadLettered | Rejected):
        return results[0]
    outcome.cancel()
    return Rejected(TransformError("an asynchronous transformer did not answer at once; the pipeline runs "
                                   "no reactor on its executors"))


_processors: dict[str, RecordProcessor] = {}


def processor_for(spec: PipelineSpec) -> RecordProcessor:
    """One processor per spec per Python worker (plugins load once, not per batch)."""
    key = json.dumps(asdict(spec), sort_keys=True, default=str)
    processor = _processors.get(key)
    if processor is None:
        processor = _processors[key] = RecordProcessor(spec)
    return processor


def process_arrow(spec: PipelineSpec, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: Kafka-schema Arrow batches in, ``OUTPUT_SCHEMA`` batches out."""
    import pyarrow as pa

    schema = output_arrow_schema()
    processor = processor_for(spec)
    for batch in batches:
        rows = [processor.process_record(row).row() for row in batch.to_pylist()]
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


def output_arrow_schema() -> Any:
    """:data:`OUTPUT_SCHEMA` as an Arrow schema."""
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    return pa.schema([
        pa.field("topic", pa.string()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(header)),
        pa.field("outcome", pa.string()),
        pa.field("route", pa.string()),
        pa.field("message_id", pa.string()),
    ])
