"""Every zope.interface of the gateway, with the contracts in the docstrings.

Layers talk to each other only through these interfaces: the STOMP session
knows an :class:`IConnector`, never the embedded broker or Kafka by name; a
bridge is a consumer of one connector and a producer to another.  Classes
declare them with ``@implementer`` and tests check them with ``verifyObject``.

Time-consuming operations return a Twisted ``Deferred``; none of them may
block the reactor thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from zope.interface import Attribute, Interface

if TYPE_CHECKING:  # pragma: no cover
    from gateway.message.model import Message

AckMode = Literal["auto", "client", "client-individual"]
"""STOMP acknowledgement modes; ``client`` is cumulative."""

ACK_MODES: tuple[str, ...] = ("auto", "client", "client-individual")


@dataclass(slots=True, frozen=True)
class SubscriptionSpec:
    """What a consumer asks of a connector when it subscribes.

    :ivar destination: destination name in the connector's own namespace
        (``/queue/x``, ``/topic/y``, ``/temp-queue/z``).
    :ivar selector: a JMS selector; only matching messages are delivered.
    :ivar ack_mode: how deliveries are acknowledged.
    :ivar prefetch: at most this many deliveries unacknowledged at once
        (``client`` modes) or in flight (``auto``).
    :ivar durable_name: for a topic: keep messages while the subscriber is away.
    :ivar client_id: the connection's client id; identifies durable subscriptions
        together with :attr:`durable_name`.
    :ivar owner: opaque id of the owning connection (temporary destinations
        may only be consumed by their owner).
    :ivar login: the verified login of the subscriber (None without
        authentication); a durable subscription belongs to the login that
        created it.
    :ivar strict_acks: an acknowledgement of a delivery made on a previous
        connection (or before a Kafka rebalance or seek) fails with
        :class:`~gateway.errors.StaleDelivery` instead of being ignored (the
        source redelivers that message).  Bridges ask for it, so they never take
        such a message for acknowledged; a STOMP client's ACK of an old copy
        stays harmless.
    :ivar exclusive: a queue consumer that gets every message while it is the first exclusive
        one of the queue (ActiveMQ's ``activemq.exclusive``); the next takes over when it leaves.
        Bridges ask for it (one owner per bridge); a connector without the notion ignores it,
        and the Kafka connector, whose group shares partitions instead, flags a partition it is handed
        as redelivered up to its end (docs/kafka.md).
    :ivar browser: browse the queue: a snapshot of its messages, none consumed, then an
        end-of-browse marker (ActiveMQ's ``browser:true``).
    """

    destination: str
    selector: str | None = None
    ack_mode: str = "auto"
    prefetch: int = 1000
    durable_name: str | None = None
    client_id: str | None = None
    owner: str = ""
    strict_acks: bool = False
    login: str | None = None
    exclusive: bool = False
    browser: bool = False


class IConsumer(Interface):
    """Receives deliveries from an :class:`ISubscription`."""

    def deliver(message: Message, tag: Any) -> bool | None:
        """Hand one message to the consumer.

        ``tag`` is the opaque handle the consumer passes back to
        :meth:`ISubscription.ack` / :meth:`ISubscription.nack`.  The message
        object may be shared with other consumers: do not mutate it, copy it.
        Called on the reactor thread.  A consumer that could not take the
        message (e.g. the GlassFish rule refused it) returns ``False``; a
        connector then does not acknowledge it on an ``auto`` subscription.
        """

    def subscription_failed(reason: Exception) -> None:
        """The subscription ended without the consumer asking (connector lost
        for good, destination deleted).  Called on the reactor thread."""


class ISubscription(Interface):
    """A live subscription of one consumer to one destination."""

    spec = Attribute(":class:`SubscriptionSpec` the subscription was made with.")

    def ack(tags: list[Any]) -> Any:
        """Acknowledge the deliveries named by ``tags`` (each individually).

        Returns a Deferred that fires once the acknowledgement is durable
        (the message removed from a persistent store, the offset committed).
        """

    def nack(tags: list[Any]) -> Any:
        """Reject the deliveries: redeliver them later (counting the
        redelivery) or dead-letter them once the limit is reached.
        Returns a Deferred."""

    def pause() -> None:
        """Stop delivering until :meth:`resume` (transport back-pressure)."""

    def resume() -> None:
        """Resume delivering after :meth:`pause`."""

    def close() -> Any:
        """End the subscription; unacknowledged deliveries are redelivered to
        other consumers, marked redelivered (those an open transaction holds,
        see :class:`ITransactionalAcks`, wait for it).  A durable subscription
        keeps its identity and backlog.  Returns a Deferred."""

    def unsubscribe() -> Any:
        """End the subscription and, if durable, delete it with its backlog.
        Returns a Deferred."""


class Capability(StrEnum):
    """Optional behaviour a connector may offer beyond :class:`IConnector`'s core.

    Every connector sends with receipts, subscribes, acknowledges and pauses; what
    follows depends on the target, so a connector declares what it offers in
    :attr:`IConnector.capabilities` and the connector contract tests
    (``tests/contract/``) skip, by name, what it does not.  Flow control and
    status are interfaces of their own (:class:`IFlowControlled`,
    :class:`IStatusReporting`).
    """

    NACK = "nack"
    """A NACK redelivers the message, flagged ``redelivered`` (ActiveMQ dead-letters it at once)."""
    PREFETCH = "prefetch"
    """At most :attr:`SubscriptionSpec.prefetch` deliveries are unacknowledged at once."""
    SELECTORS_ON_QUEUES = "selectors-on-queues"
    """A queue subscription may have a selector (Kafka's shared queue groups cannot)."""
    DURABLE = "durable"
    """Durable topic subscriptions keep messages while their subscriber is away."""
    DURABLE_STARTS_EMPTY = "durable-starts-empty"
    """A new durable subscription holds only what is sent after it was made, as in JMS
    (a Kafka group reads its topic from the earliest offset)."""
    REDELIVERED_AFTER_CLOSE = "redelivered-after-close"
    """What a closed subscription left unacknowledged comes again flagged ``redelivered``
    (a new Kafka group member cannot know it was delivered before)."""
    TRANSACTIONS = "transactions"
    """:meth:`IConnector.send_batch` is atomic: all messages become visible, or none."""
    RECONNECT = "reconnect"
    """The connector survives its broker going away and coming back: it reconnects, and
    live subscriptions go on (the embedded broker is in this process: nothing to reconnect)."""
    HEALTH_TRACKS_BROKER = "health-tracks-broker"
    """:meth:`IStatusReporting.health` reports down while the broker is unreachable."""
    HELD_MESSAGE_IDS = "held-message-ids"
    """The connector tells which messages it holds at a destination by the id a bridge gave
    them (the message id, or the ``_AMQ_DUPL_ID`` property the bridge also sets): the in-doubt
    probe of :mod:`gateway.bridges.probe`, through :class:`IHeldMessages`.  A JMS broker over
    STOMP answers for queues only (by browsing them); :meth:`IHeldMessages.why_cannot_tell`
    says for which destinations it cannot."""
    EXCLUSIVE_CONSUMERS = "exclusive-consumers"
    """:attr:`SubscriptionSpec.exclusive`: one consumer of a queue gets every message."""
    COMPOSITE_DESTINATIONS = "composite-destinations"
    """A SEND to ``/queue/a,/topic/b`` (ActiveMQ's comma syntax) reaches every part, settled once all have it."""
    WILDCARD_SUBSCRIPTIONS = "wildcard-subscriptions"
    """A SUBSCRIBE to ``/topic/orders.*.eu`` or ``/topic/orders.>`` (ActiveMQ's wildcards) receives what
    is published to every matching topic, each MESSAGE under its own topic's name."""
    BROWSE = "browse"
    """:attr:`SubscriptionSpec.browser`: a subscription browses a queue, then the end marker
    (a delivery whose ``browser`` property is ``end``)."""


class IImmediateAcks(ISubscription):
    """A subscription that acknowledges without a Deferred when there is nothing to wait for
    (the embedded broker's, for messages no store holds).

    The STOMP session uses :meth:`acknowledge` for an ACK outside a transaction when the
    subscription provides it: on a stream of ACKs, a Deferred per ACK costs about as much as
    the acknowledgement itself.
    """

    def acknowledge(tags: list[Any]) -> Any:
        """Acknowledge the deliveries as :meth:`ISubscription.ack` does; return None when the
        acknowledgement is complete on return (nothing left to be made durable), otherwise a
        Deferred that fires as ``ack``'s would."""


class ITransactionalAcks(Interface):
    """A subscription that keeps deliveries a client transaction acknowledged
    (the embedded broker's).  Without it, an ACK inside a transaction keeps
    its prefetch credit until COMMIT and closing the subscription redelivers it."""

    def hold(tags: list[Any]) -> None:
        """The deliveries were acknowledged (or rejected) inside an open
        transaction: they stop counting against the prefetch window, are not
        redelivered when the subscription closes, and wait for
        :meth:`ISubscription.ack` (COMMIT) or :meth:`ISubscription.nack`
        (ABORT, connection lost), which settle them even after the
        subscription closed."""


class IConnector(Interface):
    """A place messages go to and come from: the embedded broker, a JMS
    broker spoken to over STOMP, Kafka.

    Destination names passed to a connector are already mapped to its own
    namespace by the routing layer.
    """

    name = Attribute("The connector's configured name (``embedded``, ``activemq`` …).")
    capabilities = Attribute(
        "A ``frozenset`` of the :class:`Capability` values the connector offers; behaviour "
        "outside it must not be relied on (the connector contract skips its tests by name)."
    )

    def start() -> Any:
        """Connect / recover state.  Returns a Deferred that fires when the
        connector can accept sends (or fails with ConnectorError)."""

    def stop() -> Any:
        """Release resources; returns a Deferred."""

    def send(message: Message) -> Any:
        """Send one message to ``message.destination``.

        Returns a Deferred that fires only once the target has taken
        responsibility for the message: for a persistent message, once it
        is durable there (SQLite commit, Kafka delivery report, the JMS
        broker's RECEIPT).  It fails with ConnectorError otherwise.
        """

    def send_batch(messages: list[Message]) -> Any:
        """Send messages as one atomic unit (one transaction at the target):
        all of them become visible, or none.  Returns a Deferred as
        :meth:`send` does."""

    def subscribe(spec: SubscriptionSpec, consumer: IConsumer) -> Any:
        """Start delivering messages matching ``spec`` to ``consumer``.

        Returns a Deferred firing with an :class:`ISubscription`, or failing
        with ConnectorError / SelectorError / DestinationError.
        """

    def unsubscribe_durable(client_id: str, durable_name: str) -> Any:
        """Delete a durable subscription that has no active consumer.
        Returns a Deferred."""


@dataclass(slots=True, frozen=True)
class Health:
    """Whether a part of the gateway does its job, and why not (the admin endpoint's ``/health``).

    :ivar up: False when messages do not move through this part (a broker not
        connected, routing stopped, a failed bridge) until something changes.
    :ivar detail: one line for an operator.
    """

    up: bool
    detail: str


class IStatusReporting(Interface):
    """A connector that reports on itself to the admin endpoint (``/health``, ``/status``)."""

    def health() -> Health:
        """How it is now; cheap (called on every health probe)."""

    def status() -> dict[str, Any]:
        """A JSON-serialisable summary for operators."""


class IPostingConnector(IConnector):
    """A connector that can also send without a Deferred per message.

    The STOMP session uses :meth:`post` for a SEND outside a transaction when
    the connector provides it: on a stream of SENDs, a Deferred and its
    callbacks per message cost more than the send itself.
    """

    def post(message: Message, settled: Any, confirm: bool = True) -> None:
        """Send ``message`` as :meth:`IConnector.send` does, but report the outcome
        by calling ``settled(error, acknowledgement)`` exactly once, on the
        reactor thread: ``(None, ack)`` when the target took responsibility (when
        ``send``'s Deferred would fire; ``ack`` is whatever the target answered,
        e.g. Kafka's delivered record, or None), ``(exception, None)`` otherwise.
        ``settled`` may run before ``post`` returns; ``post`` itself does not
        raise for a message the target refuses.

        ``confirm=False`` says nobody waits for this one message (a SEND
        without a receipt): the connector may confirm it together with later
        ones, e.g. under one broker receipt for a burst of SENDs."""


class IFlowControlled(IConnector):
    """A connector that tells when its target does not keep up (:mod:`gateway.flow`).

    After handing it a SEND, the STOMP session pauses reading from its client
    while ``congestion.congested`` is true and reads again when
    ``congestion.when_ready`` calls back.
    """

    congestion = Attribute("the connector's :class:`gateway.flow.Congestion`")


class IDestinationFlowControlled(IConnector):
    """A connector that holds back the senders of one destination at a time (the
    embedded broker's ``full_policy = "BLOCK"``); the session waits on the
    :class:`gateway.flow.Congestion` it gives as it does on :class:`IFlowControlled`'s."""

    def congestion_for(destination: str) -> Any:
        """The :class:`gateway.flow.Congestion` of ``destination``'s senders, or None when
        sends to it are never held (asked once per destination and cached)."""


class ITransactedSubscription(ISubscription):
    """A subscription whose deliveries can be acknowledged in the same local
    transaction as sends to the same provider (:class:`ILocalTransactionSource`).

    Deliveries come in whole batches; until a batch is settled (forwarded,
    acknowledged or rejected) no further message is delivered.
    """

    def forward(messages: list[Message], tags: list[Any]) -> Any:
        """Send ``messages`` (their destinations in the target connector's namespace)
        and acknowledge the deliveries ``tags`` in one local transaction of the
        provider: after a crash both happened or neither did.  ``tags`` must name
        every delivery of the batch.  Returns a Deferred firing once committed;
        it fails with ConnectorError (the batch then comes again)."""


class ILocalTransactionSource(IConnector):
    """A connector that can consume and send in one local transaction (a JMS
    transacted session): the exactly-once path of a bridge between two
    destinations of one provider (seed 000: "sending and acknowledging the
    messages in the same local transaction")."""

    def shares_transactions_with(target: IConnector) -> bool:
        """Whether sends to ``target`` can join this connector's local transactions
        (the same provider, reached with the same account)."""

    def subscribe_transacted(spec: SubscriptionSpec, consumer: IConsumer, max_batch_time: int) -> Any:
        """As :meth:`IConnector.subscribe`, firing with an :class:`ITransactedSubscription`
        that delivers batches of at most ``spec.prefetch`` messages, a batch closed
        ``max_batch_time`` ms after its first message (``-1``: only full batches)."""


class ICredentialed(IConnector):
    """A connector that can make a copy of itself logging in as another user
    (a bridge side's own ``user`` / ``password``)."""

    def with_credentials(user: str, password: str | None) -> IConnector:
        """A new, not yet started connector like this one, logging in as ``user``."""


class IHeldMessages(IConnector):
    """A connector that can say which messages it holds at a destination: the in-doubt probe
    of ONCE_AND_ONLY_ONCE bridges (:mod:`gateway.bridges.probe`,
    :attr:`Capability.HELD_MESSAGE_IDS`).

    The ids asked about are those a bridge gave its copies: the message id, or the
    ``_AMQ_DUPL_ID`` property the bridge also sets (a broker that assigns its own message ids).
    """

    def why_cannot_tell(destination: str) -> str | None:
        """Why :meth:`held_message_ids` can never answer for ``destination``, known in advance
        (a topic of a JMS broker over STOMP): a ONCE_AND_ONLY_ONCE bridge into it is then a
        configuration error.  None when it may answer."""

    def held_message_ids(destination: str, tail: int) -> Any:
        """A Deferred firing with the ids of the messages held at ``destination`` (pending or
        delivered and not acknowledged), or None when it cannot tell.

        :param tail: for a log (Kafka): how many of the newest records of each partition
            to read; the batches in doubt are among the last a bridge wrote."""


class ITransactionalCopy(Interface):
    """Records moved from a source log to a target log, the source's positions committed in
    the same transaction as the copies (Kafka's consume-transform-produce).  Made by
    :meth:`IExactlyOnceSource.transactional_copy`; driven from ONE thread (not the reactor's):
    every method blocks."""

    open_transaction = Attribute(
        "The id of the transaction begun and not yet ended (committed, aborted, or settled by a later "
        "producer's start), None when none is open: its copies may be at the target, neither committed nor "
        "aborted.  Read from the reactor thread.")
    transactions_begun = Attribute("How many transactions the copy began (an int).")

    def open() -> bool:
        """Create what is missing (the transactional producer: fences and aborts what a crashed
        run left open; the consumer).  True when the consumer was (re)created."""

    def consume(max_count: int, timeout: float) -> list[Message]:
        """Up to ``max_count`` messages, waiting at most ``timeout`` seconds for the first;
        remembered as the batch the next :meth:`commit` commits the positions of."""

    def commit(messages: list[Message]) -> None:
        """In one transaction: send ``messages`` (their destinations ignored: the target is
        fixed) and commit the positions of everything consumed since the last commit.  Raises
        :class:`~gateway.errors.BatchRevoked` (no transaction begun, nothing sent) when the source
        took away a partition the batch holds records of; :meth:`recover` then rewinds."""

    def recover(error: Exception) -> str | None:
        """After a failed :meth:`consume` / :meth:`commit`: abort the transaction and rewind to
        the first message not committed (what must be replaced is rebuilt by :meth:`open`).
        Returns what became of the failed transaction (which one, how many copies it wrote,
        aborted or in doubt) for the log, None when none was under way."""

    def permanent(error: Exception) -> bool:
        """Whether ``error`` is about the batch itself (a record too large, not authorised):
        trying the batch again gives the same answer."""

    def close() -> None:
        """Close the consumer, flush the producer."""


class IExactlyOnceTarget(IConnector):
    """A connector whose sends can be part of a transaction of an :class:`IExactlyOnceSource`
    (Kafka, or ``[routing]`` in its place)."""

    def transactional_target(destination: str) -> Any:
        """What :meth:`IExactlyOnceSource.transactional_copy` needs to write ``destination``
        (opaque to callers), or a ``str`` saying why sends there cannot join a transaction."""


class IExactlyOnceSource(IConnector):
    """A connector that can consume and commit its consumer positions in the transaction of a
    producer: a bridge's ONCE_AND_ONLY_ONCE without a duplicate store (Kafka -> Kafka)."""

    def transactional_copy(destination: str, target: IExactlyOnceTarget, target_destination: str, *,
                           bridge: str, durable_name: str | None, client_id: str | None,
                           from_earliest: bool) -> Any:
        """An :class:`ITransactionalCopy` from ``destination`` to the target's
        ``target_destination`` for the bridge called ``bridge`` (its consumer group follows
        ``durable_name`` / ``client_id`` as a durable subscription's would; a new one starts at
        the earliest position when ``from_earliest``), or a ``str`` saying why not (another
        cluster, a destination routing decides by more than its name)."""


class ITopicLog(IConnector):
    """A connector on a log of topics (Kafka) that ``[routing]`` publishes records to
    (:mod:`gateway.routing`): records go to a topic a route names, not to a destination."""

    settings = Attribute("The connector's settings (``bootstrap``: where the cluster is, for logs).")
    congestion = Attribute("the connector's :class:`gateway.flow.Congestion`")

    def topic_of(destination: str) -> str:
        """The topic ``destination`` names (DestinationError if none)."""

    def produce(topic: str, key: bytes | None, value: bytes | None, headers: list[Any], settled: Any) -> None:
        """Produce one record; ``settled(error, record)`` runs once on the reactor thread
        (``record``: the acknowledged record, with ``topic()``, ``partition()``, ``offset()``)."""

    def send_record(topic: str, key: bytes | None, value: bytes | None, headers: list[Any]) -> Any:
        """Produce one record; a Deferred firing on the cluster's acknowledgement."""

    def send_records(records: list[Any]) -> Any:
        """Publish ``(topic, key, value, headers)`` records as one unit; a Deferred."""

    def check_topic(topic: str) -> Any:
        """A Deferred firing if ``topic`` exists (or need not), failing hard otherwise."""

    def missing_topics(topics: Any) -> list[str]:
        """Those of ``topics`` the cluster did not list at the last check."""

    def held_ids_in_topic(topic: str, tail: int) -> Any:
        """:meth:`IHeldMessages.held_message_ids` for a topic rather than a destination."""

    def health() -> Health:
        """As :meth:`IStatusReporting.health`."""

    def status() -> dict[str, Any]:
        """As :meth:`IStatusReporting.status`."""


class IDestinationAliases(Interface):
    """A connector that reaches one target under several destination names (Kafka: ``/queue/kafka.x``,
    ``/topic/kafka.x``, ``/queue/x`` and ``/topic/x`` are all topic ``x``).  Authorization asks
    for a grant on every name that reaches the target (:meth:`DestinationMap.aliases`)."""

    def target_of(destination: str) -> str | None:
        """The connector's own name of what ``destination`` reaches (a Kafka topic), or None."""

    def names_for(target: str) -> tuple[str, ...]:
        """Destination names that may reach ``target`` (the map keeps those routed here)."""


class IFrameForwarder(IPostingConnector):
    """A posting connector that can take a client's SEND frame as it is.

    For a SEND outside a transaction, without a receipt, that no transformer
    touches, the STOMP session offers the frame to :meth:`forward` before it
    builds a JMS message: a connector whose target speaks STOMP (a JMS broker)
    can map the frame's headers to its own SEND directly.
    """

    def forward(destination: str, headers: dict[str, str], body: bytes, default_persistent: bool,
                settled: Any) -> bool:
        """Send what the SEND frame with ``headers`` and ``body`` would become as a
        message to ``destination`` (the connector-side name), as
        ``post(message, settled, confirm=False)`` would.  False - and ``settled``
        is never called - when this SEND needs the message path; raises
        :class:`~gateway.errors.StompProtocolError` for a header or body the
        message path refuses, before anything is sent."""


class BridgeState(StrEnum):
    """The states of a bridge (:attr:`IBridge.state`), whatever its quality of service."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    RETRYING = "retrying"
    """A connector failed; the bridge tries again every ``failure_retry_interval``."""
    IN_DOUBT = "in_doubt"
    """A batch may or may not have reached the target, which cannot be asked now; the bridge
    consumes and sends nothing and asks again until it answers (ONCE_AND_ONLY_ONCE)."""
    FAILED = "failed"
    """Gave up (retries exhausted, an error no retry fixes); :meth:`IBridge.start` tries again."""
    STOPPED = "stopped"


class IBridge(Interface):
    """One bridge's control API (the admin endpoint, the console, ``jmsgateway bridge``).

    Every method returns a Deferred and never blocks; whatever the quality of service
    (:mod:`gateway.bridges.qos`), the states are :class:`BridgeState`'s.
    """

    name = Attribute("The bridge's configured name.")
    config = Attribute("Its :class:`~gateway.bridges.config.BridgeConfig` (``enabled``: started with the service).")
    state = Attribute("Its :class:`BridgeState`.")

    def start() -> Any:
        """Start consuming; fires once it runs (or failed / was stopped meanwhile: :attr:`state`
        says which).  Restarts a failed bridge."""

    def stop() -> Any:
        """Finish the batch in flight and stop; what was not acknowledged stays at the source."""

    def pause() -> Any:
        """Stop consuming; fires once the batch in flight is done."""

    def resume() -> Any:
        """Consume again after :meth:`pause`."""

    def status() -> dict[str, Any]:
        """What the admin endpoint shows: at least ``name``, ``state``, ``qos``, ``source``,
        ``target``, ``forwarded``, ``retries``, ``last_error``."""

    def in_doubt_resolved() -> Any:
        """Fires once the in-doubt check of the last :meth:`start` is done (at once when
        there is none): consumers of the target may take messages from then on."""


class IMessageStore(Interface):
    """Durable storage behind the embedded broker (memory or SQLite).

    The broker keeps a window of each queue in memory and pages the rest
    (docs/paging.md); the store makes the persistent ones survive a restart.  Every write returns a Deferred that
    fires once the write is durable; writes issued together may share one
    commit (group commit).  Implementations never block the reactor.
    """

    def open() -> Any:
        """Open the store and return a Deferred firing with a
        :class:`gateway.broker.store.Snapshot` of what it holds (for recovery):
        every message, or each queue's count and a reader of them in dispatch
        order (``Snapshot.backlogs`` and ``Snapshot.backlog``, lazy recovery).
        Fails with StoreError naming the file if it cannot be read."""

    def close() -> Any:
        """Flush and close; returns a Deferred."""

    def add(queue: str, message: Message) -> Any:
        """Persist ``message`` on the queue (or durable subscription) key ``queue``."""

    def add_batch(entries: list[tuple[str, Message]]) -> Any:
        """Persist several (queue key, message) pairs in one transaction:
        after a crash either all of them are there or none.  The same message
        object under several keys (a topic's fan-out to its durable
        subscriptions) may be stored once; each key still has its own entry
        (removed, counted and recovered on its own)."""

    def remove(queue: str, message_id: str) -> Any:
        """Delete an acknowledged message from ``queue``."""

    def set_redelivery(queue: str, message_id: str, count: int) -> Any:
        """Record a new redelivery count for a stored message."""

    def add_durable(key: str, destination: str, selector: str | None, owner: str | None = None) -> Any:
        """Record a durable topic subscription (its identity and owning login survive restarts)."""

    def remove_durable(key: str) -> Any:
        """Forget a durable subscription and its backlog."""


class IGroupedWrites(Interface):
    """A message store that takes many small writes as one (the persistent SENDs of a reactor turn,
    the removals of the messages it auto-acknowledged).

    The broker's hot paths use it when its store provides it (else :meth:`IMessageStore.add_batch`
    and :meth:`IMessageStore.remove`, a Deferred each).
    """

    def add_then(entries: list[tuple[str, Message]], done: Any) -> None:
        """:meth:`IMessageStore.add_batch` without a Deferred: ``done(None)`` once the entries are
        durable, ``done(error)`` when they could not be written (on the reactor thread; at once
        for entries that cannot be stored at all).  Adds handed over together may share one
        operation, but each keeps its own outcome (one that fails fails alone) and the order
        they were issued in, among themselves and with every other write of the store."""

    def remove_then(queue: str, message_id: str, done: Any) -> None:
        """:meth:`IMessageStore.remove` without a Deferred, reporting like :meth:`add_then`;
        removals handed over together may share one operation."""


Permission = Literal["read", "write", "admin"]
"""What a user may do on a destination: ``read`` (SUBSCRIBE, browse), ``write``
(SEND), ``admin`` (create temporary/durable, purge, the console's actions)."""


class IAuthorizer(Interface):
    """Per-destination permissions (ActiveMQ's authorization entries,
    RabbitMQ's configure/write/read patterns).

    Whoever refuses something for want of a permission asks :meth:`check`
    (the STOMP session before every SEND and SUBSCRIBE, the admin console
    before every action), so each refusal is logged and counted once, in one
    place, whichever side refused it; :meth:`permits` is the bare question
    for callers that refuse nothing.  Both are fast and do no I/O: they are
    called on the reactor thread.
    """

    enabled = Attribute("Whether any rule restricts access (False: :meth:`permits` is always True, so a "
                        "listener may skip asking).")

    def permits(login: str | None, permission: Permission, destination: str) -> bool:
        """Whether ``login`` (None: anonymous) holds ``permission`` on
        ``destination`` (a STOMP-side name such as ``/queue/orders``).
        Nothing is logged or counted."""

    def check(login: str | None, permission: Permission, destination: str, origin: str = "") -> bool:
        """:meth:`permits`, for a caller that refuses the request when the
        answer is False: the refusal is logged (naming ``origin``, the
        client's address or ``the admin console``) and counted
        (``jmsgateway_authorization_denied_total{permission}``) here, so the
        caller must not log or count it as an authorization refusal again."""


class ICertificateIdentity(Interface):
    """``twisted.cred`` credentials of a client that proved a certificate on an ``mtls:`` listener."""

    common_name = Attribute("The subject CN of the verified client certificate.")
    login = Attribute("The login the CONNECT named, or None (the certificate's user is meant).")


class IStompUser(Interface):
    """The avatar a STOMP login asks the ``twisted.cred`` portal for."""

    login = Attribute("The authenticated login name, or None when anonymous.")


class ITransformContext(Interface):
    """What a transformer knows about the message it is given."""

    direction = Attribute("``inbound`` (STOMP → target) or ``outbound`` (target → STOMP).")
    source = Attribute("Source destination name.")
    target = Attribute("Target destination name.")
    login = Attribute("The STOMP connection's login, or None.")
    options = Attribute("This transformer's own configuration (a dict).")
    transformation = Attribute(
        "The STOMP ``transformation`` header of the SEND (inbound) or SUBSCRIBE "
        "(outbound) that selected a named transformer, or None."
    )


class IMessageTransformer(Interface):
    """Changes messages between STOMP and a target (the GlassFish
    MessageTransformer idea).

    :meth:`transform` returns the message to pass on (the same one changed,
    or a new one of another type), or a decision to drop or branch it
    (see :mod:`gateway.transform`), or a Deferred of any of those.
    Raising fails the message according to the chain's failure policy.
    """

    name = Attribute("Unique name of the transformer, used in config and logs.")

    def transform(message: Message, context: ITransformContext) -> Any:
        """Return the transformed message, a Drop/Branch decision, or a Deferred."""


class IConfigurableTransformer(IMessageTransformer):
    """A transformer that checks its options once, at startup.

    The transform chains call :meth:`check_options` for every
    ``[[transform.chain]]`` entry (and ``[transform.options]`` default) that
    names the transformer, so a bad option stops the gateway with a message
    naming the config key instead of failing every message later.
    """

    def check_options(options: dict[str, Any]) -> None:
        """Raise ``ValueError`` (or ConfigError) saying what is wrong with ``options``."""
