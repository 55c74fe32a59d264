"""The Twisted half of routing: apply a :class:`RouteDecision` through the Kafka connector.

:class:`KafkaRouter` asks the pure :class:`~gateway.routing.router.Router`
where a message goes, then:

* routed: publishes the record; the Deferred fires on Kafka's delivery
  report (so a RECEIPT means ``acks=all``), counting success and latency;
* soft failure: ``stop`` stops that route (this and later messages on it fail
  with :class:`RouteStopped`), ``skip`` logs and drops it (the send succeeds),
  ``dead-letter`` publishes it to the dead-letter topic;
* hard failure (unknown topic, not authorised, the dead-letter topic
  failing): stops all routing with one clear log line; every later send fails
  with :class:`RouteStopped` until :meth:`KafkaRouter.restart`;
* a message carrying this gateway's ``jmsbridge.origin`` is not routed back:
  counted, and the send succeeds on the STOMP path (:meth:`KafkaRouter.post`,
  :meth:`KafkaRouter.forward`), but :meth:`KafkaRouter.send` and
  :meth:`KafkaRouter.send_batch` (bridges, transactions) fail with
  :class:`NotRouted`: whoever asked must not take it for delivered.

It also provides :class:`IConnector`, so the gateway can map destinations to
it like to any connector: sends are routed, subscriptions go to Kafka.
Nothing here blocks; metrics live in an injectable registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.logger import Logger
from zope.interface import implementer

from gateway.errors import ConfigError, ConnectorError, DestinationError, MessageRefused
from gateway.interfaces import (
    Health,
    IConnector,
    IConsumer,
    ICredentialed,
    IExactlyOnceSource,
    IExactlyOnceTarget,
    IFlowControlled,
    IFrameForwarder,
    IHeldMessages,
    IStatusReporting,
    ITopicLog,
    SubscriptionSpec,
)
from gateway.message.kafka_delivery import DeliveryReport, KafkaDeliveryError, Settled
from gateway.message.kafka_records import Header, origin_of
from gateway.message.model import Message, new_message_id, now_millis
from gateway.routing.config import Route, RoutingConfig, RoutingSection, parse_routing_config
from gateway.routing.frame_records import frame_record
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.router import CYCLE, ROUTED, SOFT_FAILURE, UNROUTED, RouteDecision, Router


class NotRouted(MessageRefused):
    """The cycle guard kept a message back: it carries this gateway's own ``jmsbridge.origin``."""


class RouteStopped(ConnectorError):
    """Routing (or one route) is stopped after a failure; the message was not sent.

    Permanent: the route stays stopped until :meth:`KafkaRouter.restart`, so a bridge fails
    instead of sending again for ever.

    :ivar route: the stopped route, or ``*`` when all routing is stopped.
    """

    permanent = True
    in_doubt = False

    def __init__(self, message: str, *, route: str = "*") -> None:
        super().__init__(message)
        self.route = route


@dataclass(frozen=True, slots=True)
class RoutingResult:
    """What became of a message that routing accepted.

    :ivar outcome: ``routed``, ``dead-lettered``, ``skipped``, ``cycle`` or ``unrouted``.
    :ivar report: where Kafka stored it (routed / dead-lettered).
    """

    outcome: str
    route: str = "-"
    topic: str | None = None
    report: DeliveryReport | None = None


_UNDECIDED = object()

DEAD_LETTER_ROUTE = "*dead-letter*"
"""The name :attr:`KafkaRouter.missing_topics` gives the dead-letter topic."""


@implementer(IFrameForwarder, IFlowControlled, IStatusReporting, ICredentialed, IHeldMessages, IExactlyOnceSource,
             IExactlyOnceTarget)
class KafkaRouter:
    """Routes messages to Kafka by a :class:`RoutingConfig`.

    :param connector: the Kafka connector records go through.
    :param origin: this gateway's id (``jmsbridge.origin``).
    :param clock: ``seconds()`` for latencies (the reactor).
    :param registry: where the metrics live.
    """

    log = Logger()

    def __init__(
        self,
        config: RoutingConfig,
        connector: Any,
        *,
        origin: str,
        clock: Any,
        registry: CollectorRegistry | None = None,
        name: str = "kafka-routes",
    ) -> None:
        self.config = config
        self.router = Router(config, origin)
        self.connector = connector
        self.clock = clock
        self.name = name
        self.metrics = RoutingMetrics(registry)
        self.congestion = connector.congestion
        """The Kafka connector's: routed SENDs wait while librdkafka's queue is half full."""
        self._forward_routes: dict[str, Any] = {}
        """Destination -> :meth:`forward_route`'s answer (cached)."""
        self.stopped: str | None = None
        """Why all routing stopped (a hard failure), or None."""
        self.stopped_routes: dict[str, str] = {}
        """Route name -> why it stopped (a soft failure under ``stop``)."""
        self.missing_topics: dict[str, str] = {}
        """Route name (``*dead-letter*`` for the dead-letter topic) -> its topic, which the
        cluster did not list at start-up (or at the last :meth:`restart`)."""

    # ------------------------------------------------------------ routing


    @property
    def capabilities(self) -> frozenset[Any]:
        """The Kafka connector's (:attr:`IConnector.capabilities`): subscriptions and batches go through it."""
        result: frozenset[Any] = self.connector.capabilities
        return result

    def restart(self, route: str | None = None) -> None:
        """Clear a stop: of one route, or of everything."""
        if route is None:
            self.stopped = None
            self.stopped_routes.clear()
        else:
            self.stopped_routes.pop(route, None)
        self.log.info("routing restarted ({route})", route=route or "all routes")
        if self.missing_topics:  # created meanwhile? (check_topic reads the cluster's metadata again)
            checks = [self.connector.check_topic(topic) for topic in set(self.missing_topics.values())]
            DeferredList(checks, consumeErrors=True).addCallback(self._check_topics)

    def use_config(self, config: RoutingConfig) -> None:
        """Route by ``config`` from the next message on (a SIGHUP reload; the same connector): the stops
        of routes it no longer has are forgotten and its topics are checked again."""
        self.config = config
        self.router = Router(config, self.router.origin)
        self._forward_routes.clear()
        names = {route.name for route in config.routes}
        self.stopped_routes = {name: why for name, why in self.stopped_routes.items() if name in names}
        self._check_topics()

    def _check_topics(self, _: object = None) -> None:
        """Warn about (and remember) every route whose topic the cluster does not list, so a
        missing topic shows at start-up in the log and ``/health``, not at the first SEND."""
        wanted = {route.name: route.topic for route in self.config.routes}
        if self.config.dead_letter_topic:
            wanted[DEAD_LETTER_ROUTE] = self.config.dead_letter_topic
        missing = set(self.connector.missing_topics(set(wanted.values())))
        self.missing_topics = {name: topic for name, topic in wanted.items() if topic in missing}
        for name, topic in self.missing_topics.items():
            self.log.warn("route {route}: kafka topic {topic!r} does not exist at {bootstrap}: its messages will "
                          "stop routing until it is created (then POST /routing/restart)", route=name, topic=topic,
                          bootstrap=self.connector.settings.bootstrap)

    def status(self) -> dict[str, Any]:
        """A summary for the admin page."""
        return {
            "stopped": self.stopped,
            "stopped_routes": dict(self.stopped_routes),
            "missing_topics": dict(self.missing_topics),
            "routes": [r.name for r in self.config.routes],
            "kafka": self.connector.status(),
        }

    def health(self) -> Health:
        """:class:`IStatusReporting`: down while routing or a route is stopped, or the connector is down."""
        if self.stopped is not None:
            return Health(False, f"routing stopped: {self.stopped}")
        if self.stopped_routes:
            stopped = "; ".join(f"{route}: {why}" for route, why in self.stopped_routes.items())
            return Health(False, f"route(s) stopped: {stopped}")
        if self.missing_topics:
            missing = "; ".join(f"{route}: {topic}" for route, topic in self.missing_topics.items())
            return Health(False, f"kafka topic(s) of route(s) do not exist: {missing}")
        health: Health = self.connector.health()
        return health

    def route(self, message: Message) -> Deferred[RoutingResult]:
        """Route one message; fires when Kafka acknowledged it (or it was
        knowingly skipped), fails with ConnectorError otherwise."""
        return self._dispatch(message, False)

    def _dispatch(self, message: Message, unrouted_fails: bool) -> Deferred[RoutingResult]:
        """:meth:`route`; with ``unrouted_fails`` a message no route includes
        fails with DestinationError (what :meth:`send` wants)."""
        if self.stopped is not None:
            return fail(RouteStopped(f"routing to Kafka is stopped: {self.stopped}"))
        started = self.clock.seconds()
        decision = self.router.route(message)
        if decision.outcome != ROUTED:
            return self._not_routed(message, decision, started, unrouted_fails)
        route = decision.route_name
        if route in self.stopped_routes:
            return fail(RouteStopped(f"route {route} is stopped: {self.stopped_routes[route]}", route=route))
        topic = decision.topic
        assert topic is not None
        done: Deferred[RoutingResult] = Deferred()

        def published(error: Exception | None, record: Any) -> None:
            if error is not None:
                done.errback(error)
            else:
                done.callback(RoutingResult(ROUTED, route, topic, DeliveryReport.of(record)))

        self._publish(message.message_id, route, topic, decision.key, decision.value, list(decision.headers),
                      published)
        return done

    def _publish(self, message_id: str, route: str, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[Header], settled: Settled) -> None:
        """Produce a routed record; count it and call ``settled(error, record)`` on Kafka's report."""
        clock = self.clock
        started = clock.seconds()
        stats = self.metrics.stats(route)

        def reported(error: Exception | None, record: Any) -> None:
            if error is None:
                stats.delivered(max(0.0, clock.seconds() - started))
                if self.missing_topics:  # (created after start-up)
                    self.missing_topics.pop(route, None)
            else:
                self._publish_failed(message_id, route, topic, error)
            settled(error, record)

        self.connector.produce(topic, key, value, headers, reported)

    def post(self, message: Message, settled: Settled, confirm: bool = True) -> None:
        """:class:`IPostingConnector`: route ``message`` like :meth:`send`, reporting
        through ``settled(error, record)`` instead of a Deferred (the STOMP SEND hot path).
        Every record has its own delivery report, so ``confirm`` changes nothing."""
        if self.stopped is None:
            decision = self.router.route(message)
            route = decision.route_name
            if decision.outcome == ROUTED and route not in self.stopped_routes:
                assert decision.topic is not None
                self._publish(message.message_id, route, decision.topic, decision.key, decision.value,
                              list(decision.headers), settled)
                return
        d = self._dispatch(message, True)
        d.addCallbacks(lambda result: settled(None, result), lambda failure: settled(failure.value, None))

    def forward(self, destination: str, headers: dict[str, str], body: bytes, default_persistent: bool,
                settled: Settled) -> bool:
        """:class:`IFrameForwarder`: route a plain SEND without building a message
        (what :meth:`post` does with ``frame_to_message(frame)``).  Only for a
        destination an address-only route decides (:meth:`forward_route`) and a
        frame :func:`frame_record` takes; False otherwise, or when routing or
        the route is stopped, and the session takes the message path."""
        if self.stopped is not None:
            return False
        route = self._forward_routes.get(destination, _UNDECIDED)
        if route is _UNDECIDED:
            route = self.forward_route(destination)
            if len(self._forward_routes) < 10_000:
                self._forward_routes[destination] = route
        if route is None or route.name in self.stopped_routes:
            return False
        message_id = new_message_id()
        record = frame_record(headers, body, destination, default_persistent=default_persistent,
                              message_id=message_id, now_ms=now_millis(), key_name=route.key, origin=self.router.origin)
        if record is None:
            return False
        key, value, record_headers = record
        self._publish(message_id, route.name, route.topic, key, value, record_headers, settled)
        return True

    def forward_route(self, destination: str) -> Route | None:
        """The route a message to ``destination`` takes when the destination alone
        decides it: every route before it, and it, include by address only (no
        selector, no header test).  None when no route or a route that needs the
        message comes first."""
        probe = Message(destination=destination)
        for route in self.config.routes:
            if route.selector is not None or route.include is None or route.include.kind != "address":
                return None
            if route.include.matches(probe):
                return route
        return None

    def _not_routed(self, message: Message, decision: RouteDecision, started: float,
                    unrouted_fails: bool) -> Deferred[RoutingResult]:
        """The outcomes other than ROUTED: cycle, unrouted, soft failure."""
        if decision.outcome == CYCLE:
            self.metrics.cycles.inc()
            self.log.debug("message {id} came from this gateway; not routed back", id=message.message_id)
            return succeed(RoutingResult(CYCLE))
        if decision.outcome == UNROUTED:
            if unrouted_fails:
                return fail(DestinationError(f"no Kafka route includes destination {message.destination}"))
            return succeed(RoutingResult(UNROUTED))
        route = decision.route_name
        if route in self.stopped_routes:
            return fail(RouteStopped(f"route {route} is stopped: {self.stopped_routes[route]}", route=route))
        assert decision.outcome == SOFT_FAILURE
        return self._soft_failure(message, decision, started)

    def _soft_policy(self, message: Message, decision: RouteDecision) -> str:
        """Counts and logs the soft failure ``decision`` names and returns the policy it gets:
        ``skip``, ``dead-letter`` (to ``decision.topic``) or ``stop`` (the route is stopped here)."""
        route = decision.route_name
        failure = decision.failure
        assert failure is not None
        self.metrics.failures.labels(route, failure.reason).inc()
        if decision.policy == "skip":
            self.metrics.skipped.labels(route).inc()
            self.log.warn("route {route}: skipped message {id}: {problem}", route=route, id=message.message_id,
                          problem=failure.detail)
            return "skip"
        if decision.policy == "dead-letter" and decision.topic is not None:
            self.log.warn("route {route}: dead-lettering message {id} to {topic}: {problem}", route=route,
                          id=message.message_id, topic=decision.topic, problem=failure.detail)
            return "dead-letter"
        reason = f"message {message.message_id}: {failure.reason}: {failure.detail}"
        self.stopped_routes[route] = reason
        self.log.error("route {route} stopped by a soft failure: {reason}", route=route, reason=reason)
        return "stop"

    def _soft_failure(self, message: Message, decision: RouteDecision, started: float) -> Deferred[RoutingResult]:
        route = decision.route_name
        policy = self._soft_policy(message, decision)
        if policy == "skip":
            return succeed(RoutingResult("skipped", route))
        if policy == "dead-letter":
            assert decision.topic is not None
            topic = decision.topic
            d: Deferred[Any] = self.connector.send_record(topic, decision.key, decision.value, decision.headers)

            def dead_lettered(report: DeliveryReport) -> RoutingResult:
                self.metrics.dead_lettered.labels(route).inc()
                self.metrics.stats(route).observe(max(0.0, self.clock.seconds() - started))
                return RoutingResult("dead-lettered", route, topic, report)

            def lost(reason: Any) -> Any:
                error = reason.value
                self.metrics.failures.labels(route, getattr(error, "code", "") or "dead-letter").inc()
                self._stop_all(f"publishing message {message.message_id} to dead-letter topic {topic} failed: "
                               f"{error}")
                raise RouteStopped(f"dead-letter topic {topic} failed for message {message.message_id}: {error}")

            d.addCallbacks(dead_lettered, lost)
            return d
        assert decision.failure is not None
        return fail(RouteStopped(f"route {route} stopped: {decision.failure.detail}", route=route))

    def _publish_failed(self, message_id: str, route: str, topic: str, error: Exception) -> None:
        code = getattr(error, "code", "") or type(error).__name__
        self.metrics.failures.labels(route, code).inc()
        if isinstance(error, KafkaDeliveryError) and error.hard:
            self._stop_all(f"route {route}: publishing to {topic} failed hard ({code}): {error}")
        else:
            self.log.warn("route {route}: message {id} not published to {topic}: {error}", route=route,
                          id=message_id, topic=topic, error=str(error))

    def _stop_all(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
            self.log.critical("routing to Kafka STOPPED (hard failure): {reason}", reason=reason)

    # ------------------------------------------------------- IConnector

    def start(self) -> Deferred[Any]:
        """Start the Kafka connector, then check that every route's topic exists."""
        result: Deferred[Any] = self.connector.start()
        return result.addCallback(self._check_topics)

    def stop(self) -> Deferred[Any]:
        """Stop the Kafka connector."""
        result: Deferred[Any] = self.connector.stop()
        return result

    def send(self, message: Message) -> Deferred[RoutingResult]:
        """Route ``message``; a message no route includes fails with DestinationError,
        one the cycle guard keeps back with :class:`NotRouted` (a caller of
        ``send``, a bridge, must not take it for delivered)."""
        if self.stopped is None and origin_of(message) == self.router.origin:
            return fail(self._cycle_refused(message))
        return self._dispatch(message, True)

    def _cycle_refused(self, message: Message) -> NotRouted:
        self.metrics.cycles.inc()
        self.log.warn("message {id} to {destination} carries this gateway's own jmsbridge.origin; not routed "
                      "back (refused)", id=message.message_id, destination=message.destination)
        return NotRouted(f"message {message.message_id} carries this gateway's own jmsbridge.origin "
                         f"({self.router.origin}): the cycle guard does not route it back to Kafka")

    def send_batch(self, messages: list[Message]) -> Deferred[Any]:
        """Route a batch: every decision first (any stop fails the whole batch
        before anything is sent), then the records in one Kafka transaction
        when the connector has a ``transactional_id`` (else as a sequence)."""
        if self.stopped is not None:
            return fail(RouteStopped(f"routing to Kafka is stopped: {self.stopped}"))
        records: list[tuple[str, bytes | None, bytes | None, list[Any]]] = []
        for message in messages:
            decision = self.router.route(message)
            if decision.outcome == CYCLE:
                return fail(self._cycle_refused(message))
            if decision.outcome == UNROUTED:
                return fail(DestinationError(f"no Kafka route includes destination {message.destination}"))
            route = decision.route_name
            if route in self.stopped_routes:
                return fail(RouteStopped(f"route {route} is stopped: {self.stopped_routes[route]}", route=route))
            if decision.outcome == SOFT_FAILURE and decision.topic is None:
                if decision.policy == "skip":
                    self._soft_failure(message, decision, self.clock.seconds())
                    continue
                return self._soft_failure(message, decision, self.clock.seconds())
            assert decision.topic is not None
            records.append((decision.topic, decision.key, decision.value, list(decision.headers)))
        d: Deferred[Any] = self.connector.send_records(records)

        def refused(failure: Any) -> Any:
            error = failure.value
            if isinstance(error, KafkaDeliveryError) and error.hard:
                self._stop_all(f"batch publish failed hard ({error.code}): {error}")
            return failure

        d.addErrback(refused)
        return d

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[Any]:
        """Subscribe through the Kafka connector."""
        result: Deferred[Any] = self.connector.subscribe(spec, consumer)
        return result

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[Any]:
        """Delete a durable subscription's consumer group."""
        result: Deferred[Any] = self.connector.unsubscribe_durable(client_id, durable_name)
        return result

    # ------------------------------------------------- bridges: credentials, probe, transactions

    def with_credentials(self, user: str, password: str | None) -> IConnector:
        """:class:`ICredentialed`: the Kafka connector's private copy (not routed: a bridge
        side with its own login writes to the destination's topic)."""
        private: IConnector = self.connector.with_credentials(user, password)
        return private

    def why_cannot_tell(self, destination: str) -> str | None:
        """:class:`IHeldMessages`: known only when asked (see :meth:`held_message_ids`)."""
        return None

    def held_message_ids(self, destination: str, tail: int) -> Deferred[set[str] | None]:
        """:class:`IHeldMessages`: the route decides the topic; it can be read only when the
        destination alone decides the route (:meth:`forward_route`), else None."""
        route = self.forward_route(destination)
        if route is None:
            return succeed(None)
        result: Deferred[set[str] | None] = self.connector.held_ids_in_topic(route.topic, tail)
        return result

    def transactional_target(self, destination: str) -> tuple[Any, str, str | None, Any] | str:
        """:class:`IExactlyOnceTarget`: the Kafka connector, the topic and key of the route the
        destination alone decides and :meth:`place_in_transaction` (the route's policies), or
        why there is none."""
        route = self.forward_route(destination)
        if route is None:
            return (f"[routing] decides the topic of {destination} by more than the destination "
                    "(a selector or a header test comes first)")
        return self.connector, route.topic, route.key, self.place_in_transaction

    def place_in_transaction(self, message: Message) -> tuple[str, Any, Any, Any] | None:
        """The record ``message`` becomes in a bridge's Kafka transaction, applying the route's
        soft-failure policy as :meth:`send_batch` does: ``skip`` leaves it out (None),
        ``dead-letter`` gives the dead-letter record (committed in the same transaction),
        ``stop`` stops the route and raises :class:`RouteStopped`; a stopped route or
        routing, the cycle guard and an unrouted destination raise too (no retry helps).
        Called on the bridge's thread: the bookkeeping is counters and one dict entry."""
        if self.stopped is not None:
            raise RouteStopped(f"routing to Kafka is stopped: {self.stopped}")
        decision = self.router.route(message)
        if decision.outcome == CYCLE:
            raise self._cycle_refused(message)
        if decision.outcome == UNROUTED:
            raise DestinationError(f"no Kafka route includes destination {message.destination}")
        route = decision.route_name
        if route in self.stopped_routes:
            raise RouteStopped(f"route {route} is stopped: {self.stopped_routes[route]}", route=route)
        if decision.outcome == ROUTED:
            assert decision.topic is not None
            return decision.topic, decision.key, decision.value, list(decision.headers)
        policy = self._soft_policy(message, decision)
        if policy == "skip":
            return None
        if policy == "dead-letter":
            assert decision.topic is not None
            self.metrics.dead_lettered.labels(route).inc()
            return decision.topic, decision.key, decision.value, list(decision.headers)
        assert decision.failure is not None
        raise RouteStopped(f"route {route} stopped: {decision.failure.detail}", route=route)

    def transactional_copy(self, destination: str, target: IConnector, target_destination: str, *,
                           bridge: str, durable_name: str | None, client_id: str | None,
                           from_earliest: bool) -> Any:
        """:class:`IExactlyOnceSource`: consuming is the Kafka connector's."""
        return self.connector.transactional_copy(destination, target, target_destination, bridge=bridge,
                                                 durable_name=durable_name, client_id=client_id,
                                                 from_earliest=from_earliest)


def build_kafka_router(
    raw: dict[str, Any] | RoutingSection,
    path: str,
    connectors: dict[str, Any],
    *,
    origin: str,
    clock: Any,
    registry: CollectorRegistry | None = None,
) -> KafkaRouter | None:
    """The router a ``[routing]`` table describes, or None when the table is empty.

    ``routing.connector`` (default ``kafka``) names the Kafka connector in
    ``connectors``; the gateway then puts the router in that connector's place
    so sends to its destinations are routed and subscriptions still reach Kafka.
    Raises ConfigError.
    """
    if not (raw.model_fields_set if isinstance(raw, RoutingSection) else raw):
        return None
    config = parse_routing_config(raw, path)
    connector = connectors.get(config.connector)
    if not ITopicLog.providedBy(connector):
        raise ConfigError(
            f"routing needs a Kafka connector named {config.connector!r} ([connectors.{config.connector}] "
            "with uri = 'kafka://host:9092')",
            path=path,
            key="routing.connector",
        )
    return KafkaRouter(config, connector, origin=origin, clock=clock, registry=registry, name=config.connector)
