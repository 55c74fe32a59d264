"""The JMS broker connector: ActiveMQ (or any STOMP-speaking JMS broker) over STOMP.

URI form ``stomp://host:61613`` (``stomp+ssl://host:61614`` for TLS).  Options
(``[connectors.NAME]``):

``login`` / ``passcode``
    credentials sent on CONNECT.
``host``
    the virtual host of CONNECT (default: the URI's host).
``client_id``
    the broker connection's client id, which identifies durable topic
    subscriptions (default ``<gateway id>-<connector name>``).  A private
    connection for another login (:meth:`StompBrokerConnector.with_credentials`,
    a bridge side's own ``user``) uses ``<client_id>.<login>``: a broker takes one
    connection per client id, and the name stays the same across restarts, so
    that login's durable subscriptions are found again.
``failure_retry_interval``
    milliseconds between reconnection attempts (default 5000).
``max_retries``
    attempts after a failure before giving up; -1 retries forever (default).
``send_timeout``
    milliseconds a SEND (or SUBSCRIBE) may wait for the broker to be back
    and confirm it (default 30000); after that it fails, it never vanishes.
``connect_timeout``
    milliseconds for TCP connect plus the CONNECT/CONNECTED handshake (10000).
``heartbeat``
    ``[send_ms, expect_ms]`` STOMP heart-beats (default ``[10000, 10000]``).
``max_waiting_sends``
    sends allowed to wait for a reconnection at once (default 10000); more fail at once.
``max_frame_size``
    the largest frame the broker may send (default 33 MiB, above the STOMP listener's 32 MiB).
``max_skipped_message_size``
    a MESSAGE over ``max_frame_size`` and up to this size (default 128 MiB; 0: none) is skipped, not
    read: its body is discarded as it streams in, it is NACKed (ACKed on STOMP 1.0), logged once and
    counted (``jmsgateway_jms_broker_oversized_messages_total``), and the connection goes on; any other
    oversized frame ends the connection (:mod:`gateway.connectors.stomp_client`).
``transformation``
    the SUBSCRIBE ``transformation`` that makes the broker label Map/Object
    messages: ``"auto"`` (default) asks for ``jms-json`` when the broker
    takes it, ``"jms-json"`` (or another) always tries it, ``""`` asks for none
    (every broker accepts that; ActiveMQ then sends Map/Object messages as
    empty texts).  ActiveMQ needs XStream and Jettison on its classpath for a
    transformation: a broker without them closes the connection, without an
    ERROR frame, at such a SUBSCRIBE.  So the connector probes once, at its
    first connection, with a SUBSCRIBE to a temporary topic
    (:data:`PROBE_DESTINATION`) before any subscription of a client is made;
    refused, it logs one warning naming the cause and the fix, says in its
    health that Map and Object messages cannot be told from empty texts,
    reconnects at once and subscribes without the transformation from then on.
``amq_msg_type``
    the broker understands ``amq-msg-type`` (default true: ActiveMQ).
``tls_ca`` / ``tls_cert`` / ``tls_key`` / ``tls_hostname`` (``stomp+ssl`` only)
    PEM file of the CA certificates to trust (default: the system's trust
    store), a client certificate and its key for brokers that ask for one, and
    the name the broker's certificate must carry (default: the URI's host);
    paths are relative to the config file (:mod:`gateway.security.tls`).

Features: sends wait for the broker's RECEIPT (persistent messages are then
durable there) and are pipelined; :meth:`StompBrokerConnector.send_batch` is
one broker transaction; subscriptions map selector, prefetch
(``activemq.prefetchSize``) and durable names (``activemq.subscriptionName``)
onto ActiveMQ's headers and use ``client-individual`` acknowledgement at the
broker whatever the consumer's mode, so nothing is acknowledged before the
gateway handed it on.  A lost connection is retried through
:class:`~twisted.application.internet.ClientService`; subscriptions are
re-established after each reconnection and deliveries of the old connection
come again (marked redelivered).  Settings and metrics:
:mod:`gateway.connectors.stomp_settings`; subscriptions:
:mod:`gateway.connectors.stomp_subscription`; message mapping:
:mod:`gateway.connectors.stomp_mapping`.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.application.internet import ClientService
from twisted.internet import defer
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, wrapClientTLS
from twisted.internet.interfaces import IProtocolFactory, IReactorTime, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.connectors.stomp_browse import browse_duplicate_ids
from gateway.connectors.stomp_client import BrokerError, Settled, StompClientFactory, StompClientProtocol
from gateway.connectors.stomp_mapping import SUBSCRIBE_TRANSFORMATION, forward_parts, send_frame_parts
from gateway.connectors.stomp_settings import StompBrokerMetrics, StompBrokerSettings
from gateway.connectors.stomp_subscription import BrokerDelivery, BrokerSubscription, durable_subscription_name
from gateway.errors import (
    ConfigError,
    ConnectorError,
    ConnectorUnavailable,
    FrameSkipped,
    MessageRefused,
    SelectorError,
)
from gateway.flow import Congestion
from gateway.interfaces import (
    ACK_MODES,
    Capability,
    Health,
    IConsumer,
    ICredentialed,
    IFlowControlled,
    IFrameForwarder,
    IHeldMessages,
    IStatusReporting,
    ISubscription,
    SubscriptionSpec,
)
from gateway.message.model import Message, now_millis
from gateway.wire.codec import Limits

__all__ = [
    "BrokerDelivery",
    "BrokerSubscription",
    "StompBrokerConnector",
    "StompBrokerMetrics",
    "StompBrokerSettings",
    "durable_subscription_name",
]


BROWSE_LIMIT = 100_000
"""At most this many messages are browsed to tell which ones a queue holds (the in-doubt probe)."""

PROBE_DESTINATION = "/temp-topic/jmsgateway.transformation-probe"
"""Where the connector SUBSCRIBEs once with its ``transformation`` to learn whether the broker
takes it (a temporary topic: nothing is created that outlives the connection, nothing arrives)."""

EMPTY_TEXTS = "Map and Object messages cannot be told from empty texts"
"""What a connector that subscribes without a transformation says of Map/Object messages."""

CLIENT_ID_WAITS = (0.1, 0.2, 0.4, 0.8, 1.6)
"""Seconds waited, one after the other, before CONNECTing again when the broker answers that the
connector's client id is still connected. ActiveMQ forgets a connection it closed (the transformation
probe) a moment after the close, so a new connection made at once can meet its own predecessor. After
these ~3 s the refusal is a failed attempt (another process holds the id), logged in full, and the
attempts after it go without these retries until one connects (``client_id_taken``): one CONNECT per
``failure_retry_interval``, not six."""



_SKIPPED_OUTCOMES = {
    "nacked": "NACKed: the broker's redelivery policy decides (ActiveMQ: to its dead letter queue, ActiveMQ.DLQ)",
    "dropped": "dropped (acknowledged: the broker speaks STOMP 1.0, which has no NACK; or an auto-ack subscription)",
    "unacknowledged": "left unacknowledged (STOMP 1.0 client ack: its ACK would acknowledge the messages before it)",
}
"""What the connector's warning says of each outcome of a skipped MESSAGE."""


def broker_limits(max_frame_size: int) -> Limits:
    """The decoder's limits for a broker connection: ``max_frame_size`` (``connectors.NAME.max_frame_size``),
    and twice the STOMP listener's default count and length of headers (a broker adds headers, and may
    escape a value more than the client did)."""
    defaults = Limits()
    return Limits(max_frame_size=max_frame_size, max_headers=2 * defaults.max_headers,
                  max_header_length=2 * defaults.max_header_length)


class _SessionHandle(Protocol):
    """What ClientService holds for one broker session: it learns of the
    session's end through ``connectionLost`` and closes it through the transport."""


@implementer(IStreamClientEndpoint)
class _BrokerSessionEndpoint:
    """Connects = TCP (or TLS) connection + STOMP CONNECT/CONNECTED + restored subscriptions.

    ClientService sees a connection only once all of that succeeded; a refused
    handshake is a failed attempt (and retried), never a half-made connection.
    """

    def __init__(self, connector: StompBrokerConnector, transport: IStreamClientEndpoint) -> None:
        self.connector = connector
        self.transport = transport

    def connect(self, factory: IProtocolFactory) -> Deferred[Any]:
        connector = self.connector
        settings = connector.settings
        made: list[StompClientProtocol] = []
        handed_over: list[Any] = []

        def handshake(protocol: StompClientProtocol) -> Deferred[Any]:
            made.append(protocol)
            connecting = protocol.connect(
                login=settings.login,
                passcode=settings.passcode,
                host=settings.virtual_host,
                heartbeat=settings.heartbeat,
                headers={"client-id": settings.client_id},
            )
            connecting.addTimeout(settings.connect_timeout / 1000.0, connector.clock)
            connecting.addErrback(no_connected)
            return connecting.addCallback(lambda _: probe(protocol))

        def no_connected(failure: Failure) -> Failure:
            # addTimeout's TimeoutError reads "(1.5, 'Deferred')": say what did not come, and the key
            if failure.check(defer.TimeoutError) is None:
                return failure
            return Failure(ConnectorUnavailable(
                f"no CONNECTED within {settings.connect_timeout} ms of the CONNECT "
                f"(connectors.{connector.name}.connect_timeout)"))

        def probe(protocol: StompClientProtocol) -> Deferred[Any]:
            if not connector.must_probe_transformation:
                return restore(protocol)

            def answered(accepted: bool) -> Deferred[Any]:
                if accepted or not protocol.closed:
                    return restore(protocol)
                # the broker closed this connection at the probe: a new one, without the transformation
                return connect_and_handshake()

            return connector.probe_transformation(protocol).addCallback(answered)

        def restore(protocol: StompClientProtocol) -> Deferred[Any]:
            def lost(reason: Failure) -> None:
                connector._lost(protocol, reason)
                if handed_over:
                    handed_over[0].connectionLost(reason)

            protocol.on_lost = lost
            return connector._connected(protocol).addCallback(lambda _: hand_over(protocol))

        def hand_over(protocol: StompClientProtocol) -> Any:
            if protocol.closed:
                raise ConnectorUnavailable(f"connection to {settings.uri} lost while restoring subscriptions")
            transport = protocol.transport
            assert transport is not None
            proxy = factory.buildProtocol(transport.getPeer())
            assert proxy is not None
            proxy.makeConnection(transport)
            handed_over.append(proxy)
            return proxy

        def failed(failure: Failure) -> Failure:
            connector._attempt_failed(failure)
            for protocol in made:
                protocol.abort_connection()
            return failure

        waits = list(CLIENT_ID_WAITS)  # shared by the attempt's connections (the probe's second one too)

        def connect_and_handshake() -> Deferred[Any]:
            attempt: Deferred[Any] = self.transport.connect(connector._factory)
            return attempt.addCallback(handshake).addErrback(client_id_held)

        def client_id_held(failure: Failure) -> Deferred[Any] | Failure:
            if connector.client_id_taken or not _client_id_in_use(failure):
                return failure
            if not waits:
                connector.client_id_taken = True
                connector.log.warn(
                    "connector {name}: another connection holds client id {client_id} on {uri} (still there "
                    "after {waited:g}s of retries: another gateway or client with the same client_id?); "
                    "trying again every {interval:g}s without the quick retries until connected",
                    name=connector.name, client_id=settings.client_id, uri=settings.uri,
                    waited=sum(CLIENT_ID_WAITS), interval=settings.failure_retry_interval / 1000.0,
                )
                return failure
            for protocol in made:
                protocol.abort_connection()
            made.clear()
            delay = waits.pop(0)
            connector.log.info(
                "connector {name}: {uri} still has a connection with client id {client_id} (the one it just "
                "closed, as a rule); connecting again in {delay}s",
                name=connector.name, uri=settings.uri, client_id=settings.client_id, delay=delay,
            )
            return deferLater(connector.clock, delay, connect_and_handshake)

        return connect_and_handshake().addErrback(failed)


@implementer(IFrameForwarder, IFlowControlled, IStatusReporting, ICredentialed, IHeldMessages)
class StompBrokerConnector:
    """:class:`~gateway.interfaces.IConnector` for a JMS broker spoken to over STOMP.

    :param name: the connector's configured name.
    :param settings: checked options (:meth:`StompBrokerSettings.from_config`).
    :param reactor: provides TCP connections and the clock.
    :param endpoint: the endpoint to connect with (default: from the URI).
    :param registry: the Prometheus registry for :class:`StompBrokerMetrics`.
    """

    log = Logger()
    capabilities = frozenset(Capability) - {Capability.NACK, Capability.BROWSE}
    """Everything but a redelivering NACK: ActiveMQ takes a STOMP NACK as a poison
    acknowledgement and dead-letters the message at once (the NACK is relayed as it is).
    :attr:`~gateway.interfaces.Capability.HELD_MESSAGE_IDS` for queues only (browsing)."""

    def __init__(
        self,
        name: str,
        settings: StompBrokerSettings,
        *,
        reactor: Any,
        endpoint: IStreamClientEndpoint | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.reactor = reactor
        self.clock: IReactorTime = reactor
        self.metrics = StompBrokerMetrics.for_registry(registry)
        self.state = "stopped"
        self.last_error = ""
        self.failed_attempts = 0
        self.client_id_taken = False
        """The broker refused the client id past :data:`CLIENT_ID_WAITS` (another process holds it): later
        attempts go without the quick retries until a connection succeeds."""
        self.generation = 0
        self._endpoint = endpoint or self._default_endpoint()
        # The broker's RECEIPTs are timed by one periodic sweep per connection, not a timer per SEND.
        # What a broker sends back is a client's message with the broker's headers added: the limits
        # leave room for them above the STOMP listener's, or that message would end every connection.
        self._factory = StompClientFactory(self.clock, receipt_timeout=settings.send_timeout / 1000.0,
                                           limits=broker_limits(settings.max_frame_size),
                                           max_skipped_size=settings.max_skipped_message_size)
        self._service: ClientService | None = None
        self._protocol: StompClientProtocol | None = None
        self._waiters: list[Deferred[StompClientProtocol]] = []
        self._subscriptions: dict[str, BrokerSubscription] = {}
        self._subscription_ids = itertools.count(1)
        self._transaction_ids = itertools.count(1)
        self.metrics.up.labels(name).set(0)
        # Label lookups cost more than the increments: resolve the per-send counters once.
        self._sent_ok = self.metrics.sends.labels(name, "ok")
        self._sent_failed = self.metrics.sends.labels(name, "failed")
        self.transformation_refused = ""
        """Why SUBSCRIBEs go without the configured ``transformation`` (the broker
        closed the connection at one), or empty."""
        self.send_transformation_refused = ""
        """Why Map and Object messages are refused at once: the broker closed the
        connection at a SEND carrying their ``transformation``, or empty."""
        self._reconnect_at_once = False
        self.transformation_accepted = False
        """Whether the broker took the transformation at the probe (:meth:`probe_transformation`)."""
        self.congestion = Congestion(f"connector {name}")
        """Paused by the broker connection's transport while its write buffer is full
        (the broker reads slower than clients send): senders then wait (:mod:`gateway.flow`)."""

    @classmethod
    def from_config(
        cls,
        name: str,
        options: Any,
        *,
        reactor: Any,
        gateway_id: str = "jmsgateway",
        registry: Any = None,
        path: str = "",
    ) -> StompBrokerConnector:
        """Build the connector ``[connectors.<name>]`` describes."""
        try:
            settings = StompBrokerSettings.from_config(name, options, gateway_id=gateway_id,
                                                       base_dir=os.path.dirname(os.path.abspath(path)) if path else "")
        except ConfigError as error:
            raise ConfigError(error.problem, path=path, key=error.key) from None
        return cls(name, settings, reactor=reactor, registry=registry)

    def with_credentials(self, user: str, password: str | None) -> StompBrokerConnector:
        """:class:`ICredentialed`: a new connector to the same broker, CONNECTing as ``user`` with the
        client id ``<client_id>.<user>`` (ActiveMQ refuses a second connection with a client id in
        use; stable per login, so its durable subscriptions are found again) and its own metrics
        registry (the shared one names this connector already)."""
        update: dict[str, Any] = {"login": user, "client_id": f"{self.settings.client_id}.{user}"}
        if password is not None:
            update["passcode"] = password
        return StompBrokerConnector(self.name, self.settings.model_copy(update=update), reactor=self.reactor,
                                    registry=CollectorRegistry())

    def _default_endpoint(self) -> IStreamClientEndpoint:
        settings = self.settings
        timeout = settings.connect_timeout / 1000.0
        endpoint: IStreamClientEndpoint = TCP4ClientEndpoint(self.reactor, settings.address, settings.port, timeout)
        if settings.tls is not None:
            endpoint = wrapClientTLS(settings.tls.creator, endpoint)
        return endpoint

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Start connecting.  Fires once connected, or after a first failed
        attempt when retries are allowed (sends then wait for the broker);
        fails with ConnectorUnavailable when ``max_retries`` is 0."""
        if self._service is not None:
            return succeed(None)
        self.state = "connecting"
        self.failed_attempts = 0
        self._service = ClientService(
            _BrokerSessionEndpoint(self, self._endpoint),
            Factory.forProtocol(_SessionHandle),
            retryPolicy=self._retry_delay,
            clock=self.clock,
        )
        # Ask before starting: a first attempt may fail synchronously.
        first: Deferred[Any] = self._service.whenConnected(failAfterFailures=1)
        self._service.startService()
        result: Deferred[None] = Deferred()

        def connected(_: object) -> None:
            result.callback(None)

        def not_yet(failure: Failure) -> None:
            if self.settings.max_retries == 0:
                result.errback(ConnectorUnavailable(
                    f"connectors.{self.name}: cannot connect to {self.settings.uri} "
                    f"(connectors.{self.name}.max_retries = 0): {self.last_error}"))
                return
            self.log.warn(
                "connector {name}: broker {uri} not reachable yet ({error}); retrying every {interval}s, "
                "sends wait up to {timeout}s",
                name=self.name,
                uri=self.settings.uri,
                error=self.last_error or failure.getErrorMessage(),
                interval=self.settings.failure_retry_interval / 1000.0,
                timeout=self.settings.send_timeout / 1000.0,
            )
            result.callback(None)

        def outside_transition(outcome: object) -> Deferred[object]:
            # whenConnected fires inside ClientService's state machine, which must
            # not be re-entered (by a caller stopping us at once): go one turn later.
            later: Deferred[object] = Deferred()
            self.clock.callLater(0, later.callback, outcome)
            return later

        first.addBoth(outside_transition)
        first.addCallbacks(connected, not_yet)
        return result

    def stop(self) -> Deferred[None]:
        """Disconnect politely and stop retrying; waiting sends fail."""
        service, self._service = self._service, None
        self.state = "stopped"
        self._fail_waiters(ConnectorUnavailable(f"connector {self.name} stopped"))
        for subscription in list(self._subscriptions.values()):
            subscription.closed = True
        self._subscriptions.clear()
        protocol, self._protocol = self._protocol, None
        self.congestion.resumeProducing()
        self.metrics.up.labels(self.name).set(0)
        if service is None:
            return succeed(None)
        if protocol is not None:
            done = protocol.disconnect(timeout=2.0)
            done.addBoth(lambda _: service.stopService())
            return done.addCallback(lambda _: None)
        return service.stopService()

    def health(self) -> Health:
        """:class:`IStatusReporting`: up while connected to the broker."""
        if self.state == "connected":
            if self.transformation_refused:
                note = f"; {self.transformation_refused}"
            elif not self.subscribe_transformation and self.settings.amq_msg_type:
                note = f"; no transformation asked for: {EMPTY_TEXTS}"
            else:
                note = ""
            return Health(True, f"connected to {self.settings.uri}{note}")
        reason = f": {self.last_error}" if self.last_error else ""
        return Health(False, f"{self.state}, not connected to {self.settings.uri}{reason}")

    def status(self) -> dict[str, Any]:
        """State for logs and the admin page."""
        protocol = self._protocol
        return {
            "connector": self.name,
            "uri": self.settings.uri,
            "state": self.state,
            "failed_attempts": self.failed_attempts,
            "last_error": self.last_error,
            "stomp_version": protocol.version if protocol else None,
            "server": protocol.server if protocol else None,
            "subscriptions": len(self._subscriptions),
            "waiting_sends": len(self._waiters),
            "transformation": self.subscribe_transformation,
            "transformation_refused": self.transformation_refused,
            "send_transformation_refused": self.send_transformation_refused,
        }

    # -- the SUBSCRIBE transformation ----------------------------------------

    @property
    def wanted_transformation(self) -> str:
        """The configured ``transformation``, ``"auto"`` resolved: ``jms-json`` for ActiveMQ
        (``amq_msg_type``), none for another broker."""
        configured = self.settings.transformation
        if configured == "auto":
            return SUBSCRIBE_TRANSFORMATION if self.settings.amq_msg_type else ""
        return configured

    @property
    def subscribe_transformation(self) -> str:
        """The ``transformation`` SUBSCRIBEs carry: the wanted one, unless the broker refused it."""
        return "" if self.transformation_refused else self.wanted_transformation

    @property
    def must_probe_transformation(self) -> bool:
        """Whether the next connection must first learn if the broker takes the transformation."""
        return bool(self.subscribe_transformation) and not self.transformation_accepted

    def probe_transformation(self, protocol: StompClientProtocol) -> Deferred[bool]:
        """SUBSCRIBE to :data:`PROBE_DESTINATION` with the transformation (then UNSUBSCRIBE): True
        if the broker took it; False if it refused it (from now on SUBSCRIBEs go without it).
        Fails only when the connection failed for another reason."""
        transformation = self.subscribe_transformation
        probe_id = f"{self.name}-transformation-probe"
        subscribed = protocol.subscribe(PROBE_DESTINATION, probe_id, lambda frame: None, ack="auto",
                                        headers={"transformation": transformation})

        def accepted(_: object) -> Deferred[bool]:
            self.transformation_accepted = True
            self.log.info("connector {name}: {uri} takes transformation:{transformation} (Map and Object "
                          "messages keep their type)", name=self.name, uri=self.settings.uri,
                          transformation=transformation)
            return protocol.unsubscribe(probe_id).addCallback(lambda _: True)

        def refused(failure: Failure) -> bool | Failure:
            if self.transformation_closed(protocol, transformation, failure, reconnect=False):
                return False
            if failure.check(BrokerError):  # an ERROR frame: this broker does not do it either
                self._refuse_transformation(transformation, f"the broker answered a SUBSCRIBE with "
                                            f"transformation:{transformation} with an ERROR "
                                            f"({failure.getErrorMessage()})")
                return False
            return failure

        return subscribed.addCallbacks(accepted, refused)

    def transformation_closed(self, protocol: StompClientProtocol, transformation: str, failure: Failure, *,
                              reconnect: bool = True) -> bool:
        """Whether ``failure`` of a SUBSCRIBE with ``transformation`` is the broker closing the
        connection without an ERROR frame, which is how an ActiveMQ without XStream/Jettison
        refuses it.  If so, SUBSCRIBEs go without the transformation from now on: one warning
        names the cause and the fix, the connection-lost line and :meth:`health` say it too, and
        the connector reconnects at once (``reconnect``; the probe opens its next connection itself)."""
        if not _closed_without_error(protocol, failure):
            return False
        self._refuse_transformation(
            transformation,
            f"the broker closed the connection at a SUBSCRIBE with transformation:{transformation} "
            "(ActiveMQ does that without the XStream and Jettison jars in its lib directory)",
            closed=True,
        )
        protocol.error = ConnectorUnavailable(
            f"closed by the broker at a SUBSCRIBE with transformation:{transformation} (no XStream/Jettison?)"
        )
        self._reconnect_at_once = reconnect
        return True

    def _refuse_transformation(self, transformation: str, why: str, *, closed: bool = False) -> None:
        """From now on SUBSCRIBEs go without ``transformation``: said once (a warning) and in :meth:`health`."""
        if self.transformation_refused:
            return
        self.transformation_refused = f"{why}; subscribing without it: {EMPTY_TEXTS}"
        how = "closed the connection, without an ERROR frame," if closed else "refused"
        self.log.warn(
            "connector {name}: {uri} {how} at a SUBSCRIBE with transformation:{transformation}: ActiveMQ does "
            "that when XStream and Jettison are not on its classpath. Subscribing without the transformation "
            "from now on: {empty} (they arrive as empty TextMessages). Fix: link xstream.jar and jettison.jar "
            "into the broker's lib directory and restart the gateway, or set transformation = \"\" on "
            "connectors.{name} (docs/jms.md)",
            name=self.name,
            uri=self.settings.uri,
            how=how,
            transformation=transformation,
            empty=EMPTY_TEXTS,
        )

    # -- connection management ----------------------------------------------

    def _retry_delay(self, attempt: int) -> float:
        """ClientService's retry policy: the fixed interval, until max_retries is spent."""
        self.failed_attempts = attempt
        interval = self.settings.failure_retry_interval / 1000.0
        if self._reconnect_at_once:  # the broker refused a transformation: reconnect without it now
            self._reconnect_at_once = False
            interval = 0.0
        max_retries = self.settings.max_retries
        if max_retries >= 0 and attempt > max_retries:
            self.clock.callLater(0, self._give_up, attempt - 1)
            return 3600.0
        if self.state == "stopped":
            return interval
        self.state = "retrying"
        self.log.info(
            "connector {name}: reconnecting to {uri} in {delay}s (attempt {attempt}{limit})",
            name=self.name,
            uri=self.settings.uri,
            delay=interval,
            attempt=attempt,
            limit="" if max_retries < 0 else f" of {max_retries}",
        )
        return interval

    def _attempt_failed(self, failure: Failure) -> Failure:
        self.last_error = failure.getErrorMessage()
        self.metrics.connect_failures.labels(self.name).inc()
        self.log.warn(
            "connector {name}: cannot connect to {uri}: {error}",
            name=self.name,
            uri=self.settings.uri,
            error=self.last_error,
        )
        return failure

    def _give_up(self, retries: int) -> None:
        if self._service is None:
            return
        service, self._service = self._service, None
        self.state = "failed"
        self.log.error(
            "connector {name}: giving up on {uri} after {retries} retries ({error})",
            name=self.name,
            uri=self.settings.uri,
            retries=retries,
            error=self.last_error,
        )
        error = ConnectorUnavailable(f"broker {self.settings.uri} unreachable, gave up: {self.last_error}")
        self._fail_waiters(error)
        subscriptions = list(self._subscriptions.values())
        self._subscriptions.clear()
        for subscription in subscriptions:
            subscription.fail(error)
        service.stopService()

    def _connected(self, protocol: StompClientProtocol) -> Deferred[Any]:
        self.generation += 1
        self._protocol = protocol
        protocol.on_unconfirmed = self._count_unconfirmed
        protocol.on_skipped = self._skipped
        if protocol.transport is not None:
            protocol.transport.registerProducer(self.congestion, True)  # type: ignore[attr-defined]
        self.state = "connected"
        self.failed_attempts = 0
        self.client_id_taken = False
        self.last_error = ""
        self.metrics.up.labels(self.name).set(1)
        self.metrics.connects.labels(self.name).inc()
        self.log.info(
            "connector {name}: connected to {uri} (STOMP {version}, {server}); {count} subscriptions to restore",
            name=self.name,
            uri=self.settings.uri,
            version=protocol.version,
            server=protocol.server or "unknown server",
            count=len(self._subscriptions),
        )
        restoring = [subscription.establish(protocol) for subscription in list(self._subscriptions.values())]
        done: Deferred[Any] = defer.DeferredList(restoring, consumeErrors=True) if restoring else succeed(None)

        def ready(_: object) -> None:
            if self._protocol is protocol:
                waiters, self._waiters = self._waiters, []
                self.metrics.waiting.labels(self.name).set(0)
                for waiter in waiters:
                    waiter.callback(protocol)

        done.addCallback(ready)
        return done

    def _lost(self, protocol: StompClientProtocol, reason: Failure) -> None:
        if self._protocol is not protocol:
            return
        self._protocol = None
        self.congestion.resumeProducing()  # sends now wait for the reconnection (send_timeout, max_waiting_sends)
        self.metrics.up.labels(self.name).set(0)
        self.last_error = str(protocol.error) if protocol.error else reason.getErrorMessage()
        if self.state == "stopped":
            return
        self.state = "retrying"
        self.log.warn(
            "connector {name}: lost connection to {uri}: {error}",
            name=self.name,
            uri=self.settings.uri,
            error=self.last_error,
        )
        for subscription in self._subscriptions.values():
            subscription.connection_lost()

    @property
    def protocol(self) -> StompClientProtocol | None:
        """:class:`~gateway.connectors.stomp_subscription.SubscriptionOwner`: the connected protocol, or None."""
        return self._protocol

    def holds(self, subscription: BrokerSubscription) -> bool:
        """:class:`~gateway.connectors.stomp_subscription.SubscriptionOwner`: whether ``subscription`` is
        restored after a reconnection."""
        return subscription.id in self._subscriptions

    def when_ready(self) -> Deferred[StompClientProtocol]:
        """The connected protocol now, or once reconnected (bounded by the caller)."""
        if self._protocol is not None and not self._protocol.closed:
            return succeed(self._protocol)
        if self._service is None:
            reason = "gave up reconnecting" if self.state == "failed" else "is not started"
            return fail(ConnectorUnavailable(f"connector {self.name} {reason}: {self.last_error}".rstrip(": ")))
        if len(self._waiters) >= self.settings.max_waiting_sends:
            return fail(
                ConnectorUnavailable(
                    f"broker {self.settings.uri} is away and {len(self._waiters)} sends already wait for it"
                )
            )

        def cancel(waiter: Deferred[StompClientProtocol]) -> None:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                self.metrics.waiting.labels(self.name).set(len(self._waiters))

        waiter: Deferred[StompClientProtocol] = Deferred(cancel)
        self._waiters.append(waiter)
        self.metrics.waiting.labels(self.name).set(len(self._waiters))
        return waiter

    def _fail_waiters(self, error: Exception) -> None:
        waiters, self._waiters = self._waiters, []
        self.metrics.waiting.labels(self.name).set(0)
        for waiter in waiters:
            waiter.errback(error)

    def _bounded(self, work: Deferred[Any], what: str) -> Deferred[Any]:
        """``work`` failing with ConnectorUnavailable after ``send_timeout``."""
        timeout = self.settings.send_timeout / 1000.0

        def timed_out(failure: Failure) -> Failure:
            if failure.check(defer.TimeoutError, defer.CancelledError):
                state = "connected" if self._protocol is not None else f"{self.state}: {self.last_error}"
                return Failure(
                    ConnectorUnavailable(
                        f"{what}: no confirmation from {self.settings.uri} within {timeout}s ({state})"
                    )
                )
            return failure

        work.addTimeout(timeout, self.clock)
        work.addErrback(timed_out)
        return work

    # -- sending -------------------------------------------------------------

    def _send_parts(self, message: Message) -> tuple[dict[str, str], bytes, bool]:
        """:func:`send_frame_parts`, refusing at once a message whose ``transformation``
        the broker already refused by closing the connection at it."""
        headers, body, text = send_frame_parts(message, amq_msg_type=self.settings.amq_msg_type)
        if self.send_transformation_refused and "transformation" in headers:
            raise MessageRefused(f"message {message.message_id}: {self.send_transformation_refused}")
        return headers, body, text

    def _closed_at_transformed_send(self, protocol: StompClientProtocol | None, transformation: str,
                                    failure: Failure) -> Failure:
        """``failure``, or a :class:`MessageRefused` if it is the broker closing the
        connection, without an ERROR frame, at a SEND that carried ``transformation``:
        how an ActiveMQ without XStream/Jettison refuses a Map or Object message.  Such a
        message is refused for good (a bridge fails or dead-letters it instead of
        sending it again for ever); one warning names the cause and the fix."""
        if not (transformation and protocol is not None and _closed_without_error(protocol, failure)):
            return failure
        if not self.send_transformation_refused:
            self.send_transformation_refused = (
                f"the broker closed the connection at a SEND with transformation:{transformation} "
                "(ActiveMQ does that without the XStream and Jettison jars in its lib directory); "
                "Map and Object messages are refused"
            )
            self.log.warn(
                "connector {name}: {uri} closed the connection, without an ERROR frame, at a SEND with "
                "transformation:{transformation}: ActiveMQ does that when XStream and Jettison are not on its "
                "classpath. Map and Object messages to it are refused from now on. Fix: link xstream.jar and "
                "jettison.jar into the broker's lib directory and restart the gateway (docs/jms.md)",
                name=self.name,
                uri=self.settings.uri,
                transformation=transformation,
            )
        return Failure(MessageRefused(f"{failure.getErrorMessage()}: {self.send_transformation_refused}"))

    def send(self, message: Message) -> Deferred[None]:
        """SEND with a receipt; fires once the broker confirmed.

        Connected, the SEND goes out at once (pipelined: it never waits for
        earlier receipts) and the protocol's receipt sweep bounds the wait;
        while the broker is away it waits for the reconnection, bounded by
        ``send_timeout``.
        """
        try:
            headers, body, text = self._send_parts(message)
        except ConnectorError as error:
            self._sent_failed.inc()
            return fail(error)
        destination = message.destination
        transformation = headers.get("transformation", "")
        protocol = self._protocol
        if protocol is not None:
            sending = protocol.send(destination, body, headers, text=text)
            sending.addErrback(lambda failure: self._closed_at_transformed_send(protocol, transformation, failure))
            return sending.addCallbacks(self._send_confirmed, self._send_failed, errbackArgs=(message,))
        written: list[StompClientProtocol] = []

        def send(protocol: StompClientProtocol) -> Deferred[Any]:
            written.append(protocol)
            return protocol.send(destination, body, headers, text=text)

        def settled(failure: Failure) -> Failure:
            if not written and isinstance(failure.value, ConnectorError):
                failure.value.in_doubt = False  # the SEND never went out
            return self._closed_at_transformed_send(written[0] if written else None, transformation, failure)

        work = self.when_ready()
        work.addCallback(send)
        return self._count(self._bounded(work, f"send of {message.message_id} to {destination}"), 1).addErrback(
            settled)

    def post(self, message: Message, settled: Settled, confirm: bool = True) -> None:
        """:class:`IPostingConnector`: :meth:`send` reporting through ``settled``.

        A SEND someone waits for (``confirm``) gets a broker receipt of its
        own, as :meth:`send`.  Without ``confirm`` (the client asked for no
        receipt) the SEND goes out without one and is confirmed by the next
        receipt on the connection - a receipted frame's, or the one the protocol
        puts on the last SEND of the burst (:meth:`StompClientProtocol.send_unconfirmed`):
        the broker handles it as a plain asynchronous send, as it would from the
        client directly.
        While the broker is away, both wait like :meth:`send` (bounded).
        """
        protocol = self._protocol
        if confirm or protocol is None:
            self.send(message).addCallbacks(lambda _: settled(None, None), lambda f: settled(f.value, None))
            return
        try:
            headers, body, text = self._send_parts(message)
        except ConnectorError as error:
            self._sent_failed.inc()
            settled(error, None)
            return
        protocol.send_unconfirmed(message.destination, body, headers, settled, text=text)

    def forward(self, destination: str, headers: dict[str, str], body: bytes, default_persistent: bool,
                settled: Settled) -> bool:
        """:class:`IFrameForwarder`: a client SEND mapped straight to the broker's SEND
        (:func:`forward_parts`), confirmed like an unconfirmed :meth:`post`.
        Declines while the broker is away (the message path waits, bounded)."""
        protocol = self._protocol
        if protocol is None:
            return False
        parts = forward_parts(headers, body, default_persistent=default_persistent, now_ms=now_millis())
        if parts is None:
            return False
        protocol.send_unconfirmed(destination, parts[1], parts[0], settled, text=parts[2])
        return True

    def _skipped(self, skipped: FrameSkipped, destination: str, outcome: str) -> None:
        """A MESSAGE over ``max_frame_size`` was skipped unread and settled (``outcome``, see
        :meth:`StompClientProtocol._skipped`): one warning, counted."""
        self.metrics.oversized.labels(self.name, outcome).inc()
        size = f"{skipped.size} bytes" if skipped.size_known else f"more than {skipped.size} bytes"
        self.log.warn(
            "connector {name}: MESSAGE {id} from {destination} is {size}, over the frame limit of {limit} bytes "
            "(connectors.{name}.max_frame_size): skipped without reading its body, {outcome}",
            name=self.name,
            id=skipped.headers.get("message-id"),
            destination=destination,
            size=size,
            limit=skipped.limit,
            outcome=_SKIPPED_OUTCOMES.get(outcome, outcome),
        )

    def _count_unconfirmed(self, count: int, error: Exception | None) -> None:
        (self._sent_failed if error is not None else self._sent_ok).inc(count)

    def _send_confirmed(self, _: object) -> None:
        self._sent_ok.inc()

    def _send_failed(self, failure: Failure, message: Message) -> Failure:
        self._sent_failed.inc()
        if failure.check(defer.TimeoutError, defer.CancelledError):
            timeout = self.settings.send_timeout / 1000.0
            state = "connected" if self._protocol is not None else f"{self.state}: {self.last_error}"
            return Failure(
                ConnectorUnavailable(
                    f"send of {message.message_id} to {message.destination}: no confirmation from "
                    f"{self.settings.uri} within {timeout}s ({state})"
                )
            )
        return failure

    def send_batch(self, messages: list[Message]) -> Deferred[None]:
        """BEGIN, the SENDs, COMMIT with a receipt: all visible at the broker or none."""
        if not messages:
            return succeed(None)
        try:
            parts = [(message.destination, *self._send_parts(message)) for message in messages]
        except ConnectorError as error:
            self._sent_failed.inc(len(messages))
            return fail(error)
        transaction = f"{self.settings.client_id}-tx-{next(self._transaction_ids)}"
        transformation = next((p[1]["transformation"] for p in parts if "transformation" in p[1]), "")
        committed: list[StompClientProtocol] = []

        def transact(protocol: StompClientProtocol) -> Deferred[Any]:
            protocol.begin(transaction)
            for destination, headers, body, text in parts:
                protocol.send(destination, body, headers, text=text, receipt=False, transaction=transaction)
            committed.append(protocol)
            return protocol.commit(transaction)

        def settled(failure: Failure) -> Failure:
            if not committed and isinstance(failure.value, ConnectorError):
                failure.value.in_doubt = False  # no COMMIT went out: the broker rolls the transaction back
            return self._closed_at_transformed_send(committed[0] if committed else None, transformation, failure)

        work = self.when_ready()
        work.addCallback(transact)
        sent = self._count(self._bounded(work, f"transaction of {len(messages)} messages"), len(messages))
        return sent.addErrback(settled)

    def _count(self, work: Deferred[Any], count: int) -> Deferred[None]:
        def ok(_: object) -> None:
            self._sent_ok.inc(count)

        def failed(failure: Failure) -> Failure:
            self._sent_failed.inc(count)
            return failure

        return work.addCallbacks(ok, failed)

    # -- subscriptions -------------------------------------------------------

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[ISubscription]:
        """SUBSCRIBE at the broker; fires with the live subscription."""
        if spec.ack_mode not in ACK_MODES:
            return fail(ConnectorError(f"unknown ack mode {spec.ack_mode!r}"))
        subscription = BrokerSubscription(self, f"{self.name}-sub-{next(self._subscription_ids)}", spec, consumer)
        work = self.when_ready()
        work.addCallback(subscription.establish)
        work = self._bounded(work, f"subscription to {spec.destination}")

        def established(_: object) -> BrokerSubscription:
            if subscription.closed:
                raise ConnectorUnavailable(f"subscription to {spec.destination} ended while being made")
            self._subscriptions[subscription.id] = subscription
            return subscription

        def refused(failure: Failure) -> Failure:
            subscription.closed = True
            error = failure.value
            if isinstance(error, BrokerError) and "selector" in str(error).lower():
                return Failure(SelectorError(str(error), selector=spec.selector or ""))
            if isinstance(error, BrokerError) and spec.selector:
                # ActiveMQ refuses a topic SUBSCRIBE with a bad selector without naming the
                # cause ("Couldn't create TopicSubscription"): say so when our parser agrees.
                from gateway.selector import compile_selector

                try:
                    compile_selector(spec.selector)
                except SelectorError as bad:
                    return Failure(SelectorError(f"{bad} (the broker refused the subscription: {error})",
                                                 selector=spec.selector, column=bad.column))
            return failure

        return work.addCallbacks(established, refused)

    # -- the in-doubt probe --------------------------------------------------

    def why_cannot_tell(self, destination: str) -> str | None:
        """:class:`IHeldMessages`: why :meth:`held_message_ids` cannot answer for ``destination`` (None: it can)."""
        if destination.startswith("/queue/"):
            return None
        return (f"{destination} is not a queue: a JMS broker over STOMP can only be asked which messages it "
                "holds by browsing a queue")

    def held_message_ids(self, destination: str, tail: int = 0) -> Deferred[set[str] | None]:
        """:class:`IHeldMessages` (``tail`` does not apply: a queue is browsed whole): the bridge
        copy ids (:data:`~gateway.connectors.stomp_browse.DUPLICATE_ID`) of the
        messages queued at ``destination``, by browsing it (:mod:`gateway.connectors.stomp_browse`);
        None for a topic, or a queue of more than :data:`BROWSE_LIMIT` messages.  Bounded by
        ``send_timeout``, the wait for a reconnection included."""
        if self.why_cannot_tell(destination) is not None:
            return succeed(None)
        subscription_id = f"{self.name}-browse-{next(self._subscription_ids)}"
        work = self.when_ready()
        work.addCallback(lambda protocol: browse_duplicate_ids(protocol, destination, subscription_id,
                                                               limit=BROWSE_LIMIT))

        def answered(held: set[str] | None) -> set[str] | None:
            if held is None:
                self.log.warn("connector {name}: {destination} holds more than {limit} messages; not browsed "
                              "to the end", name=self.name, destination=destination, limit=BROWSE_LIMIT)
            return held

        return self._bounded(work, f"browse of {destination}").addCallback(answered)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        """Delete an inactive durable subscription (and its backlog) at the broker."""
        name = durable_subscription_name(client_id, durable_name)
        work = self.when_ready()
        work.addCallback(
            lambda protocol: protocol.unsubscribe(
                f"{self.name}-remove-{next(self._subscription_ids)}",
                headers={"activemq.subscriptionName": name},
            )
        )
        return self._bounded(work, f"removal of durable subscription {name}").addCallback(lambda _: None)

    def forget(self, subscription: BrokerSubscription) -> None:
        """:class:`~gateway.connectors.stomp_subscription.SubscriptionOwner`: ``subscription`` is closed."""
        self._subscriptions.pop(subscription.id, None)


def _client_id_in_use(failure: Failure) -> bool:
    """Whether ``failure`` is the broker refusing a CONNECT because its client id is connected
    already (ActiveMQ's InvalidClientIDException, Artemis's AMQ229026)."""
    if not failure.check(BrokerError):
        return False
    message = failure.getErrorMessage()
    return "InvalidClientID" in message or "AMQ229026" in message or "already connected" in message


def _closed_without_error(protocol: StompClientProtocol, failure: Failure) -> bool:
    """Whether ``failure`` is the broker closing ``protocol``'s connection without an ERROR frame:
    how an ActiveMQ without XStream/Jettison refuses a frame carrying a ``transformation``."""
    return protocol.closed and protocol.error is None and bool(failure.check(ConnectorUnavailable))
