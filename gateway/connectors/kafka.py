"""The Kafka connector: STOMP destinations <-> Kafka topics through confluent-kafka.

URI form ``kafka://host:9092[,host2:9092]``.  Options (``[connectors.NAME]``):

``uri`` / ``bootstrap``
    the bootstrap servers.
``client_id``
    Kafka ``client.id`` (default: the gateway id).
``producer`` / ``consumer``
    librdkafka settings merged over ours (``acks=all``, ``enable.idempotence``
    for the producer; ``enable.auto.commit=false`` for consumers).
``transactional_id``
    enables :meth:`KafkaConnector.send_batch` as one Kafka transaction; without
    it a batch is sent as a sequence of idempotent sends (not atomic).
``text_records``
    records without a ``jms.MessageType`` header whose value is UTF-8 become
    TextMessages (default true), else BytesMessages.
``topics``
    a table mapping destinations to topics; otherwise ``/topic/kafka.x``,
    ``/queue/kafka.x``, ``/topic/x`` and ``/queue/x`` all mean topic ``x``.
``key_header``
    header/property giving the record key for plain sends (default: message id).
``require_existing_topics``
    fail a send to a topic the cluster does not list (default true), even on
    brokers that create topics on first use.
``group_prefix``
    prefix of the consumer groups subscriptions create (default ``jmsgateway``).
``pause_after``
    seconds a subscription's deliveries may stall (prefetch reached, client
    paused) before its partitions are paused (default 5).
``poll_timeout`` / ``subscribe_timeout`` / ``metadata_timeout``
    consumer poll wait (0.05 s), how long a subscription may wait for its
    partitions (60 s), how long start and topic checks wait for metadata (10 s).

Sends: :meth:`~KafkaConnector.send` produces without flushing; a polling
thread serves delivery reports and hands them to the reactor thread, where
the send's Deferred fires (so a RECEIPT means Kafka acknowledged with
``acks=all``).  Subscriptions: one consumer per subscription in its own
thread (:mod:`gateway.connectors.kafka_subscription`).  Groups: a durable
subscription uses ``<prefix>.<client id>.<durable name>``, a queue
destination the shared ``<prefix>.queue.<topic>`` (competing consumers,
earliest offset for a new group), any other subscription a group of its own
starting at the latest offset.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from zope.interface import implementer

from gateway.connectors.kafka_records import Header, message_to_record
from gateway.connectors.kafka_subscription import KafkaSubscription
from gateway.errors import ConfigError, ConnectorError, ConnectorUnavailable, DestinationError, SelectorError
from gateway.interfaces import IConnector, IConsumer, SubscriptionSpec
from gateway.message.model import Message

HARD_ERROR_CODES = frozenset(
    {
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_TOPIC",
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TOPIC_EXCEPTION",
        "INVALID_TOPIC_EXCEPTION",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "_FATAL",
    }
)
"""Kafka errors that routing treats as hard failures (no retry makes them go away)."""

PRODUCER_RESET_CODES = frozenset(
    {
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_EPOCH",
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "UNKNOWN_PRODUCER_ID",
        "INVALID_PRODUCER_ID_MAPPING",
        "_FENCED",
        "_FATAL",
    }
)
"""Errors after which the idempotent producer cannot go on; it is replaced by a new one
(e.g. a broker that fences the epoch bump librdkafka makes after message timeouts)."""

RESEND_CODES = (PRODUCER_RESET_CODES - {"_FATAL"}) | {"_PURGE_QUEUE"}
"""Errors that mean the broker did not store the record (refused, or never sent and
purged from a retired producer's queue): it is sent once more through the new producer."""

_OPTION_KEYS = (
    "uri",
    "bootstrap",
    "client_id",
    "producer",
    "consumer",
    "transactional_id",
    "text_records",
    "topics",
    "key_header",
    "require_existing_topics",
    "group_prefix",
    "poll_timeout",
    "subscribe_timeout",
    "pause_after",
    "metadata_timeout",
)


class KafkaDeliveryError(ConnectorError):
    """Kafka refused or lost a record.

    :ivar code: the Kafka error name (``UNKNOWN_TOPIC_OR_PART``, ``_MSG_TIMED_OUT`` …).
    :ivar hard: whether retrying cannot help (unknown topic, not authorised).
    """

    def __init__(self, message: str, *, code: str = "", topic: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.topic = topic
        self.hard = code in HARD_ERROR_CODES


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """Where Kafka stored a record."""

    topic: str
    partition: int
    offset: int


@dataclass(slots=True)
class KafkaSettings:
    """The connector's validated options (see the module docstring)."""

    bootstrap: str
    client_id: str = "jmsgateway"
    producer: dict[str, Any] = field(default_factory=dict)
    consumer: dict[str, Any] = field(default_factory=dict)
    transactional_id: str | None = None
    text_records: bool = True
    topics: dict[str, str] = field(default_factory=dict)
    key_header: str | None = None
    require_existing_topics: bool = True
    group_prefix: str = "jmsgateway"
    poll_timeout: float = 0.05
    subscribe_timeout: float = 60.0
    pause_after: float = 5.0
    metadata_timeout: float = 10.0

    @classmethod
    def from_options(cls, options: dict[str, Any], *, name: str = "kafka", client_id: str = "jmsgateway",
                     path: str = "") -> KafkaSettings:
        """Validate ``[connectors.<name>]`` options (raises ConfigError)."""
        where = f"connectors.{name}"
        for key in options:
            if key not in _OPTION_KEYS:
                raise ConfigError(f"unknown Kafka connector option; known: {', '.join(_OPTION_KEYS)}",
                                  path=path, key=f"{where}.{key}")
        bootstrap = options.get("bootstrap")
        uri = options.get("uri")
        if bootstrap is None and isinstance(uri, str):
            bootstrap = uri.split("://", 1)[-1].rstrip("/")
        if not isinstance(bootstrap, str) or not bootstrap:
            raise ConfigError("needs bootstrap servers (uri = 'kafka://host:9092')", path=path, key=f"{where}.uri")

        def typed(key: str, kind: type, default: Any) -> Any:
            value = options.get(key, default)
            if value is not None and not isinstance(value, kind):
                raise ConfigError(f"expected {kind.__name__}, got {value!r}", path=path, key=f"{where}.{key}")
            return value

        return cls(
            bootstrap=bootstrap,
            client_id=typed("client_id", str, client_id),
            producer=dict(typed("producer", dict, {})),
            consumer=dict(typed("consumer", dict, {})),
            transactional_id=typed("transactional_id", str, None),
            text_records=typed("text_records", bool, True),
            topics=dict(typed("topics", dict, {})),
            key_header=typed("key_header", str, None),
            require_existing_topics=typed("require_existing_topics", bool, True),
            group_prefix=typed("group_prefix", str, "jmsgateway"),
            poll_timeout=float(typed("poll_timeout", (int, float), 0.05)),  # type: ignore[arg-type]
            subscribe_timeout=float(typed("subscribe_timeout", (int, float), 60.0)),  # type: ignore[arg-type]
            pause_after=float(typed("pause_after", (int, float), 5.0)),  # type: ignore[arg-type]
            metadata_timeout=float(typed("metadata_timeout", (int, float), 10.0)),  # type: ignore[arg-type]
        )


def _first_error(failure: Any) -> Any:
    """The failure of the first failed Deferred in a ``fireOnOneErrback`` DeferredList."""
    return failure.value.subFailure


def topic_for_destination(destination: str, topics: dict[str, str] | None = None) -> str:
    """The Kafka topic a destination names (see the module docstring)."""
    if topics and destination in topics:
        return topics[destination]
    name = destination
    for prefix in ("/topic/", "/queue/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    name = name.removeprefix("kafka.")
    if not name or name.startswith("/"):
        raise DestinationError(f"destination {destination!r} does not name a Kafka topic")
    return name


@implementer(IConnector)
class KafkaConnector:
    """Sends to and subscribes from Kafka (see the module docstring).

    :param reactor: the reactor deliveries and reports come back to.
    :param settings: validated options.
    :param name: the connector's configured name.
    :param gateway_id: written to ``jmsbridge.origin`` on every record.
    """

    log = Logger()

    def __init__(self, reactor: Any, settings: KafkaSettings, *, name: str = "kafka",
                 gateway_id: str = "jmsgateway") -> None:
        self.reactor = reactor
        self.settings = settings
        self.name = name
        self.gateway_id = gateway_id
        self._producer: Any = None
        self._transactional: Any = None
        self._transaction_lock = threading.Lock()
        self._poller: threading.Thread | None = None
        self._running = False
        self._known_topics: set[str] = set()
        self._topic_waiters: dict[str, list[Deferred[None]]] = {}
        self._subscriptions: set[KafkaSubscription] = set()
        self._in_flight = 0
        self._outbox: list[tuple[Any, tuple[Any, ...]]] = []
        self._outbox_lock = threading.Lock()

    @classmethod
    def from_config(cls, name: str, options: dict[str, Any], *, reactor: Any, gateway_id: str,
                    registry: Any = None, path: str = "") -> KafkaConnector:
        """Build the connector from its ``[connectors.<name>]`` table."""
        settings = KafkaSettings.from_options(options, name=name, client_id=gateway_id, path=path)
        return cls(reactor, settings, name=name, gateway_id=gateway_id)

    # -------------------------------------------------------------- lifecycle

    def producer_config(self) -> dict[str, Any]:
        """The producer's librdkafka settings."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.settings.bootstrap,
            "client.id": self.settings.client_id,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 1,
        }
        config.update(self.settings.producer)
        config.pop("transactional.id", None)
        return config

    def consumer_config(self, group: str, earliest: bool) -> dict[str, Any]:
        """A subscription consumer's librdkafka settings."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.settings.bootstrap,
            "client.id": self.settings.client_id,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest" if earliest else "latest",
        }
        config.update(self.settings.consumer)
        config["group.id"] = group
        return config

    def _pool(self) -> Any:
        return self.reactor.getThreadPool()

    def start(self) -> Deferred[None]:
        """Create the producer, start its report thread, check the cluster answers."""
        if self._running:
            return succeed(None)
        from confluent_kafka import Producer

        try:
            self._producer = Producer(self.producer_config())
        except Exception as exc:
            return fail(ConnectorError(f"kafka connector {self.name}: bad producer settings: {exc}"))
        self._running = True
        self._poller = threading.Thread(target=self._serve_reports, name=f"kafka-reports-{self.name}", daemon=True)
        self._poller.start()
        d = self._refresh_topics()

        def started(_: object) -> None:
            self.log.info("kafka connector {name} connected to {bootstrap}", name=self.name,
                          bootstrap=self.settings.bootstrap)

        def unreachable(failure: Any) -> Any:
            self._running = False
            self._producer = None
            raise ConnectorUnavailable(
                f"kafka connector {self.name}: cannot reach {self.settings.bootstrap}: {failure.getErrorMessage()}"
            )

        d.addCallbacks(started, unreachable)
        return d

    def stop(self) -> Deferred[None]:
        """Close subscriptions, wait for outstanding reports (bounded), stop the threads."""
        closing = [s.close() for s in list(self._subscriptions)]

        def flush(_: object) -> Deferred[None]:
            producer, self._producer = self._producer, None
            if producer is None:
                self._running = False
                return succeed(None)

            def drain() -> None:
                if producer.flush(10):
                    # still undelivered: fail them rather than leave their senders waiting
                    producer.purge()
                    producer.flush(1)
                self._running = False

            return deferToThreadPool(self.reactor, self._pool(), drain)

        d: Deferred[Any] = DeferredList(closing, consumeErrors=True)
        d.addCallback(flush)
        if self._transactional is not None:
            transactional, self._transactional = self._transactional, None
            d.addCallback(lambda _: deferToThreadPool(self.reactor, self._pool(), transactional.flush, 10))
        d.addCallback(lambda _: None)
        return d

    # ----------------------------------------------------------- producing

    def _post(self, function: Any, *args: Any) -> None:
        """From any thread: run ``function(*args)`` on the reactor thread, in order.

        Reports arriving while the reactor has not yet run the previous ones
        share one ``callFromThread`` (one wake-up for a burst of reports).
        """
        with self._outbox_lock:
            self._outbox.append((function, args))
            wake = len(self._outbox) == 1
        if wake:
            self.reactor.callFromThread(self._run_outbox)

    def _run_outbox(self) -> None:
        with self._outbox_lock:
            batch, self._outbox = self._outbox, []
        for function, args in batch:
            try:
                function(*args)
            except Exception:
                self.log.failure("handling a kafka delivery report failed")

    def _serve_reports(self) -> None:
        """Polling thread: serve delivery callbacks until stopped."""
        while self._running:
            producer = self._producer
            if producer is None:
                break
            try:
                producer.poll(0.1)
            except Exception:
                self.log.failure("kafka producer poll failed")
                time.sleep(0.1)

    def _refresh_topics(self) -> Deferred[Any]:
        producer = self._producer

        def fetch() -> set[str]:
            metadata = producer.list_topics(timeout=self.settings.metadata_timeout)
            return set(metadata.topics)

        d: Deferred[Any] = deferToThreadPool(self.reactor, self._pool(), fetch)

        def remember(topics: set[str]) -> None:
            self._known_topics = topics

        d.addCallback(remember)
        return d

    def check_topic(self, topic: str) -> Deferred[None]:
        """Fire if ``topic`` exists (or existence is not required); else fail hard."""
        if not self.settings.require_existing_topics or topic in self._known_topics:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        waiters = self._topic_waiters.setdefault(topic, [])
        waiters.append(waiter)
        if len(waiters) == 1:

            def settle(result: Any) -> None:
                for w in self._topic_waiters.pop(topic, []):
                    if isinstance(result, Exception):
                        w.errback(result)
                    elif topic in self._known_topics:
                        w.callback(None)
                    else:
                        w.errback(KafkaDeliveryError(f"kafka topic {topic!r} does not exist",
                                                     code="UNKNOWN_TOPIC_OR_PART", topic=topic))

            def unreachable(failure: Any) -> None:
                settle(ConnectorUnavailable(f"cannot read kafka metadata: {failure.getErrorMessage()}"))

            self._refresh_topics().addCallbacks(settle, unreachable)
        return waiter

    def send_record(self, topic: str, key: bytes | None, value: bytes | None,
                    headers: Iterable[Header] = ()) -> Deferred[DeliveryReport]:
        """Produce one record; fires on its delivery report (never flushes)."""
        if self._producer is None:
            return fail(ConnectorUnavailable(f"kafka connector {self.name} is not started"))
        if topic in self._known_topics or not self.settings.require_existing_topics:
            return self._produce(topic, key, value, list(headers))  # the hot path: no extra Deferreds
        d: Deferred[Any] = self.check_topic(topic)
        d.addCallback(lambda _: self._produce(topic, key, value, list(headers)))
        return d

    def _produce(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[Header], retried: bool = False) -> Deferred[DeliveryReport]:
        producer = self._producer
        if producer is None:
            return fail(ConnectorUnavailable(f"kafka connector {self.name} is stopping"))
        done: Deferred[DeliveryReport] = Deferred()
        call = self._post

        def report(err: Any, record: Any) -> None:
            if err is None:
                call(self._reported, done, DeliveryReport(record.topic(), record.partition(), record.offset()))
                return
            error = KafkaDeliveryError(f"kafka refused a record for {topic}: {err.str()}", code=err.name(),
                                       topic=topic)
            if err.fatal() or err.name() in PRODUCER_RESET_CODES:
                call(self._reset_producer, producer, err.str())
            if not retried and err.name() in RESEND_CODES:
                # the broker did not store the record, so it is safe to send it once more
                call(self._retry, done, error, topic, key, value, headers)
                return
            call(self._reported, done, error)

        try:
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=report)
        except BufferError:
            return fail(ConnectorUnavailable(f"kafka producer queue of {self.name} is full"))
        except Exception as exc:
            code = exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") else ""
            return fail(KafkaDeliveryError(f"kafka refused a record for {topic}: {exc}", code=code, topic=topic))
        self._in_flight += 1
        return done

    def _retry(self, done: Deferred[DeliveryReport], error: Exception, topic: str, key: bytes | None,
               value: bytes | None, headers: list[Header]) -> None:
        """Send a record the old producer could not, through its replacement."""
        self._in_flight -= 1
        again = self._produce(topic, key, value, headers, retried=True)
        again.chainDeferred(done)

    def _reset_producer(self, broken: Any, reason: str) -> None:
        """Replace a producer that cannot go on; what it still holds fails (ERROR to senders)."""
        if broken is not self._producer or not self._running:
            return
        from confluent_kafka import Producer

        self.log.warn("kafka connector {name}: replacing the producer after: {reason}", name=self.name,
                      reason=reason)
        self._producer = Producer(self.producer_config())

        def retire() -> None:
            broken.purge(in_queue=True, in_flight=False, blocking=False)  # unsent: resent by the new producer
            broken.flush(5)

        deferToThreadPool(self.reactor, self._pool(), retire).addErrback(
            lambda f: self.log.failure("retiring a kafka producer failed", f)
        )

    def _reported(self, done: Deferred[DeliveryReport], result: DeliveryReport | Exception) -> None:
        self._in_flight -= 1
        if isinstance(result, Exception):
            done.errback(result)
        else:
            done.callback(result)

    def topic_of(self, destination: str) -> str:
        """The topic ``destination`` maps to (DestinationError if none)."""
        return topic_for_destination(destination, self.settings.topics)

    def send(self, message: Message) -> Deferred[DeliveryReport]:
        """Send ``message`` to the topic its destination names (key: ``key_header`` or message id)."""
        try:
            topic = self.topic_of(message.destination)
            key, value, headers = message_to_record(message, self.settings.key_header, self.gateway_id)
        except Exception as exc:
            return fail(exc)
        return self.send_record(topic, key, value, headers)

    def send_batch(self, messages: list[Message]) -> Deferred[Any]:
        """Send ``messages`` in one Kafka transaction when ``transactional_id`` is set;
        otherwise as a sequence of sends (each durable, the batch not atomic)."""
        try:
            records = [
                (self.topic_of(m.destination), *message_to_record(m, self.settings.key_header, self.gateway_id))
                for m in messages
            ]
        except Exception as exc:
            return fail(exc)
        return self.send_records(records)

    def send_records(self, records: Sequence[tuple[str, bytes | None, bytes | None, list[Header]]]) -> Deferred[Any]:
        """Publish ``(topic, key, value, headers)`` records as one transaction when
        ``transactional_id`` is set, else as parallel idempotent sends; fires when
        all are acknowledged, fails with the first error."""
        if not records:
            return succeed([])
        if self.settings.transactional_id is None:
            sends = [self.send_record(topic, key, value, headers) for topic, key, value, headers in records]
            d: Deferred[Any] = DeferredList(sends, fireOnOneErrback=True, consumeErrors=True)
            d.addCallbacks(lambda results: [r for _, r in results], _first_error)
            return d
        checks: Deferred[Any] = DeferredList([self.check_topic(t) for t in {r[0] for r in records}],
                                             fireOnOneErrback=True, consumeErrors=True)
        checks.addErrback(_first_error)
        checks.addCallback(lambda _: deferToThreadPool(self.reactor, self._pool(), self._transaction, records))
        return checks

    def _transaction(self, records: Sequence[tuple[str, bytes | None, bytes | None, list[Header]]]) -> int:
        """Thread: produce ``records`` in one transaction; returns their count."""
        from confluent_kafka import KafkaException, Producer

        with self._transaction_lock:
            if self._transactional is None:
                config = self.producer_config()
                config["transactional.id"] = self.settings.transactional_id
                producer = Producer(config)
                producer.init_transactions(30)
                self._transactional = producer
            producer = self._transactional
            producer.begin_transaction()
            try:
                for topic, key, value, headers in records:
                    producer.produce(topic, value=value, key=key, headers=headers)
                producer.commit_transaction(30)
            except KafkaException as exc:
                error = exc.args[0]
                try:
                    if error.txn_requires_abort():
                        producer.abort_transaction(30)
                except KafkaException:
                    self.log.failure("aborting a kafka transaction failed")
                if error.fatal():
                    self._transactional = None
                raise KafkaDeliveryError(f"kafka transaction failed: {error.str()}", code=error.name()) from None
            return len(records)

    # ----------------------------------------------------------- consuming

    def group_for(self, spec: SubscriptionSpec, topic: str) -> tuple[str, bool]:
        """The consumer group of a subscription, and whether a new group starts at the earliest offset."""
        prefix = self.settings.group_prefix
        if spec.durable_name:
            owner = f"{spec.client_id}." if spec.client_id else ""
            return f"{prefix}.{owner}{spec.durable_name}", True
        if spec.destination.startswith("/queue/"):
            return f"{prefix}.queue.{topic}", True
        return f"{prefix}.{self.gateway_id}.{uuid.uuid4().hex}", False

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[KafkaSubscription]:
        """Start a consumer-group member for ``spec``; fires once it has its partitions."""
        try:
            topic = self.topic_of(spec.destination)
            matches = None
            if spec.selector:
                from gateway.selector import compile_selector

                matches = compile_selector(spec.selector).matches
        except (DestinationError, SelectorError) as exc:
            return fail(exc)
        if self._producer is None:
            return fail(ConnectorUnavailable(f"kafka connector {self.name} is not started"))
        checked: Deferred[Any] = self.check_topic(topic)

        def missing(failure: Any) -> Any:
            if failure.check(KafkaDeliveryError):
                raise DestinationError(f"cannot subscribe to {spec.destination}: {failure.getErrorMessage()}")
            return failure

        checked.addCallbacks(lambda _: self._start_subscription(spec, consumer, topic, matches), missing)
        return checked

    def _start_subscription(self, spec: SubscriptionSpec, consumer: IConsumer, topic: str,
                            matches: Any) -> Deferred[KafkaSubscription]:
        group, earliest = self.group_for(spec, topic)
        from confluent_kafka import Consumer

        config = self.consumer_config(group, earliest)
        subscription = KafkaSubscription(
            self.reactor,
            spec,
            consumer,
            topic=topic,
            group=group,
            consumer_factory=lambda: Consumer(config),
            text_records=self.settings.text_records,
            matches=matches,
            poll_timeout=self.settings.poll_timeout,
            on_closed=self._subscriptions.discard,
            start_at_latest=not earliest and config.get("auto.offset.reset") == "latest",
            pause_after=self.settings.pause_after,
        )
        self._subscriptions.add(subscription)
        d = subscription.start()
        d.addTimeout(self.settings.subscribe_timeout, self.reactor)

        def timed_out(failure: Any) -> Any:
            subscription.close()
            if failure.check(ConnectorError):
                return failure
            raise ConnectorUnavailable(f"kafka group {group} got no partitions of {topic}: {failure.getErrorMessage()}")

        d.addErrback(timed_out)
        return d

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        """Delete the consumer group of a durable subscription (its committed offsets)."""
        owner = f"{client_id}." if client_id else ""
        group = f"{self.settings.group_prefix}.{owner}{durable_name}"
        bootstrap = self.settings.bootstrap

        def delete() -> None:
            from confluent_kafka.admin import AdminClient

            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.delete_consumer_groups([group], request_timeout=10).values():
                future.result(timeout=15)

        d = deferToThreadPool(self.reactor, self._pool(), delete)

        def failed(failure: Any) -> None:
            raise ConnectorError(f"cannot delete kafka group {group}: {failure.getErrorMessage()}")

        d.addErrback(failed)
        return d
