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
``delivered_topic`` / ``delivered_interval`` / ``delivered_tail``
    where shared and durable subscriptions publish how far they delivered, so the next owner of
    a partition flags redeliveries (:mod:`gateway.connectors.kafka_delivered`; "" turns it off).
``dedup_window`` / ``dedup_window_seconds`` / ``dedup_tail``
    the idempotency window of SENDs with ``x-dedup-id`` / ``_AMQ_DUPL_ID``
    (:mod:`gateway.connectors.kafka_dedup`).
``poll_timeout`` / ``subscribe_timeout`` / ``metadata_timeout``
    consumer poll wait (0.05 s), how long a subscription may wait for its
    partitions (60 s), how long start and topic checks wait for metadata (10 s).

Sends: :meth:`~KafkaConnector.produce` produces without flushing; the
reactor thread polls the producer while records are in flight, so delivery
reports run there (a RECEIPT means Kafka acknowledged with ``acks=all``);
:meth:`~KafkaConnector.send` and :meth:`~KafkaConnector.send_record` wrap it
in a Deferred.  Subscriptions: one consumer per subscription in its own
thread (:mod:`gateway.connectors.kafka_subscription`), the librdkafka consumer
itself in a child process (:mod:`gateway.connectors.kafka_consumer_host`).  Groups: a durable
subscription uses ``<prefix>.<client id>.<durable name>``, a queue
destination the shared ``<prefix>.queue.<topic>`` (competing consumers,
earliest offset for a new group), any other subscription a group of its own
starting at the latest offset.  A selector is refused on a shared queue group
(SelectorError): the group commits one offset per partition, so a record one
member's selector skips could never stay for the others.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from zope.interface import implementer

from gateway.connectors.kafka_consumer_host import ConsumerProcess
from gateway.connectors.kafka_dedup import TopicSendIds, key_of_record, keyed
from gateway.connectors.kafka_delivered import MarksChannel
from gateway.connectors.kafka_settings import KafkaSettings
from gateway.connectors.kafka_subscription import ConsumerLagCollector, KafkaSubscription
from gateway.connectors.kafka_transactions import KafkaTransactionalCopy, held_record_ids, read_tail
from gateway.errors import ConnectorError, ConnectorUnavailable, DestinationError, SelectorError
from gateway.flow import Congestion
from gateway.interfaces import (
    Capability,
    Health,
    IConnector,
    IConsumer,
    ICredentialed,
    IDestinationAliases,
    IExactlyOnceSource,
    IExactlyOnceTarget,
    IFlowControlled,
    IHeldMessages,
    IStatusReporting,
    ITopicLog,
    SubscriptionSpec,
)
from gateway.message.kafka_delivery import DeliveryReport, KafkaDeliveryError, Settled
from gateway.message.kafka_records import Header, message_to_record
from gateway.message.model import Message

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

QUEUE_LIMIT = 100_000
"""librdkafka's default ``queue.buffering.max.messages``."""
POLL_INTERVAL = 0.001
"""Seconds between polls for delivery reports while records are in flight and none came last time."""
DRAIN_INTERVAL = 0.01
"""Seconds between polls while stopping or retiring a producer."""
STOP_TIMEOUT = 10.0
"""Seconds stop() waits for outstanding delivery reports before failing what is left."""

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


KAFKA_CAPABILITIES = frozenset({Capability.NACK, Capability.PREFETCH, Capability.DURABLE, Capability.RECONNECT,
                                Capability.HELD_MESSAGE_IDS, Capability.REDELIVERED_AFTER_CLOSE})
"""What a Kafka connector offers (:class:`~gateway.interfaces.Capability`); the redelivered flag
after a close through the delivered marks (:mod:`.kafka_delivered`, queues and durable
subscriptions: the groups whose partitions move).  Not: selectors on queues (one shared group
commits one offset per partition), a new durable subscription starting empty (a new group reads
from the earliest offset), health following the cluster (it says whether the producer runs;
librdkafka reconnects by itself)."""


@implementer(IFlowControlled, IStatusReporting, ITopicLog, ICredentialed, IHeldMessages, IExactlyOnceSource,
             IExactlyOnceTarget, IDestinationAliases)
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
        self.capabilities = KAFKA_CAPABILITIES | (
            {Capability.TRANSACTIONS} if settings.transactional_id is not None else set()
        )
        """Atomic batches only with a ``transactional_id``; see :data:`KAFKA_CAPABILITIES`."""
        self._producer: Any = None
        self._transactional: Any = None
        self._transaction_lock = threading.Lock()
        self._running = False
        self._known_topics: set[str] = set()
        self._topic_waiters: dict[str, list[Deferred[None]]] = {}
        self._subscriptions: set[KafkaSubscription] = set()
        self._in_flight = 0
        """Records produced whose delivery report has not been served yet."""
        queue_limit = int(self.producer_config().get("queue.buffering.max.messages", QUEUE_LIMIT))
        self._congested_at = max(1, queue_limit // 2)
        self._caught_up_at = queue_limit // 4
        self.congestion = Congestion(f"kafka connector {name}")
        """Congested while half of librdkafka's queue (``queue.buffering.max.messages``) is in
        flight, until a quarter is: senders wait instead of meeting a full queue (:mod:`gateway.flow`)."""
        self._poll_call: Any = None
        self._retiring: set[Any] = set()
        """Replaced producers still holding records; polled until empty."""
        self._marks: MarksChannel | None = None
        """Where shared and durable subscriptions publish how far they delivered (:mod:`.kafka_delivered`)."""
        self.send_ids = TopicSendIds(reactor, self._tail_keys, size=settings.dedup_window,
                                     seconds=settings.dedup_window_seconds)
        """The idempotency window of SENDs with ``x-dedup-id`` / ``_AMQ_DUPL_ID`` (:mod:`.kafka_dedup`)."""

    @classmethod
    def from_config(cls, name: str, options: Any, *, reactor: Any, gateway_id: str,
                    registry: Any = None, path: str = "") -> KafkaConnector:
        """Build the connector from its ``[connectors.<name>]`` table."""
        settings = KafkaSettings.from_options(options, name=name, client_id=gateway_id, path=path)
        connector = cls(reactor, settings, name=name, gateway_id=gateway_id)
        if registry is not None:  # (its subscriptions' lag on /metrics)
            ConsumerLagCollector.for_registry(registry).add(name, connector._subscriptions)
        return connector

    def with_credentials(self, user: str, password: str | None) -> KafkaConnector:
        """:class:`ICredentialed`: a new connector like this one, logging in with SASL as ``user``
        (``sasl.username`` / ``sasl.password`` of its producer and consumers)."""
        tables: dict[str, Any] = {}
        for side in ("producer", "consumer"):
            table = dict(getattr(self.settings, side))
            table["sasl.username"] = user
            if password is not None:
                table["sasl.password"] = password
            tables[side] = table
        return KafkaConnector(self.reactor, self.settings.model_copy(update=tables), name=self.name,
                              gateway_id=self.gateway_id)

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
        d = self._refresh_topics()

        def started(_: object) -> Deferred[None]:
            self.log.info("kafka connector {name} connected to {bootstrap}", name=self.name,
                          bootstrap=self.settings.bootstrap)
            return self._open_marks()

        def unreachable(failure: Any) -> Any:
            self._running = False
            self._producer = None
            raise ConnectorUnavailable(
                f"kafka connector {self.name}: cannot reach {self.settings.bootstrap}: {failure.getErrorMessage()}"
            )

        d.addCallbacks(started, unreachable)
        return d

    def _open_marks(self) -> Deferred[None]:
        """Use ``delivered_topic`` for the delivered marks (:mod:`.kafka_delivered`), creating it
        (one partition, compacted) when the cluster lacks it; without it, marks are off (logged)."""
        topic = self.settings.delivered_topic
        if not topic:
            return succeed(None)
        if topic in self._known_topics:
            self._marks = MarksChannel(self)
            return succeed(None)
        bootstrap = self.settings.bootstrap

        def create() -> None:
            from confluent_kafka.admin import AdminClient
            from confluent_kafka.cimpl import NewTopic

            admin = AdminClient({"bootstrap.servers": bootstrap})
            new = NewTopic(topic, num_partitions=1, config={"cleanup.policy": "compact"})
            for future in admin.create_topics([new], request_timeout=10).values():
                try:
                    future.result(timeout=15)
                except Exception as exc:
                    if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                        raise

        def created(_: object) -> None:
            self._known_topics.add(topic)
            self._marks = MarksChannel(self)
            self.log.info("kafka connector {name} created topic {topic} for the delivered marks", name=self.name,
                          topic=topic)

        def failed(failure: Any) -> None:
            self.log.warn("kafka connector {name}: cannot create topic {topic} ({error}): redeliveries after a "
                          "partition moved to another gateway are not flagged", name=self.name, topic=topic,
                          error=failure.getErrorMessage())

        d: Deferred[None] = deferToThreadPool(self.reactor, self._pool(), create)
        d.addCallbacks(created, failed)
        return d

    def stop(self) -> Deferred[None]:
        """Close subscriptions, wait for outstanding reports (bounded), stop the threads."""
        closing = [s.close() for s in list(self._subscriptions)]

        def flush(_: object) -> Deferred[Any]:
            producer = self._producer
            if producer is None:
                self._running = False
                return succeed(None)
            drained: Deferred[Any] = self._drain(producer, STOP_TIMEOUT)

            def purge(left: int) -> Deferred[int] | None:
                self._producer = None
                self.congestion.resumeProducing()  # nobody keeps waiting for a stopped connector
                if not left:
                    return None
                # still undelivered: fail them rather than leave their senders waiting
                producer.purge()
                return self._drain(producer, 1.0)

            drained.addCallback(purge)
            drained.addCallback(lambda _: setattr(self, "_running", False))
            return drained

        d: Deferred[Any] = DeferredList(closing, consumeErrors=True)
        d.addCallback(flush)
        if self._transactional is not None:
            transactional, self._transactional = self._transactional, None
            d.addCallback(lambda _: deferToThreadPool(self.reactor, self._pool(), transactional.flush, 10))
        d.addCallback(lambda _: None)
        return d

    def health(self) -> Health:
        """:class:`IStatusReporting`: up while the producer runs (started, not stopped)."""
        if self._producer is None or not self._running:
            return Health(False, f"not started (bootstrap {self.settings.bootstrap})")
        congested = ", senders held (queue half full)" if self.congestion.congested else ""
        return Health(True, f"producing to {self.settings.bootstrap}, {self._in_flight} records in flight{congested}")

    def status(self) -> dict[str, Any]:
        """State for the admin page."""
        return {
            "connector": self.name,
            "bootstrap": self.settings.bootstrap,
            "state": "running" if self._producer is not None and self._running else "stopped",
            "in_flight": self._in_flight,
            "congested": self.congestion.congested,
            "subscriptions": len(self._subscriptions),
            "transactional": self.settings.transactional_id is not None,
            "duplicate_sends": self.send_ids.window.duplicates,
            "dedup_window_ids": len(self.send_ids.window),
        }

    # ----------------------------------------------------------- producing

    def _wake_poller(self) -> None:
        """Make sure a poll of the producer is scheduled (one per reactor turn at most)."""
        if self._poll_call is None:
            self._poll_call = self.reactor.callLater(0, self._poll_reports)

    def _poll_reports(self) -> None:
        """Reactor thread: serve the producers' delivery reports that have arrived.

        librdkafka runs a report callback only inside ``poll()``; polling here
        (not in a thread of our own) keeps the callbacks on the reactor thread
        without a thread handing them over, which would fight it for the GIL.
        While records are in flight the poll repeats: on the next reactor turn
        when it served reports (a stream is flowing), else after
        :data:`POLL_INTERVAL`.
        """
        self._poll_call = None
        served = 0
        producer = self._producer
        if producer is not None:
            served = producer.poll(0)
        for retiring in list(self._retiring):
            served += retiring.poll(0)
            if len(retiring) == 0:
                self._retiring.discard(retiring)
        if self.congestion.congested and (self._in_flight <= self._caught_up_at or producer is None):
            self.congestion.resumeProducing()
        if (self._in_flight > 0 and producer is not None) or self._retiring:
            self._poll_call = self.reactor.callLater(0 if served else POLL_INTERVAL, self._poll_reports)

    def _drain(self, producer: Any, timeout: float) -> Deferred[int]:
        """Poll ``producer`` from the reactor until it holds nothing or ``timeout``
        passed; fires with what it still holds (0 when drained)."""
        deadline = self.reactor.seconds() + timeout
        done: Deferred[int] = Deferred()

        def step() -> None:
            producer.poll(0)
            left = len(producer)
            if left == 0 or self.reactor.seconds() >= deadline:
                done.callback(left)
            else:
                self.reactor.callLater(DRAIN_INTERVAL, step)

        step()
        return done

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

    def missing_topics(self, topics: Iterable[str]) -> list[str]:
        """Those of ``topics`` the cluster did not list at start-up (or the last topic check);
        none when ``require_existing_topics`` is off (the broker may create them)."""
        if not self.settings.require_existing_topics:
            return []
        return [topic for topic in topics if topic not in self._known_topics]

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

    def produce(self, topic: str, key: bytes | None, value: bytes | None, headers: list[Header],
                settled: Settled) -> None:
        """Produce one record without a Deferred (the hot path of routing).

        ``settled(error, record)`` runs once, on the reactor thread: with
        ``(None, record)`` when Kafka acknowledged the record (``acks=all``;
        ``record`` is confluent-kafka's delivered message), else with
        ``(error, None)``; a record the producer refuses at once is settled
        before this returns.  Never flushes.
        """
        if self._producer is None:
            settled(ConnectorUnavailable(f"kafka connector {self.name} is not started"), None)
        elif topic in self._known_topics or not self.settings.require_existing_topics:
            self._produce(topic, key, value, headers, settled, False)
        else:

            def checked(_: object) -> None:
                self._produce(topic, key, value, headers, settled, False)

            self.check_topic(topic).addCallbacks(checked, lambda failure: settled(failure.value, None))

    def send_record(self, topic: str, key: bytes | None, value: bytes | None,
                    headers: Iterable[Header] = ()) -> Deferred[DeliveryReport]:
        """Produce one record; the Deferred fires with its :class:`DeliveryReport`
        on Kafka's acknowledgement (never flushes)."""
        done: Deferred[DeliveryReport] = Deferred()

        def settled(error: Exception | None, record: Any) -> None:
            if error is None:
                done.callback(DeliveryReport.of(record))
            else:
                done.errback(error)

        self.produce(topic, key, value, list(headers), settled)
        return done

    def _produce(self, topic: str, key: bytes | None, value: bytes | None, headers: list[Header],
                 settled: Settled, retried: bool) -> None:
        producer = self._producer
        if producer is None:
            settled(ConnectorUnavailable(f"kafka connector {self.name} is stopping"), None)
            return

        def report(err: Any, record: Any) -> None:
            self._in_flight -= 1
            if err is None:
                settled(None, record)
                return
            name = err.name()
            if err.fatal() or name in PRODUCER_RESET_CODES:
                self._reset_producer(producer, err.str())
            if not retried and name in RESEND_CODES:
                # the broker did not store the record, so it is safe to send it once more
                self._produce(topic, key, value, headers, settled, True)
                return
            settled(KafkaDeliveryError(f"kafka refused a record for {topic}: {err.str()}", code=name, topic=topic),
                    None)

        try:
            # positional: (topic, value, key, partition, on_delivery, callback, timestamp, headers), a
            # third cheaper than keywords (see docs/kafka.md); -1 = the partitioner, 0 = now
            producer.produce(topic, value, key, -1, report, None, 0, headers)
        except BufferError:
            settled(ConnectorUnavailable(f"kafka producer queue of {self.name} is full"), None)
            return
        except Exception as exc:
            code = exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") else ""
            settled(KafkaDeliveryError(f"kafka refused a record for {topic}: {exc}", code=code, topic=topic), None)
            return
        self._in_flight += 1
        if self._in_flight >= self._congested_at:
            self.congestion.pauseProducing()
        if self._poll_call is None:
            self._wake_poller()

    def _reset_producer(self, broken: Any, reason: str) -> None:
        """Replace a producer that cannot go on; what it still holds fails (ERROR to senders)
        or, never sent, is sent again through the new one."""
        if broken is not self._producer or not self._running:
            return
        from confluent_kafka import Producer

        self.log.warn("kafka connector {name}: replacing the producer after: {reason}", name=self.name,
                      reason=reason)
        self._producer = Producer(self.producer_config())

        def retire() -> None:
            broken.purge(in_queue=True, in_flight=False, blocking=False)  # unsent: resent by the new producer
            self._retiring.add(broken)
            self._wake_poller()

        self.reactor.callLater(0, retire)  # not from inside the broken producer's own poll()

    def topic_of(self, destination: str) -> str:
        """The topic ``destination`` maps to (DestinationError if none)."""
        return topic_for_destination(destination, self.settings.topics)

    def target_of(self, destination: str) -> str | None:
        """:class:`IDestinationAliases`: the topic, or None for a name that is none."""
        try:
            return self.topic_of(destination)
        except DestinationError:
            return None

    def names_for(self, target: str) -> tuple[str, ...]:
        """:class:`IDestinationAliases`: every name :func:`topic_for_destination` maps to ``target``."""
        table = self.settings.topics or {}
        return (f"/queue/kafka.{target}", f"/topic/kafka.{target}", f"/queue/{target}", f"/topic/{target}",
                *(name for name, topic in table.items() if topic == target))

    def send(self, message: Message) -> Deferred[DeliveryReport]:
        """Send ``message`` to the topic its destination names (key: ``key_header`` or message id);
        with an idempotency id already in the window, nothing is produced (fires with None)."""
        try:
            topic = self.topic_of(message.destination)
            key, value, headers = message_to_record(message, self.settings.key_header, self.gateway_id)
        except Exception as exc:
            return fail(exc)
        if self.send_ids.enabled and keyed([message]):
            return self.send_ids.send([(topic, message)], lambda _: self.send_record(topic, key, value, headers))
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
        if self.send_ids.enabled and keyed(messages):
            # the duplicates are left out; the rest is sent as a batch (one transaction if transactional)
            record_of = {id(m): record for m, record in zip(messages, records, strict=True)}
            return self.send_ids.send([(record[0], m) for m, record in zip(messages, records, strict=True)],
                                      lambda fresh: self.send_records([record_of[id(m)] for m in fresh]))
        return self.send_records(records)

    def _tail_keys(self, topic: str) -> Deferred[list[tuple[str, int]]]:
        """The idempotency keys in the tail of ``topic`` (``dedup_tail`` records per partition), oldest first."""
        settings = self.settings

        def read() -> list[tuple[str, int]]:
            keys: list[tuple[str, int]] = []

            def visit(record: Any) -> None:
                key = key_of_record(topic, record.headers())
                if key is not None:
                    keys.append((key, record.timestamp()[1]))

            if settings.dedup_tail:
                read_tail(settings, topic, settings.dedup_tail, visit)
            keys.sort(key=lambda entry: entry[1])
            return keys

        result: Deferred[list[tuple[str, int]]] = deferToThreadPool(self.reactor, self._pool(), read)
        return result

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
            except (KafkaException, BufferError) as exc:
                error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
                fatal = error is not None and error.fatal()
                if not fatal:
                    # Whatever failed (a record refused by produce() needs no abort by librdkafka's
                    # account), the transaction begun above is open: end it, or every later
                    # begin_transaction fails.
                    try:
                        producer.abort_transaction(30)
                    except KafkaException:
                        self.log.failure("aborting a kafka transaction failed")
                        fatal = True
                if fatal:
                    self._transactional = None
                failed: ConnectorError = (ConnectorUnavailable(f"kafka transaction failed: {exc}") if error is None
                                          else KafkaDeliveryError(f"kafka transaction failed: {error.str()}",
                                                                  code=error.name()))
                failed.in_doubt = fatal  # aborted: none of the batch is visible to read_committed readers
                raise failed from None
            return len(records)

    # ----------------------------------------------------------- consuming

    @staticmethod
    def shares_group(spec: SubscriptionSpec) -> bool:
        """Whether ``spec`` joins the queue's shared group (competing consumers)."""
        return not spec.durable_name and spec.destination.startswith("/queue/")

    def group_for(self, spec: SubscriptionSpec, topic: str) -> tuple[str, bool]:
        """The consumer group of a subscription, and whether a new group starts at the earliest offset."""
        prefix = self.settings.group_prefix
        if spec.durable_name:
            owner = f"{spec.client_id}." if spec.client_id else ""
            return f"{prefix}.{owner}{spec.durable_name}", True
        if self.shares_group(spec):
            return f"{prefix}.queue.{topic}", True
        return f"{prefix}.{self.gateway_id}.{uuid.uuid4().hex}", False

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[KafkaSubscription]:
        """Start a consumer-group member for ``spec``; fires once it has its partitions.

        A selector on a queue destination fails with SelectorError (see the module docstring).
        """
        try:
            topic = self.topic_of(spec.destination)
            matches = None
            if spec.selector and self.shares_group(spec):
                raise SelectorError(
                    f"selectors are not supported on Kafka queue {spec.destination}: its consumers share one "
                    "consumer group, which commits one offset per partition, so the records a selector skips "
                    "could not stay for the other consumers; subscribe without a selector, or filter in a "
                    f"topic or durable subscription to Kafka topic {topic!r} (each reads the topic on its own)",
                    selector=spec.selector,
                )
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
        config = self.consumer_config(group, earliest)
        subscription = KafkaSubscription(
            self.reactor,
            spec,
            consumer,
            topic=topic,
            group=group,
            consumer_factory=lambda: ConsumerProcess(config, label=f"topic {topic} (group {group})"),
            text_records=self.settings.text_records,
            matches=matches,
            poll_timeout=self.settings.poll_timeout,
            on_closed=self._subscriptions.discard,
            start_at_latest=not earliest and config.get("auto.offset.reset") == "latest",
            pause_after=self.settings.pause_after,
            marks=self._marks if spec.durable_name or self.shares_group(spec) else None,
            marks_interval=self.settings.delivered_interval,
        )
        self._subscriptions.add(subscription)
        d = subscription.start()
        d.addTimeout(self.settings.subscribe_timeout, self.reactor)

        def timed_out(failure: Any) -> Any:
            subscription.close()
            if failure.check(ConnectorError):
                return failure
            if failure.check(DeferredTimeout):
                reason = (f"none within {self.settings.subscribe_timeout:g} s (subscribe_timeout); the group may be "
                          "rebalancing or its coordinator unreachable")
            else:
                reason = failure.getErrorMessage()
            raise ConnectorUnavailable(f"kafka group {group} got no partitions of {topic}: {reason}")

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

    # ------------------------------------------------- bridges: in-doubt probe, transactions

    def why_cannot_tell(self, destination: str) -> str | None:
        """:class:`IHeldMessages`: a topic can always be read."""
        return None

    def held_message_ids(self, destination: str, tail: int) -> Deferred[set[str] | None]:
        """:class:`IHeldMessages`: the ``jms.MessageId`` headers of the newest ``tail`` committed
        records of each partition of the destination's topic."""
        try:
            topic = self.topic_of(destination)
        except DestinationError as exc:
            return fail(exc)
        return self.held_ids_in_topic(topic, tail)

    def held_ids_in_topic(self, topic: str, tail: int) -> Deferred[set[str] | None]:
        """:meth:`held_message_ids` of ``topic`` (a thread reads it, the consumer in a child process)."""
        result: Deferred[set[str] | None] = deferToThreadPool(self.reactor, self._pool(), held_record_ids,
                                                              self.settings, topic, tail)
        return result

    def same_cluster(self, other: KafkaConnector) -> bool:
        """Whether ``other`` names the same bootstrap servers."""
        return set(self.settings.bootstrap.split(",")) == set(other.settings.bootstrap.split(","))

    def transactional_target(self, destination: str) -> tuple[KafkaConnector, str, str | None, None]:
        """:class:`IExactlyOnceTarget`: (this connector, the destination's topic, the key header, no
        placement: every copy goes to that topic)."""
        return self, self.topic_of(destination), self.settings.key_header, None

    def transactional_copy(self, destination: str, target: IConnector, target_destination: str, *,
                           bridge: str, durable_name: str | None, client_id: str | None,
                           from_earliest: bool) -> Any:
        """:class:`IExactlyOnceSource`: a :class:`~gateway.connectors.kafka_transactions.KafkaTransactionalCopy`
        into ``target`` (an :class:`IExactlyOnceTarget` of the same cluster), or why not."""
        if not IExactlyOnceTarget.providedBy(target):
            return "not Kafka on both sides"
        plan = target.transactional_target(target_destination)
        if isinstance(plan, str):
            return plan
        kafka_target, target_topic, key_header, place = plan
        if not self.same_cluster(kafka_target):
            return "source and target are different Kafka clusters (offsets commit on the target's)"
        prefix = self.settings.group_prefix
        group = f"{prefix}.{client_id}.{durable_name}" if durable_name else f"{prefix}.bridge.{bridge}"
        return KafkaTransactionalCopy(
            self, kafka_target, bridge=bridge, source_destination=destination,
            source_topic=self.topic_of(destination), target_topic=target_topic, key_header=key_header,
            group=group, from_earliest=from_earliest, place=place)
