"""The ``jms`` connector: any JMS 1.1 / 2.0 / 3.0 provider through the JMS API, in-process (JPype).

Configured with ``type = "jms"`` (options: :mod:`gateway.connectors.jms_settings`):
the provider's client jars, and its ``ConnectionFactory`` from a class and bean
setters or from JNDI.  Nothing here names a provider: only ``javax.jms`` /
``jakarta.jms`` and ``javax.naming``.

Threads: JMS sessions are single-threaded, so each gets a Java-attached Python
thread of its own and no JMS call runs on the reactor thread:

* a *control* thread opens the connection (starting the JVM the first time),
  looks up JNDI names and deletes durable subscriptions;
* the *producer* thread owns one transacted session: it takes every send queued
  (up to ``max_burst`` messages), sends them and commits once, then reports each
  outcome to the reactor (``callFromThread``): a RECEIPT means the provider
  committed the message.  ``send_batch`` is one item, so its messages commit
  together or not at all;
* each subscription has a consumer thread and session
  (:mod:`gateway.connectors.jms_subscription`).
* the in-doubt probe of a bridge (:meth:`JmsConnector.held_message_ids`) browses a
  queue on a thread and session of its own (:mod:`gateway.connectors.jms_browse`).

Failures: the connection's ``ExceptionListener`` or any failed JMS call marks
the connection down (health DOWN, ``jmsgateway_jms_broker_up`` 0, a log line
naming the provider URL); it is opened again every ``failure_retry_interval``
ms up to ``max_retries`` (-1: forever), then subscriptions are made again.
Sends made meanwhile wait (at most ``send_timeout`` ms, at most
``max_waiting_sends`` of them) and fail with ``ConnectorUnavailable``
after that; a send whose commit failed is in doubt and fails at once.  While
more than ``max_pending_sends`` messages wait for the producer thread the
connector's :class:`~gateway.flow.Congestion` pauses the STOMP clients sending.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet import defer
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.broker.scheduler import is_scheduled
from gateway.connectors.jms_browse import BrowseThread, browse_duplicate_ids
from gateway.connectors.jms_delivery_delay import DeliveryDelay, check_schedule
from gateway.connectors.jms_link import Link, jndi_destination
from gateway.connectors.jms_mapping import to_jms
from gateway.connectors.jms_provider import (
    SESSION_TRANSACTED,
    JavaThread,
    JmsApi,
    connection_factory,
    java_error,
    jms_api,
    register_classpath,
)
from gateway.connectors.jms_settings import JmsConnectorOptions, JmsSettings
from gateway.connectors.jms_subscription import JmsSubscription
from gateway.connectors.stomp_settings import StompBrokerMetrics
from gateway.connectors.stomp_subscription import durable_subscription_name
from gateway.errors import (
    ConfigError,
    ConnectorError,
    ConnectorUnavailable,
    DestinationError,
    MessageRefused,
)
from gateway.flow import Congestion
from gateway.interfaces import (
    ACK_MODES,
    Capability,
    Health,
    IConnector,
    IConsumer,
    ICredentialed,
    IFlowControlled,
    IHeldMessages,
    ILocalTransactionSource,
    IPostingConnector,
    IStatusReporting,
    ISubscription,
    SubscriptionSpec,
)
from gateway.message.model import Message

Settled = Callable[[Exception | None, Any], None]

BROWSE_LIMIT = 100_000
"""At most this many messages are browsed to tell which ones a queue holds (the in-doubt probe)."""


class _Send:
    """Messages sent together (one, or a ``send_batch``) and who waits for the outcome."""

    __slots__ = ("abandoned", "atomic", "deadline", "messages", "settled")

    def __init__(self, messages: list[Message], atomic: bool, settled: Settled, deadline: float) -> None:
        self.messages = messages
        self.atomic = atomic
        self.settled = settled
        self.deadline = deadline
        self.abandoned = False
        """Settled by the watchdog (in doubt) while the producer thread's call still hangs."""


OK, REFUSED, RETRY, DOUBT = "ok", "refused", "retry", "doubt"


def _durable_key(spec: SubscriptionSpec) -> tuple[str, str] | None:
    if spec.durable_name and spec.destination.startswith("/topic/"):
        return (spec.client_id or "", spec.durable_name)
    return None


class ProducerThread(JavaThread):
    """The connector's sending session: bursts of sends, one commit each."""

    log = Logger()

    def __init__(self, connector: JmsConnector) -> None:
        super().__init__(f"jms-{connector.name}-producer")
        self.connector = connector
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.link: Link | None = None
        self.session: Any = None
        self.producer: Any = None
        self.delays: DeliveryDelay | None = None
        """How :attr:`producer` sends scheduled messages (:mod:`gateway.connectors.jms_delivery_delay`)."""
        self._held: Any = None
        self.current: list[_Send] | None = None
        """The burst in the provider's hands (its send and commit calls), for the watchdog."""
        self.started = 0.0
        """When the provider got :attr:`current` (reactor seconds)."""
        self.abandoned = False
        """The watchdog gave this thread up (its call hung): it ends once the call returns."""

    def run(self) -> None:
        jpype = self.connector.jpype()
        self.attach(jpype)
        max_burst = self.connector.settings.max_burst
        try:
            while not self.abandoned:
                item = self._held if self._held is not None else self.items.get()
                self._held = None
                if item is None:
                    break
                if isinstance(item, tuple):  # (link or None, Deferred): a new session
                    self._reset(*item)
                    continue
                burst = [item]
                count = len(item.messages)
                while count < max_burst:
                    try:
                        following = self.items.get_nowait()
                    except queue.Empty:
                        break
                    if following is None or isinstance(following, tuple):
                        self._held = following
                        break
                    burst.append(following)
                    count += len(following.messages)
                link = self.link
                self.started = self.connector.reactor.seconds()
                self.current = burst
                try:
                    results, trouble = self._send(burst)
                finally:
                    self.current = None
                self.connector.reactor.callFromThread(self.connector._burst_done, link, results, trouble)
        finally:
            self._close()
            self.detach(jpype)

    def _reset(self, link: Link | None, done: Deferred[None] | None) -> None:
        self._close()
        self.link = link
        reactor = self.connector.reactor
        if link is None:
            if done is not None:
                reactor.callFromThread(done.callback, None)
            return
        try:
            self.session = link.connection.createSession(True, SESSION_TRANSACTED)
            self.producer = self.session.createProducer(None)
            self.delays = DeliveryDelay(self.producer, link.api)
        except Exception as error:
            self.session = self.producer = None
            if done is not None:
                reactor.callFromThread(done.errback, Failure(ConnectorUnavailable(java_error(error))))
            return
        if done is not None:
            reactor.callFromThread(done.callback, None)

    def _close(self) -> None:
        session, self.session, self.producer, self.delays = self.session, None, None, None
        if session is not None:
            with contextlib.suppress(Exception):  # gone already
                session.close()

    def _send(self, burst: list[_Send]) -> tuple[list[tuple[_Send, str, str]], str | None]:
        """Send and commit ``burst``; ``(outcome per item, connection trouble or None)``."""
        session, link = self.session, self.link
        if session is None or link is None:
            return [(item, RETRY, "not connected") for item in burst], None
        api = link.api
        try:
            for item in burst:
                for message in item.messages:
                    self._send_one(message, session, link)
        except (ConnectorError, DestinationError, api.InvalidDestinationException, api.MessageFormatException,
                api.jpype.JClass("java.lang.RuntimeException")) as error:
            if not self._rollback(session):
                return [(item, RETRY, java_error(error)) for item in burst], java_error(error)
            if len(burst) == 1:
                return [(burst[0], REFUSED, java_error(error))], None
            results: list[tuple[_Send, str, str]] = []
            for item in burst:  # find the one refused: each on its own
                outcome, trouble = self._send([item])
                results.extend(outcome)
                if trouble is not None:
                    return results + [(rest, RETRY, trouble) for rest in burst[len(results):]], trouble
            return results, None
        except Exception as error:  # the session or connection failed: nothing was committed
            self._rollback(session)
            return [(item, RETRY, java_error(error)) for item in burst], java_error(error)
        try:
            session.commit()
        except Exception as error:
            reason = java_error(error)
            rolled_back = "TransactionRolledBack" in reason
            return [(item, RETRY if rolled_back else DOUBT, reason) for item in burst], reason
        return [(item, OK, "") for item in burst], None

    def _send_one(self, message: Message, session: Any, link: Link) -> None:
        def destination_of(name: str) -> Any:
            return link.destination(session, name)

        destination = destination_of(message.destination)
        delays = self.delays
        if delays is None or not is_scheduled(message):
            jms, mode, priority, ttl = to_jms(message, session, link.api, destination_of)
            self.producer.send(destination, jms, mode, priority, ttl)
            return
        outgoing, delay = delays.outgoing(message)  # (JMS 2.0: the delay as the producer's delivery delay)
        if outgoing is not message:
            jms, mode, priority, ttl = to_jms(outgoing, session, link.api, destination_of)
            if delays.send(destination, jms, mode, priority, ttl, delay, outgoing):
                return
        jms, mode, priority, ttl = to_jms(message, session, link.api, destination_of)
        delays.type_properties(message, jms)
        self.producer.send(destination, jms, mode, priority, ttl)

    @staticmethod
    def _rollback(session: Any) -> bool:
        try:
            session.rollback()
            return True
        except Exception:
            return False


class ControlThread(JavaThread):
    """Runs the connector's one-off JMS calls (connect, JNDI, durable removal) in order."""

    def __init__(self, connector: JmsConnector) -> None:
        super().__init__(f"jms-{connector.name}-control")
        self.connector = connector
        self.calls: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def call(self, function: Callable[..., Any], *args: Any) -> Deferred[Any]:
        done: Deferred[Any] = Deferred()
        self.calls.put((function, args, done))
        return done

    def run(self) -> None:
        jpype = self.connector.jpype()
        self.attach(jpype)
        reactor = self.connector.reactor
        while True:
            entry = self.calls.get()
            if entry is None:
                break
            function, args, done = entry
            try:
                result = function(*args)
            except BaseException as error:
                reactor.callFromThread(done.errback, Failure(error if isinstance(error, Exception)
                                                             else ConnectorError(str(error))))
            else:
                reactor.callFromThread(done.callback, result)
        self.detach(jpype)


@implementer(IPostingConnector, IFlowControlled, IStatusReporting, ILocalTransactionSource, ICredentialed,
             IHeldMessages)
class JmsConnector:
    """:class:`~gateway.interfaces.IConnector` for a JMS provider through the JMS API.

    :param name: the connector's configured name.
    :param settings: checked options (:meth:`JmsSettings.from_config`).
    :param reactor: the reactor (threads report through ``callFromThread``; the clock).
    :param registry: the Prometheus registry of the connector metrics.
    """

    log = Logger()
    capabilities = frozenset(Capability) - {
        Capability.EXCLUSIVE_CONSUMERS, Capability.BROWSE, Capability.COMPOSITE_DESTINATIONS,
        Capability.WILDCARD_SUBSCRIPTIONS}
    """NACK (a rollback: redelivered), prefetch, selectors, durable subscriptions, transactions,
    health following the provider, reconnection, redelivery flagged after close (a copy returned
    to a queue carries the mark, :mod:`gateway.connectors.jms_subscription`), held message ids
    (a QueueBrowser, :mod:`gateway.connectors.jms_browse`; a topic answers None)."""

    def __init__(self, name: str, settings: JmsSettings, *, reactor: Any,
                 registry: CollectorRegistry | None = None) -> None:
        self.name = name
        self.settings = settings
        self.reactor = reactor
        self.metrics = StompBrokerMetrics.for_registry(registry)
        self.state = "stopped"
        self.last_error = ""
        self.failed_attempts = 0
        self.generation = 0
        self.link: Link | None = None
        self.congestion = Congestion(f"connector {name}")
        self._api: JmsApi | None = None
        self._control: ControlThread | None = None
        self._producer: ProducerThread | None = None
        self._waiting: list[_Send] = []
        self._pending = 0
        self._subscriptions: list[JmsSubscription] = []
        self._closing: dict[tuple[str, str], Deferred[None]] = {}
        self._first: Deferred[None] | None = None
        self._link_waiters: list[Deferred[Link]] = []
        self._jndi_context: Any = None
        """The last JNDI context (control thread only): names are checked with it while the connection is down."""
        self._retry: Any = None
        self._sweep: LoopingCall | None = None
        self._sent_ok = self.metrics.sends.labels(name, "ok")
        self._sent_failed = self.metrics.sends.labels(name, "failed")
        self.metrics.up.labels(name).set(0)
        register_classpath(settings)

    @classmethod
    def from_config(cls, name: str, options: dict[str, Any] | JmsConnectorOptions, *, reactor: Any,
                    gateway_id: str = "jmsgateway", registry: Any = None, path: str = "") -> JmsConnector:
        """Build the connector ``[connectors.<name>]`` describes (no JVM is started here)."""
        base_dir = os.path.dirname(os.path.abspath(path)) if path else ""
        settings = JmsSettings.from_config(name, options, gateway_id=gateway_id, base_dir=base_dir, path=path)
        return cls(name, settings, reactor=reactor, registry=registry)

    def with_credentials(self, user: str, password: str | None) -> JmsConnector:
        """:class:`ICredentialed`: the same provider, logging in as ``user`` (own client id)."""
        settings = dataclasses.replace(self.settings, user=user, password=password,
                                       client_id=f"{self.settings.client_id}-{user}")
        return JmsConnector(self.name, settings, reactor=self.reactor, registry=None)

    def jpype(self) -> Any:
        """The jpype module (the JVM runs once :meth:`start` was called)."""
        assert self._api is not None
        return self._api.jpype

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Open the connection.  Fires once connected, or after a first failed attempt when
        retries are allowed (sends then wait); fails with ConfigError for a configuration the
        provider refuses (unknown class, unresolved JNDI name) or without Java/JPype."""
        if self.state not in ("stopped", "failed"):
            return succeed(None)
        try:
            # Once per process, on the reactor thread: a start-up cost, not a JMS call.
            self._api = jms_api(self.settings)
        except ConfigError as error:
            self.state = "failed"
            self.last_error = error.problem
            return fail(error)
        self.state = "connecting"
        self.failed_attempts = 0
        self._control = ControlThread(self)
        self._control.start()
        self._producer = ProducerThread(self)
        self._sweep = LoopingCall(self._watch_sends)
        self._sweep.clock = self.reactor
        self._sweep.start(min(1.0, self.settings.send_timeout / 10000.0), now=False)
        first: Deferred[None] = Deferred()
        self._first = first
        self._connect()
        return first

    def stop(self) -> Deferred[None]:
        """Close every session and the connection; waiting sends fail."""
        if self.state == "stopped":
            return succeed(None)
        self.state = "stopped"
        self._cancel_retry()
        if self._sweep is not None and self._sweep.running:
            self._sweep.stop()
        self._fail_waiting(ConnectorUnavailable(f"connector {self.name} stopped"))
        self._release_link_waiters(ConnectorUnavailable(f"connector {self.name} stopped"))
        closing = [subscription.close() for subscription in list(self._subscriptions)]
        self._subscriptions.clear()
        link, self.link = self.link, None
        self.metrics.up.labels(self.name).set(0)
        self.congestion.resumeProducing()
        producer, control = self._producer, self._control
        self._producer = self._control = None
        if producer is not None and producer.is_alive():
            producer.items.put(None)
        done: Deferred[Any] = defer.DeferredList(closing, consumeErrors=True)
        if control is not None:
            done.addCallback(lambda _: control.call(self._close_connection, link))
            done.addErrback(lambda _: None)
            done.addCallback(lambda _: control.calls.put(None))
        self._first_done(ConnectorUnavailable(f"connector {self.name} stopped"))
        return done.addCallback(lambda _: None)

    def health(self) -> Health:
        if self.state == "connected":
            return Health(True, f"connected to {self.settings.provider}")
        reason = f": {self.last_error}" if self.last_error else ""
        return Health(False, f"{self.state}, not connected to {self.settings.provider}{reason}")

    def status(self) -> dict[str, Any]:
        return {
            "connector": self.name,
            "type": "jms",
            "provider": self.settings.provider,
            "api": self.settings.api,
            "state": self.state,
            "failed_attempts": self.failed_attempts,
            "last_error": self.last_error,
            "subscriptions": len(self._subscriptions),
            "waiting_sends": len(self._waiting),
            "pending_sends": self._pending,
        }

    # -- the connection ----------------------------------------------------------

    def _connect(self) -> None:
        assert self._control is not None
        self.generation += 1
        generation = self.generation
        self._control.call(self._open_connection, generation).addCallbacks(
            self._opened, self._open_failed, errbackArgs=(generation,))

    def _open_connection(self, generation: int) -> Link:
        """(control thread) The JVM, the factory, a started connection with its ExceptionListener."""
        settings = self.settings
        api = self._api
        assert api is not None
        factory, context = connection_factory(settings, api)
        self._jndi_context = context
        try:
            if settings.user is not None:
                connection = factory.createConnection(settings.user, settings.password)
            else:
                connection = factory.createConnection()
        except Exception as error:
            raise ConnectorUnavailable(java_error(error)) from None
        link = Link(connection, context, api, settings, generation)
        try:
            if settings.client_id:
                connection.setClientID(settings.client_id)
            reactor = self.reactor

            def on_exception(error: Any) -> None:
                reactor.callFromThread(self.lost, link, java_error(error))

            listener = api.jpype.JProxy(api.ExceptionListener, dict={"onException": on_exception})
            connection.setExceptionListener(listener)
            connection.start()
        except Exception as error:
            self._close_connection(link)
            raise ConnectorUnavailable(java_error(error)) from None
        return link

    def _close_connection(self, link: Link | None) -> None:
        if link is None:
            return
        with contextlib.suppress(Exception):  # gone already
            link.connection.close()

    def _opened(self, link: Link) -> Deferred[None] | None:
        if self.state == "stopped" or link.generation != self.generation:
            threading.Thread(target=self._close_connection, args=(link,), daemon=True).start()
            return None
        self.link = link
        producer = self._producer
        assert producer is not None
        if not producer.is_alive():
            producer.start()
        made: Deferred[None] = Deferred()
        producer.items.put((link, made))
        restoring = [made] + [self._restore(subscription, link) for subscription in list(self._subscriptions)]
        done = defer.gatherResults(restoring, consumeErrors=True)

        def ready(_: object) -> None:
            if self.link is not link:
                return
            self.state = "connected"
            self.failed_attempts = 0
            self.last_error = ""
            self.metrics.up.labels(self.name).set(1)
            self.metrics.connects.labels(self.name).inc()
            self.log.info("connector {name}: connected to {provider} through the {api}.jms API; {count} "
                          "subscriptions restored", name=self.name, provider=self.settings.provider,
                          api=self.settings.api, count=len(self._subscriptions))
            self._first_done(None)
            self._dispatch_waiting()
            self._release_link_waiters(None)

        def not_ready(failure: Failure) -> None:
            error = failure.value
            if isinstance(error, defer.FirstError):
                error = error.subFailure.value
            self.lost(link, str(error))

        done.addCallbacks(ready, not_ready)
        return None

    def _restore(self, subscription: JmsSubscription, link: Link) -> Deferred[None]:
        """Make ``subscription`` again on ``link``; one the provider now refuses (its selector, its
        durable name in use) ends alone, without taking the connection down."""
        def refused(failure: Failure) -> None:
            if failure.check(ConnectorUnavailable):
                failure.raiseException()
            self.log.warn("connector {name}: cannot restore the subscription to {destination}: {error}",
                          name=self.name, destination=subscription.spec.destination, error=failure.getErrorMessage())
            self.forget(subscription)
            error = failure.value
            subscription.fail(error if isinstance(error, Exception) else ConnectorError(str(error)))
            return None

        return subscription.establish(link).addErrback(refused)

    def _open_failed(self, failure: Failure, generation: int) -> None:
        if self.state == "stopped" or generation != self.generation:
            return
        error = failure.value
        if isinstance(error, ConfigError):
            self.state = "failed"
            self.last_error = error.problem
            if self._first is None:  # at start-up the caller says it (once)
                self.log.error("connector {name}: {error}", name=self.name, error=str(error))
            self._give_up(error)
            return
        self.last_error = str(error) if isinstance(error, ConnectorError) else failure.getErrorMessage()
        self.metrics.connect_failures.labels(self.name).inc()
        self.log.warn("connector {name}: cannot connect to {provider}: {error}", name=self.name,
                      provider=self.settings.provider, error=self.last_error)
        self._schedule_retry()

    def lost(self, link: Link | None, reason: str) -> None:
        """The connection ``link`` failed (its ExceptionListener, or a failed JMS call); also
        :class:`~gateway.connectors.jms_subscription.SubscriptionOwner`."""
        if link is None or link is not self.link or self.state == "stopped":
            return
        self.link = None
        self.last_error = reason
        self.metrics.up.labels(self.name).set(0)
        self.congestion.resumeProducing()
        self.state = "retrying"
        self.log.warn("connector {name}: lost connection to {provider}: {error}", name=self.name,
                      provider=self.settings.provider, error=reason)
        for subscription in self._subscriptions:
            subscription.connection_lost()
        if self._producer is not None and self._producer.is_alive():
            self._producer.items.put((None, None))
        threading.Thread(target=self._close_connection, args=(link,), daemon=True).start()
        self._schedule_retry()

    def _schedule_retry(self) -> None:
        self.failed_attempts += 1
        limit = self.settings.max_retries
        if limit >= 0 and self.failed_attempts > limit:
            error = ConnectorUnavailable(f"connectors.{self.name}: provider {self.settings.provider} unreachable, "
                                         f"gave up after {limit} retries ({self.settings.key('max_retries')} = "
                                         f"{limit}): {self.last_error}")
            self.state = "failed"
            if self._first is None:  # at start-up the caller says it (once, naming the connector)
                self.log.error("connector {name}: giving up on {provider} after {retries} retries ({error})",
                               name=self.name, provider=self.settings.provider, retries=limit,
                               error=self.last_error)
            self._give_up(error)
            return
        self.state = "retrying"
        delay = self.settings.failure_retry_interval / 1000.0
        self.log.info("connector {name}: reconnecting to {provider} in {delay}s (attempt {attempt}{limit})",
                      name=self.name, provider=self.settings.provider, delay=delay, attempt=self.failed_attempts,
                      limit="" if limit < 0 else f" of {limit}")
        if self.failed_attempts == 1:
            self._first_done(None)  # started: sends wait for the provider
        self._cancel_retry()
        self._retry = self.reactor.callLater(delay, self._connect)

    def _cancel_retry(self) -> None:
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self._retry = None

    def _give_up(self, error: Exception) -> None:
        self._first_done(error)
        self._release_link_waiters(error)
        self._fail_waiting(error)
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            subscription.fail(error)
        if self._producer is not None and self._producer.is_alive():
            self._producer.items.put(None)
        self._producer = ProducerThread(self)
        if self._sweep is not None and self._sweep.running:
            self._sweep.stop()
        if self._control is not None:
            self._control.calls.put(None)
            self._control = None

    def _first_done(self, error: Exception | None) -> None:
        first, self._first = self._first, None
        if first is None:
            return
        if error is None or (self.settings.max_retries != 0 and not isinstance(error, ConfigError)
                             and self.state != "stopped"):
            first.callback(None)
        else:
            first.errback(error)

    # -- sending -----------------------------------------------------------------

    def send(self, message: Message) -> Deferred[None]:
        """Fires once the provider committed the message (the producer session's transaction)."""
        done: Deferred[None] = Deferred()
        self._submit([message], False, lambda error, _: done.errback(error) if error else done.callback(None))
        return done

    def post(self, message: Message, settled: Settled, confirm: bool = True) -> None:
        """:class:`IPostingConnector`: :meth:`send` reporting through ``settled``."""
        self._submit([message], False, settled)

    def send_batch(self, messages: list[Message]) -> Deferred[None]:
        """All of ``messages`` in one transaction of the provider: visible together or not at all."""
        if not messages:
            return succeed(None)
        done: Deferred[None] = Deferred()
        self._submit(list(messages), True, lambda error, _: done.errback(error) if error else done.callback(None))
        return done

    def _submit(self, messages: list[Message], atomic: bool, settled: Settled) -> None:
        try:
            for message in messages:
                check_schedule(message)  # (a bad AMQ_SCHEDULED_* number: refused before anything is sent)
        except MessageRefused as error:
            self._sent_failed.inc(len(messages))
            settled(error, None)
            return
        item = _Send(messages, atomic, settled, self.reactor.seconds() + self.settings.send_timeout / 1000.0)
        if self.link is not None and self._producer is not None:
            self._queue(item)
            return
        if self.state in ("stopped", "failed"):
            self._sent_failed.inc(len(messages))
            settled(ConnectorUnavailable(f"connector {self.name} is {self.state}: {self.last_error}".rstrip(": ")),
                    None)
            return
        if len(self._waiting) >= self.settings.max_waiting_sends:
            self._sent_failed.inc(len(messages))
            settled(ConnectorUnavailable(f"provider {self.settings.provider} is away and {len(self._waiting)} "
                                         "sends already wait for it"), None)
            return
        self._waiting.append(item)
        self.metrics.waiting.labels(self.name).set(len(self._waiting))

    def _queue(self, item: _Send) -> None:
        assert self._producer is not None
        self._pending += len(item.messages)
        self._producer.items.put(item)
        if self._pending > self.settings.max_pending_sends:
            self.congestion.pauseProducing()

    def _burst_done(self, link: Link | None, results: list[tuple[_Send, str, str]], trouble: str | None) -> None:
        for item, outcome, reason in results:
            if item.abandoned:  # the watchdog settled it (in doubt) while this call hung
                continue
            count = len(item.messages)
            self._pending -= count
            if outcome == OK:
                self._sent_ok.inc(count)
                item.settled(None, None)
            elif outcome == REFUSED:
                self._sent_failed.inc(count)
                item.settled(MessageRefused(f"{self.settings.provider} refused message "
                                            f"{item.messages[0].message_id}: {reason}"), None)
            elif outcome == RETRY and self.state not in ("stopped", "failed") \
                    and item.deadline > self.reactor.seconds():
                if self.link is not None and self.link is not link and trouble is None:
                    self._queue(item)
                else:
                    self._waiting.append(item)
            else:
                self._sent_failed.inc(count)
                what = "in doubt (the commit failed)" if outcome == DOUBT else "not sent"
                item.settled(ConnectorUnavailable(f"send to {self.settings.provider} {what}: {reason}"), None)
        self.metrics.waiting.labels(self.name).set(len(self._waiting))
        if self._pending <= self.settings.max_pending_sends // 2:
            self.congestion.resumeProducing()
        if trouble is not None:
            self.lost(link, trouble)
        elif self.link is not None and self._waiting:
            self._dispatch_waiting()

    def _dispatch_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        self.metrics.waiting.labels(self.name).set(0)
        for item in waiting:
            self._queue(item)

    def _watch_sends(self) -> None:
        """The sweep: expire the sends waiting for the provider, and watch the producer's call."""
        self._expire_waiting()
        producer = self._producer
        burst = producer.current if producer is not None else None
        if producer is None or not burst:
            return
        now = self.reactor.seconds()
        timeout = self.settings.send_timeout / 1000.0
        # the call hangs past send_timeout, or past a send's deadline (after a second at least:
        # a send that waited in the queue does not condemn a call that just began)
        overdue = min(item.deadline for item in burst)
        if now - producer.started >= timeout or (now >= overdue and now - producer.started >= min(1.0, timeout)):
            self._abandon_producer(producer, burst, now - producer.started)

    def _abandon_producer(self, producer: ProducerThread, burst: list[_Send], hung: float) -> None:
        """The watchdog: the provider has not answered a send or commit within ``send_timeout``
        (a stalled network path that its client does not notice).  The sends of that call are
        in doubt and fail now; those queued behind it wait for a new session; the thread is
        left to its call (it ends when the call returns) and the connection is rebuilt."""
        producer.abandoned = True
        fresh = self._producer = ProducerThread(self)
        while True:  # queued behind the hung call: never sent
            try:
                queued = producer.items.get_nowait()
            except queue.Empty:
                break
            if isinstance(queued, _Send):
                self._pending -= len(queued.messages)
                self._waiting.append(queued)
            elif isinstance(queued, tuple):  # a session for a newer connection: the fresh thread makes it
                fresh.items.put(queued)
        producer.items.put(None)
        self.metrics.waiting.labels(self.name).set(len(self._waiting))
        timeout = self.settings.send_timeout / 1000.0
        reason = (f"no answer from {self.settings.provider} within {timeout}s to a send or commit "
                  f"(hung {hung:.1f}s); session abandoned")
        self.log.warn("connector {name}: {reason}: {count} send(s) in doubt, reconnecting", name=self.name,
                      reason=reason, count=len(burst))
        for item in burst:
            if item.abandoned:
                continue
            item.abandoned = True
            self._pending -= len(item.messages)
            self._sent_failed.inc(len(item.messages))
            item.settled(ConnectorUnavailable(f"send to {self.settings.provider} in doubt: {reason}"), None)
        if self._pending <= self.settings.max_pending_sends // 2:
            self.congestion.resumeProducing()
        if producer.link is not None and producer.link is self.link:
            self.lost(producer.link, reason)  # the fresh thread starts with the next connection
        elif self.link is not None:  # the call hung on an older connection: go on with the current one
            if fresh.items.empty():
                fresh.items.put((self.link, None))
            fresh.start()
            self._dispatch_waiting()

    def _expire_waiting(self) -> None:
        now = self.reactor.seconds()
        expired = [item for item in self._waiting if item.deadline <= now]
        if not expired:
            return
        self._waiting = [item for item in self._waiting if item.deadline > now]
        self.metrics.waiting.labels(self.name).set(len(self._waiting))
        timeout = self.settings.send_timeout / 1000.0
        for item in expired:
            self._sent_failed.inc(len(item.messages))
            item.settled(ConnectorUnavailable(f"no confirmation from {self.settings.provider} within {timeout}s "
                                              f"({self.state}: {self.last_error})"), None)

    def _fail_waiting(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, []
        self.metrics.waiting.labels(self.name).set(0)
        for item in waiting:
            self._sent_failed.inc(len(item.messages))
            item.settled(error, None)

    # -- subscriptions -----------------------------------------------------------

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[ISubscription]:
        """A consumer thread and session for ``spec``; fires once the consumer exists."""
        return self._subscribe(spec, consumer, None)

    def subscribe_transacted(self, spec: SubscriptionSpec, consumer: IConsumer,
                             max_batch_time: int) -> Deferred[ISubscription]:
        """:class:`ILocalTransactionSource`: batches of ``spec.prefetch``, forwarded in one transaction."""
        return self._subscribe(spec, consumer, max_batch_time)

    def _subscribe(self, spec: SubscriptionSpec, consumer: IConsumer,
                   batch_time: int | None) -> Deferred[ISubscription]:
        if spec.ack_mode not in ACK_MODES:
            return fail(ConnectorError(f"unknown ack mode {spec.ack_mode!r}"))
        if self.state in ("stopped", "failed"):
            return fail(ConnectorUnavailable(f"connector {self.name} is {self.state}"))
        subscription = JmsSubscription(self, spec, consumer, batch_time=batch_time)
        self._subscriptions.append(subscription)
        key = _durable_key(spec)
        closing = self._closing.get(key) if key is not None else None
        previous: Deferred[Any] = succeed(None)
        if closing is not None:  # the same durable subscription is still being closed: after it
            previous = Deferred()
            closing.addBoth(lambda _: previous.callback(None))

        def refused(failure: Failure) -> Failure:
            self.forget(subscription)
            subscription._stop_thread()
            return failure

        def establish(_: object) -> Any:
            link = self.link
            if subscription.closed:
                return None
            if link is None:  # made when the connection is back; refused now if it never can be
                return self._check_resolvable(spec.destination)
            return subscription.establish(link)

        return previous.addCallback(establish).addCallbacks(lambda _: subscription, refused)

    def _check_resolvable(self, destination: str) -> Deferred[None]:
        """While the connection is down: DestinationError if JNDI binds nothing to ``destination``
        (``destinations = "jndi"``), so that SUBSCRIBE is refused rather than receipted."""
        control = self._control
        if self.settings.destinations != "jndi" or control is None:
            return succeed(None)
        return control.call(self._resolve_jndi, destination)

    def _resolve_jndi(self, destination: str) -> None:
        """(control thread) Look ``destination`` up in the last JNDI context (made now if none);
        a JNDI provider that cannot be asked lets it pass (the restore refuses it later)."""
        api = self._api
        assert api is not None
        kind, _, physical = destination[1:].partition("/")
        if kind not in ("queue", "topic") or not physical:
            raise DestinationError(f"{destination!r}: the jms connector takes /queue/NAME and /topic/NAME "
                                   "destinations")
        try:
            if self._jndi_context is None:
                self._jndi_context = connection_factory(self.settings, api)[1]
            jndi_destination(self._jndi_context, destination, self.settings, api)
        except (ConnectorError, ConfigError) as error:
            self.log.info("connector {name}: cannot look {destination} up while away: {error}", name=self.name,
                          destination=destination, error=error)

    def closing_durable(self, subscription: JmsSubscription, closing: Deferred[None]) -> None:
        """:class:`~gateway.connectors.jms_subscription.SubscriptionOwner`: a new subscription to the same durable
        name waits for ``closing``."""
        key = _durable_key(subscription.spec)
        if key is None:
            return
        self._closing[key] = closing

        def closed(result: object) -> object:
            if self._closing.get(key) is closing:
                del self._closing[key]
            return result

        closing.addBoth(closed)

    def forget(self, subscription: JmsSubscription) -> None:
        """:class:`~gateway.connectors.jms_subscription.SubscriptionOwner`: ``subscription`` is closed; it is not
        restored after a reconnection."""
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        """Delete an inactive durable subscription (and its backlog) at the provider."""
        link, control = self.link, self._control
        if link is None or control is None:
            return fail(ConnectorUnavailable(f"connector {self.name} is not connected"))
        name = durable_subscription_name(client_id, durable_name)

        def remove() -> None:
            session = link.connection.createSession(False, 1)
            try:
                session.unsubscribe(name)
            except Exception as error:
                raise ConnectorError(f"cannot delete durable subscription {name}: {java_error(error)}") from None
            finally:
                session.close()

        return control.call(remove)

    # -- the in-doubt probe ------------------------------------------------------

    def why_cannot_tell(self, destination: str) -> str | None:
        """:class:`IHeldMessages`: a topic answers None at run time (no configuration error)."""
        return None

    def held_message_ids(self, destination: str, tail: int = 0) -> Deferred[set[str] | None]:
        """:class:`IHeldMessages` (``tail`` does not apply): the bridge copy ids
        (:data:`~gateway.connectors.stomp_browse.DUPLICATE_ID`) of the
        messages queued at ``destination``, through a QueueBrowser
        (:mod:`gateway.connectors.jms_browse`); None for a topic, or a queue of more than
        :data:`BROWSE_LIMIT` messages.  Bounded by ``send_timeout``, the wait for a
        reconnection included; ConnectorUnavailable after that."""
        if not destination.startswith("/queue/"):
            return succeed(None)
        result: Deferred[set[str] | None] = Deferred()
        timeout = self.settings.send_timeout / 1000.0

        def expire() -> None:
            if not result.called:
                result.errback(ConnectorUnavailable(f"no answer from {self.settings.provider} within {timeout}s to "
                                                    f"the browse of {destination} ({self.state}: {self.last_error})"))

        timer = self.reactor.callLater(timeout, expire)

        def answer(held: set[str] | None, error: BaseException | None) -> None:
            if timer.active():
                timer.cancel()
            if result.called:
                return
            if error is not None:
                result.errback(Failure(error if isinstance(error, ConnectorError) else
                                       ConnectorError(f"browse of {destination}: {java_error(error)}")))
                return
            if held is None:
                self.log.warn("connector {name}: {destination} holds more than {limit} messages; not browsed to "
                              "the end", name=self.name, destination=destination, limit=BROWSE_LIMIT)
            result.callback(held)

        def browse(link: Link) -> None:
            if result.called:
                return
            BrowseThread(f"jms-{self.name}-browse", self.jpype(),
                         lambda: browse_duplicate_ids(link, destination, limit=BROWSE_LIMIT),
                         lambda held, error: self.reactor.callFromThread(answer, held, error)).start()

        self._when_connected().addCallbacks(browse, lambda failure: answer(None, failure.value))
        return result

    def _when_connected(self) -> Deferred[Link]:
        """Fires with the open connection, now or once it is (re)opened; fails when the
        connector stops or gives up."""
        if self.link is not None and self.state == "connected":
            return succeed(self.link)
        if self.state in ("stopped", "failed"):
            return fail(ConnectorUnavailable(f"connector {self.name} is {self.state}"))
        waiter: Deferred[Link] = Deferred()
        self._link_waiters.append(waiter)
        return waiter

    def _release_link_waiters(self, error: Exception | None) -> None:
        waiters, self._link_waiters = self._link_waiters, []
        for waiter in waiters:
            if error is None and self.link is not None:
                waiter.callback(self.link)
            else:
                waiter.errback(error or ConnectorUnavailable(f"connector {self.name} is not connected"))

    def shares_transactions_with(self, target: IConnector) -> bool:
        """:class:`ILocalTransactionSource`: this connector, or one of the same provider account."""
        if target is self:
            return True
        return isinstance(target, JmsConnector) and target.settings.identity() == self.settings.identity()
