"""The embedded broker: the gateway's default connector (``embedded``).

It owns the destinations: ``/queue/…`` (point to point, kept while nobody
listens, competing consumers served in turn), ``/topic/…`` (fan-out to the
current subscribers and to durable subscriptions, which keep messages while
their subscriber is away) and the temporary destinations
(``/remote-temp-queue/…``, ``/remote-temp-topic/…``) that sessions create for
``/temp-queue/`` names.  Unacknowledged deliveries of a consumer that leaves
are redelivered marked ``redelivered``; after ``max_redeliveries`` a message
goes to the dead-letter queue.  Expired messages are never delivered.

Persistent messages (to queues and durable subscriptions) are written to the
:class:`IMessageStore` before the send's Deferred fires and before anyone can
consume them; the broker recovers them from the store at start.

Memory is bounded (docs/paging.md): queues hold what fits within
``memory_limit`` and their destination's ``max_size`` and page the rest out
(:mod:`gateway.broker.paging.page_file`); a destination whose ``full_policy`` is BLOCK,
FAIL or DROP holds back its senders, refuses or discards instead
(:mod:`gateway.broker.limits`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from zope.interface import implementer

from gateway.broker.browse import QueueBrowser
from gateway.broker.composite import expand, is_composite
from gateway.broker.idempotency import IdempotentSends, has_send_id
from gateway.broker.limits import (
    BLOCK,
    DROP,
    FAIL,
    MESSAGE_OVERHEAD,
    PAGE,
    DestinationPolicies,
    DestinationPolicy,
    MemoryUsage,
    default_memory_limit,
    message_size,
)
from gateway.broker.paging.page_file import PageFile, StoredTail
from gateway.broker.publication import Publication, PublicationOrder
from gateway.broker.queue import MessageQueue, Predicate, QueueSubscription
from gateway.broker.scheduler import MemorySchedule, Scheduler, ScheduleStore, is_scheduled
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.memory_store import MemoryStore
from gateway.broker.store.snapshot import (
    DURABLE_PREFIX,
    BacklogRow,
    DurableRecord,
    Snapshot,
    StoredBacklog,
    durable_key,
)
from gateway.broker.store.sqlite_records import decode_message
from gateway.broker.virtual_topics import VirtualTopicNames, VirtualTopics, queue_of_record, record_key
from gateway.broker.wildcards import WildcardTopics, is_wildcard
from gateway.deferreds import gather
from gateway.errors import ConnectorError, DestinationError, DestinationFull, GatewayError, NotOwner, StoreError
from gateway.flow import Congestion
from gateway.interfaces import (
    Capability,
    Health,
    IConsumer,
    IDestinationFlowControlled,
    IHeldMessages,
    IMessageStore,
    IPostingConnector,
    IStatusReporting,
    ISubscription,
    SubscriptionSpec,
)
from gateway.message.model import Message

Settled = Callable[[Exception | None, Any], None]
"""How :meth:`EmbeddedBroker.post` reports a send: ``(error, None)``."""

REMOVALS_HELD = 20_000
"""Removals of consumed persistent messages waiting for the store's writer thread past which
deliveries of stored queues wait (until half as many wait): a consumer that drains a deep
backlog faster than the disk deletes it must not pile up removals in memory without bound
(each waiting removal is a few hundred bytes; ~300 MB for a 300,000-message backlog before)."""

QUEUE_PREFIXES = ("/queue/", "/remote-temp-queue/")
TOPIC_PREFIXES = ("/topic/", "/remote-temp-topic/")
TEMP_PREFIXES = ("/remote-temp-queue/", "/remote-temp-topic/")


def destination_kind(destination: str) -> str:
    """``queue`` or ``topic``; :class:`DestinationError` for anything else."""
    if destination.startswith(QUEUE_PREFIXES) and len(destination) > destination.index("/", 1) + 1:
        return "queue"
    if destination.startswith(TOPIC_PREFIXES) and len(destination) > destination.index("/", 1) + 1:
        return "topic"
    raise DestinationError(
        f"unknown destination {destination!r}: the embedded broker takes /queue/<name>, /topic/<name>, "
        "/temp-queue/<name> or /temp-topic/<name>"
    )


class Tally:
    """A counter the hot path bumps with a plain integer add."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self, amount: int = 1) -> None:
        self.count += amount


class BrokerMetrics:
    """Counters of the embedded broker, exposed through an injectable registry.

    The hot path adds to plain integers; prometheus_client reads them when it
    is scraped (a custom collector), so counting costs no lock or label lookup.
    """

    _COUNTERS = {
        "enqueued": "Messages accepted by the embedded broker",
        "consumed": "Messages acknowledged at the embedded broker",
        "redelivered": "Deliveries returned for redelivery",
        "dead_lettered": "Messages moved to a dead-letter queue",
        "expired": "Expired messages dropped undelivered",
        "dropped": "Messages discarded because their destination was full (full_policy DROP)",
        "refused_full": "Sends refused because their destination was full (full_policy FAIL)",
        "paged_out": "Messages written to the page file because memory was full",
    }

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry = registry or CollectorRegistry()
        self.enqueued = Tally()
        self.consumed = Tally()
        self.redelivered = Tally()
        self.dead_lettered = Tally()
        self.expired = Tally()
        self.dropped = Tally()
        self.refused_full = Tally()
        self.paged_out = Tally()
        self.gauges: Callable[[], Iterator[Metric]] | None = None
        """The broker's memory and paging gauges, read at each scrape."""
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        for name, documentation in self._COUNTERS.items():
            family = CounterMetricFamily(f"jmsgateway_broker_{name}", documentation)
            family.add_metric([], getattr(self, name).count)
            yield family
        if self.gauges is not None:
            yield from self.gauges()


@implementer(IPostingConnector, IStatusReporting, IDestinationFlowControlled, IHeldMessages)
class EmbeddedBroker:
    """Queues, topics and durable subscriptions in this process (IPostingConnector).

    :param page_path: the page file (queues past their memory limit page out
        there); None keeps pages in SQLite's memory (tests).
    """

    log = Logger()
    name = "embedded"
    capabilities = frozenset(Capability) - {Capability.RECONNECT, Capability.HEALTH_TRACKS_BROKER}
    """Everything but reconnecting: the broker lives in this process (a restart recovers the store)."""

    def __init__(
        self,
        clock: IReactorTime,
        settings: BrokerSettings | None = None,
        store: IMessageStore | None = None,
        registry: CollectorRegistry | None = None,
        page_path: str | None = None,
        schedule: ScheduleStore | None = None,
    ) -> None:
        self.clock = clock
        self.settings = settings or BrokerSettings()
        self.store: IMessageStore = store or MemoryStore()
        self.scheduler = Scheduler(clock, schedule or MemorySchedule(), self._send_occurrence, self.now_ms)
        """Messages sent with AMQ_SCHEDULED_* until they are due (:mod:`gateway.broker.scheduler`)."""
        self.metrics = BrokerMetrics(registry)
        self.metrics.gauges = self._gauges
        limit = self.settings.memory_limit
        self.memory = MemoryUsage(default_memory_limit() if limit is None else limit)  # (0: no limit)
        self.memory.on_release = self._room_made
        self.policies = DestinationPolicies(self.settings.destinations)
        self.virtual = VirtualTopics(VirtualTopicNames(self.settings.virtual_topic_prefix,
                                                       self.settings.virtual_topic_consumer_prefix))
        """The consumer queues of each virtual topic (:mod:`gateway.broker.virtual_topics`)."""
        self._pages = PageFile(page_path, getattr(clock, "callLater", None), min_free=self.settings.min_free)
        self._congestions: dict[str, Congestion] = {}
        """Senders of each BLOCK destination (asked for by the sessions)."""
        self._blocked: set[str] = set()
        """BLOCK destinations whose senders are held until room is made."""
        self._full: set[str] = set()
        """Destinations reported full (logged once per episode)."""
        self._store_congestion = Congestion("embedded broker message store")
        """The senders of every destination but the BLOCK ones, held while the store is behind."""
        self._writing = 0
        """Counted bytes of the messages waiting for the store to write them."""
        self._write_hold = max(1024 * 1024, min(self.memory.limit // 4, 32 * 1024 * 1024))
        """Past this many bytes waiting for the store, senders are held (until half of it)."""
        self._store_held = False
        self._removing = 0
        """Store removals of consumed messages not yet committed."""
        self.removals_held = False
        """Past :data:`REMOVALS_HELD` removals waiting: deliveries of stored queues wait."""
        self.queues: dict[str, MessageQueue] = {}
        self.topics: dict[str, list[MessageQueue]] = {}
        self.wildcards = WildcardTopics()
        """Which names in :attr:`topics` are wildcard patterns."""
        self.durables: dict[str, MessageQueue] = {}
        self.durable_owners: dict[str, str | None] = {}
        """Durable subscription key -> the login that created it (None: created without a login)."""
        self._expiry = LoopingCall(self.purge_expired)
        self._expiry.clock = clock
        self._persist_all = not isinstance(self.store, MemoryStore)
        self._bookkeeping = True
        self._subscribing: set[str] = set()
        """Keys of durable subscriptions whose first SUBSCRIBE waits for its record."""
        self._publishing = PublicationOrder()
        self._arriving = 0
        """Counted bytes of the messages admitted and not yet in their queues (waiting for the
        store or for earlier messages): they count against the limits as if they were there."""
        self.idempotency = IdempotentSends(clock, self.settings.dedup_window, self.settings.dedup_window_seconds,
                                           parts=expand, registry=self.metrics.registry)  # (issue 35: x-dedup-id)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Open the store and recover its queues and durable subscriptions."""
        self._pages.discard_stale()
        d: Deferred[Snapshot] = self.store.open()

        def recovered(snapshot: Snapshot) -> Deferred[Any]:
            moved = self.recover(snapshot)
            self._expiry.start(self.settings.expiry_check_interval_ms / 1000.0, now=False)
            return gather([moved, self.scheduler.open()])

        return d.addCallback(recovered).addCallback(lambda _: None)

    def stop(self) -> Deferred[None]:
        if self._expiry.running:
            self._expiry.stop()
        # From here on the store holds what a crash would have left, which is
        # what recovery expects: deliveries returned by connections closing
        # after this point are not written (sends and ACKs still fail).
        self._bookkeeping = False
        scheduled = self.scheduler.close()
        result: Deferred[None] = self.store.close()
        self._pages.close()
        return gather([scheduled, result]).addCallback(lambda _: None)

    def recover(self, snapshot: Snapshot) -> Deferred[Any]:
        """Rebuild state from a store snapshot; fires when recovery's own writes are stored.

        A stored message's redelivery count includes a delivery that was
        under way when the broker stopped (see :meth:`delivered`); one past
        ``max_redeliveries`` goes to the dead-letter queue, as it would have
        on a NACK.
        """
        for record in snapshot.durables:
            consumer_queue = queue_of_record(record.key)
            if consumer_queue is not None:  # (a virtual topic's consumer queue: it exists without messages)
                self.virtual.add(consumer_queue)
                self._queue(consumer_queue)
                continue
            self._make_durable(record.key, record.destination, record.selector)
            self.durable_owners[record.key] = record.owner
        limit = self.settings.max_redeliveries
        moves: list[Deferred[None]] = []
        for key, message in snapshot.messages:
            queue = self.durables.get(key) if key.startswith("durable:") else self._queue(key)
            if queue is None:
                self.log.warn("dropping stored message {id} of unknown durable subscription {key}",
                              id=message.message_id, key=key)
                continue
            if message.redelivery_count > limit and not queue.name.startswith(self.settings.dead_letter_prefix):
                reason = f"delivery failed {message.redelivery_count} times (limit {limit})"
                moves.append(self._dead_letter(queue, message, reason))
                continue
            queue.enqueue(message)
        if snapshot.expired:
            self.metrics.expired.inc(snapshot.expired)
        self.idempotency.recover(snapshot.send_ids)  # (issue 35)
        backlog = snapshot.backlog
        if backlog is not None:
            self._recover_backlogs(snapshot.backlogs, backlog)
            moves.extend(self._dead_letter_recovered(snapshot.redelivered))
        self._recovered(len(snapshot.messages) + snapshot.stored, snapshot)
        return gather(moves)

    def _recovered(self, messages: int, snapshot: Snapshot) -> None:
        paged = sum(queue.paged for queue in [*self.queues.values(), *self.durables.values()])
        self.log.info(
            "embedded broker recovered {messages} messages ({paged} left in the store until consumers reach them), "
            "{durables} durable subscriptions, purged {expired}",
            messages=messages, paged=paged, durables=len(self.durables), expired=snapshot.expired,
        )

    def _recover_backlogs(self, backlogs: dict[str, tuple[int, int]], backlog: StoredBacklog) -> None:
        """Lazy recovery: each queue learns how many stored messages it has and reads them
        from the store, in order, as its consumers reach them (none is read now, so a
        restart takes the same time whatever the backlog)."""
        for key, (count, size) in backlogs.items():
            queue = self.durables.get(key) if key.startswith(DURABLE_PREFIX) else self._queue(key)
            if queue is None:
                self.log.warn("ignoring {count} stored messages of unknown durable subscription {key}",
                              count=count, key=key)
                continue
            queue.attach_backlog(StoredTail(backlog, key, count, size), backlog.last_seq)

    def _dead_letter_recovered(self, redelivered: list[tuple[str, BacklogRow]]) -> list[Deferred[None]]:
        """Lazy recovery: the stored messages whose redelivery count passed ``max_redeliveries``
        (a delivery was under way at the crash) leave their backlog for the dead-letter queue,
        as they would have at a NACK (the store finds them by an index, the rest is not read)."""
        limit = self.settings.max_redeliveries
        moves = []
        for key, row in redelivered:
            rank, seq, message_id, expiration, size, redelivery, record = row
            queue = self.durables.get(key) if key.startswith(DURABLE_PREFIX) else self.queues.get(key)
            if redelivery <= limit or queue is None or queue.name.startswith(self.settings.dead_letter_prefix):
                continue
            if queue.page is None or queue.page.tail is None:
                continue
            try:
                message = decode_message(record)
            except ValueError as error:
                raise StoreError(f"message store: stored message {seq} on {key} cannot be read ({error})") from None
            message.redelivery_count = redelivery
            message.redelivered = True
            queue.page.take_stored([(rank, seq, message_id, expiration, size + MESSAGE_OVERHEAD, redelivery, record)])
            reason = f"delivery failed {redelivery} times (limit {limit})"
            moves.append(self._dead_letter(queue, message, reason))
        return moves

    # -- QueueOwner --------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def page_file(self) -> PageFile:
        return self._pages

    def policy(self, destination: str) -> DestinationPolicy:
        return self.policies.for_destination(destination)

    def paging(self, queue: MessageQueue, started: bool) -> None:
        if started:
            self.metrics.paged_out.inc()
            self.log.warn(
                "{queue} reached its memory limit ({limit}): paging its messages out to {path}",
                queue=queue.key, path=self._pages.path or "memory",
                # (the limit that left the less room is the one reached)
                limit=f"max_size {queue.max_size} bytes"
                if queue.max_size and queue.max_size - queue.memory <= self.memory.limit - self.memory.used
                else f"memory_limit {self.memory.limit} bytes",
            )
        else:
            self.log.info("{queue} read its last paged message back: no longer paging", queue=queue.key)

    def consumed(self, queue: MessageQueue, message: Message) -> Deferred[None] | None:
        self.metrics.consumed.count += 1
        if message.persistent and self._stored(queue):
            result: Deferred[None] = self.store.remove(queue.key, message.message_id)
            self._removing += 1
            if self._removing > REMOVALS_HELD and not self.removals_held:
                self.removals_held = True
                self.log.debug("{count} removals wait for the message store: deliveries wait",
                               count=self._removing)
            result.addBoth(self._removed)
            return result
        return None

    def _removed(self, result: object) -> object:
        self._removing -= 1
        if self.removals_held and self._removing <= REMOVALS_HELD // 2:
            self.removals_held = False
            for queue in [*self.queues.values(), *self.durables.values()]:
                queue.dispatch()
        return result

    def holds_deliveries(self, queue: MessageQueue) -> bool:
        return self._stored(queue)

    def replaced(self, queue: MessageQueue, message: Message) -> None:
        self.log.debug("{queue}: message {id} replaced by a newer one with its last-value key", queue=queue.name,
                       id=message.message_id)
        self._unstore(queue, message)

    def expired(self, queue: MessageQueue, message: Message) -> None:
        self.metrics.expired.inc()
        queue.expired_count += 1
        self.log.debug("message {id} expired in {queue}", id=message.message_id, queue=queue.name)
        self._unstore(queue, message)

    def _unstore(self, queue: MessageQueue, message: Message) -> None:
        """Remove ``message``, taken out of ``queue`` unseen (expired, replaced), from the store; not
        waited for, nothing written once the broker stopped."""
        if self._bookkeeping and message.persistent and self._stored(queue):
            self.store.remove(queue.key, message.message_id).addErrback(self._store_failed)

    def delivered(self, queue: MessageQueue, message: Message) -> None:
        """Record durably that a stored message is out for acknowledgement.

        The store keeps the count the message will have if this delivery is
        not acknowledged, so after a crash it comes back ``redelivered`` with
        its count raised (the write is not waited for: a crash before it
        commits redelivers the message without the flag).
        """
        if self._bookkeeping and message.persistent and self._stored(queue):
            self.store.set_redelivery(queue.key, message.message_id, message.redelivery_count + 1).addErrback(
                self._store_failed
            )

    def redelivering(self, queue: MessageQueue, message: Message) -> bool:
        self.metrics.redelivered.inc()
        limit = self.settings.max_redeliveries
        if (
            self._bookkeeping
            and message.redelivery_count > limit
            and not queue.name.startswith(self.settings.dead_letter_prefix)
        ):
            self._dead_letter(queue, message, f"delivery failed {message.redelivery_count} times (limit {limit})")
            return False
        if self._bookkeeping and message.persistent and self._stored(queue):
            self.store.set_redelivery(queue.key, message.message_id, message.redelivery_count).addErrback(
                self._store_failed
            )
        return True

    def subscription_closed(
        self, queue: MessageQueue, subscription: QueueSubscription, delete: bool
    ) -> Deferred[None] | None:
        if queue.durable:
            # An UNSUBSCRIBE's receipt waits until the deletion is stored.
            return self._drop_durable(queue.key) if delete else None
        if queue.name.startswith(TOPIC_PREFIXES):
            subscribers = self.topics.get(queue.name, [])
            if queue in subscribers:
                subscribers.remove(queue)
            if not subscribers:
                self.wildcards.discard(queue.name)
            queue.discard()  # (a topic subscriber's backlog ends with it: its memory and pages go)
        return None

    # -- IConnector --------------------------------------------------------

    def send(self, message: Message) -> Deferred[None]:
        pending = self._send(message)
        return succeed(None) if pending is None else pending

    def _send_occurrence(self, message: Message) -> Deferred[None]:
        """A scheduled message's occurrence: not checked against the idempotency keys (its repeats
        carry the key its SEND had)."""
        pending = self._send(message, False)
        return succeed(None) if pending is None else pending

    def post(self, message: Message, settled: Settled, confirm: bool = True) -> None:
        """:class:`IPostingConnector`: :meth:`send` reporting through ``settled(error, None)``;
        a message that needs no store write (or is refused at once) makes no Deferred.
        ``confirm`` changes nothing: every send is settled on its own."""
        pending = self._send(message)
        if pending is None:
            settled(None, None)
        else:
            pending.addCallbacks(lambda _: settled(None, None), lambda failure: settled(failure.value, None))

    def _send(self, message: Message, deduplicate: bool = True) -> Deferred[None] | None:
        """Take ``message``: None when it is settled already (enqueued, expired, dropped);
        a Deferred when it waits for the store or is refused."""
        if deduplicate and has_send_id(message):  # (issue 35: a resend with a stored x-dedup-id is settled)
            return self.idempotency.send([message], lambda fresh: self._send(fresh[0], False))
        if is_scheduled(message):  # (AMQ_SCHEDULED_*: held until due, gateway/broker/scheduler.py)
            return self.scheduler.schedule(message)
        if is_composite(message.destination):  # (one copy per part, stored as one batch: one receipt)
            return self.send_batch([message], deduplicate=False)
        try:
            targets = self._targets(message)
        except GatewayError as error:
            return fail(error)
        if targets and (self.policies or self.memory.full):
            refusal = self._admit(message, targets)
            if refusal is not None:
                return refusal
        if (message.persistent and self._persist_all) or self._publishing.busy(message.destination):
            return self._store_then_enqueue([(message, targets)])
        if message.expiration and message.is_expired(self.now_ms()):
            self.metrics.expired.inc()
            return None
        self.metrics.enqueued.count += 1
        if len(targets) == 1:
            targets[0].enqueue(message)
        elif targets:
            size = message_size(message)
            for queue in targets:
                queue.enqueue(message, size)
        return None

    def send_batch(self, messages: list[Message], deduplicate: bool = True) -> Deferred[None]:
        """Store the persistent ones in one transaction, then make all visible (scheduled ones
        are recorded as jobs once the others are in).  ``deduplicate``: messages whose
        idempotency key was stored are left out (False: a dead letter sent back)."""
        if deduplicate and any(map(has_send_id, messages)):  # (issue 35)
            sent = self.idempotency.send(messages, lambda fresh: self.send_batch(fresh, False))
            return succeed(None) if sent is None else sent
        later = [message for message in messages if is_scheduled(message)]
        if later:
            now = [message for message in messages if not is_scheduled(message)]
            sent = self.send_batch(now, False) if now else succeed(None)
            return sent.addCallback(lambda _: gather([self.scheduler.schedule(m) for m in later])).addCallback(
                lambda _: None)
        try:
            plan = [(part, self._targets(part)) for message in messages for part in expand(message)]
        except GatewayError as error:
            return fail(error)
        if self.policies or self.memory.full:
            admitted = []
            batch: dict[MessageQueue | None, int] = {}
            for message, targets in plan:
                refusal = self._admit(message, targets, batch) if targets else None
                if refusal is None:
                    admitted.append((message, targets))
                elif refusal.called and getattr(refusal, "result", None) is not None:
                    return refusal  # FAIL: the whole transaction is refused, nothing stored
            plan = admitted
        return self._store_then_enqueue(plan)

    # -- memory limits -----------------------------------------------------

    def _over(self, queue: MessageQueue, size: int, batch: dict[MessageQueue | None, int] | None = None) -> bool:
        """Whether ``size`` more bytes (after those of ``batch``, admitted earlier in the same
        transaction) would pass ``queue``'s ``max_size`` (counting what it paged out) or the
        broker's ``memory_limit``."""
        return self._over_own(queue, size, batch) or \
            self.memory.used + self._arriving + size + (batch.get(None, 0) if batch else 0) > self.memory.limit

    @staticmethod
    def _over_own(queue: MessageQueue, size: int, batch: dict[MessageQueue | None, int] | None) -> bool:
        """Whether ``queue`` would pass its ``max_size``: what it holds (in memory and paged out),
        what is on the way to it (:attr:`MessageQueue.arriving`: in flight to the store), ``size``."""
        if not queue.max_size:
            return False
        return (queue.memory + queue.paged_size + queue.arriving + size + (batch.get(queue, 0) if batch else 0)
                > queue.max_size)

    def _admit(
        self, message: Message, targets: list[MessageQueue], batch: dict[MessageQueue | None, int] | None = None
    ) -> Deferred[None] | None:
        """None when ``message`` may go on (PAGE, or room, or BLOCK: taken, senders held);
        a Deferred to answer the send with when its destination's policy is FAIL, or DROP
        and every target is full.  DROP removes the full targets from ``targets`` (a topic's
        subscribers are judged each on its own backlog).
        ``batch`` counts what a transaction admitted before this message."""
        destination = message.destination
        size = 0
        dropped = False
        for queue in list(targets):
            policy = queue.policy
            if policy.full_policy == PAGE:
                continue
            size = size or message_size(message)
            if not self._over(queue, size, batch):
                if batch is not None:
                    batch[queue] = batch.get(queue, 0) + size
                    batch[None] = batch.get(None, 0) + size
                continue
            if self._over_own(queue, size, batch):
                limit = f"max_size {queue.max_size} bytes"
            else:
                limit = f"memory_limit {self.memory.limit} bytes"
                self.memory.reached()
            self._report_full(destination, policy, limit)
            if policy.full_policy == BLOCK:
                self._block(destination)
                return None
            if policy.full_policy == DROP:
                # (only this backlog's copy: a topic's other subscribers still get it)
                self.metrics.dropped.inc()
                targets.remove(queue)
                dropped = True
                continue
            self.metrics.refused_full.inc()
            return fail(DestinationFull(
                f"{destination} is full: its queued messages reached {limit} (full_policy FAIL); "
                "the message was not stored"
            ))
        if dropped:
            return None if targets else succeed(None)
        if destination in self._full:
            self._full.discard(destination)
            self.log.info("{destination} has room again: sends are accepted", destination=destination)
        return None

    def _report_full(self, destination: str, policy: DestinationPolicy, limit: str) -> None:
        if destination in self._full:
            return
        self._full.add(destination)
        action = {BLOCK: "its senders are held until consumers make room", FAIL: "sends are refused",
                  DROP: "sends are discarded"}[policy.full_policy]
        self.log.warn("{destination} reached its {limit}: {action} (full_policy {policy})",
                      destination=destination, limit=limit, action=action, policy=policy.full_policy)

    def congestion_for(self, destination: str) -> Congestion | None:
        """:class:`IDestinationFlowControlled`: the senders of ``destination``: its own for a BLOCK
        destination, else the senders of every destination (held while the store is behind)."""
        if self.policy(destination).full_policy != BLOCK:
            return self._store_congestion
        congestion = self._congestions.get(destination)
        if congestion is None:
            congestion = self._congestions[destination] = Congestion(f"embedded broker destination {destination}")
            if self._store_held:
                congestion.pauseProducing()
        return congestion

    def _block(self, destination: str) -> None:
        congestion = self.congestion_for(destination)
        if congestion is None:
            return
        congestion.pauseProducing()
        self._blocked.add(destination)
        self.memory.waiting = True

    def _room_made(self) -> None:
        """Memory was freed while BLOCK destinations wait: release those with room now."""
        for destination in list(self._blocked):
            try:
                targets = [self._queue(destination)] if destination_kind(destination) == "queue" \
                    else self.topics.get(destination, [])
            except GatewayError:
                targets = []
            if any(self._over(queue, 0) for queue in targets):
                continue
            self._blocked.discard(destination)
            self._full.discard(destination)
            self.log.info("{destination} has room again: its senders are released", destination=destination)
            congestion = self._congestions.get(destination)
            if congestion is not None and not self._store_held:
                congestion.resumeProducing()
        self.memory.waiting = bool(self._blocked)

    def _store_then_enqueue(self, plan: list[tuple[Message, list[MessageQueue]]]) -> Deferred[None]:
        """Write the persistent messages of ``plan`` (one transaction), then make all visible.

        Messages to a destination become visible in the order they were sent:
        one that needs no write still waits behind earlier ones being written
        (:class:`PublicationOrder`)."""
        entries = [
            (queue.key, message)
            for message, targets in plan
            if message.persistent
            for queue in targets
            if self._stored(queue)
        ]
        order = self._publishing
        if not entries and not any(order.busy(message.destination) for message, _ in plan):
            self._enqueue(plan)
            return succeed(None)
        waiting = []
        for message, targets in plan:
            if entries or order.busy(message.destination):
                show = self._shower(message, targets)
                waiting.append((message.destination, order.wait(message.destination, show)))
            else:
                self._enqueue([(message, targets)])

        def settle(stored: bool) -> None:
            for destination, publication in waiting:
                order.settle(destination, publication, stored)

        if not entries:
            settle(True)
            shown = self._when_shown(waiting)
            return succeed(None) if shown is None else shown
        size = sum(message_size(message) for message, _ in plan)
        self._writing_started(size)
        written: Deferred[None] = self.store.add_batch(entries)

        def stored(_: object) -> Deferred[None] | None:
            self._writing_ended(size)
            settle(True)
            return self._when_shown(waiting)  # (the send is done once its messages are in their queues)

        def failed(failure: Any) -> Any:
            self._writing_ended(size)
            settle(False)
            return failure

        return written.addCallbacks(stored, failed)

    @staticmethod
    def _when_shown(waiting: list[tuple[str, Publication]]) -> Deferred[None] | None:
        """None when every publication of ``waiting`` is in its queues; else a Deferred fired once
        they are (they wait behind earlier messages to their destinations, still being written)."""
        late = [publication for _, publication in waiting if not publication.shown]
        if not late:
            return None
        shown: Deferred[None] = Deferred()
        left = [len(late)]

        def one_shown() -> None:
            left[0] -= 1
            if not left[0]:
                shown.callback(None)

        for publication in late:
            publication.then = one_shown
        return shown

    def _writing_started(self, size: int) -> None:
        """``size`` bytes of messages wait for the store: past :attr:`_write_hold`, senders are held
        (a pipelined sender of persistent messages must not outrun the disk without bound)."""
        self._writing += size
        if self._writing > self._write_hold and not self._store_held:
            self._store_held = True
            self.log.debug("{bytes} bytes wait for the message store: holding the senders", bytes=self._writing)
            self._store_congestion.pauseProducing()
            for congestion in self._congestions.values():
                congestion.pauseProducing()

    def _writing_ended(self, size: int) -> None:
        self._writing -= size
        if self._store_held and self._writing <= self._write_hold // 2:
            self._store_held = False
            self._store_congestion.resumeProducing()
            for destination, congestion in list(self._congestions.items()):
                if destination not in self._blocked:
                    congestion.resumeProducing()

    def _shower(self, message: Message, targets: list[MessageQueue]) -> Callable[[bool], None]:
        """What makes ``message`` visible in ``targets`` once its turn comes (``show(True)``), or
        gives up its place when it was not stored (``show(False)``); until then it counts against
        their limits (:attr:`MessageQueue.arriving`)."""
        size = message_size(message)
        self._arriving += size
        for queue in targets:
            queue.arriving += size

        def show(stored: bool) -> None:
            self._arriving -= size
            for queue in targets:
                queue.arriving -= size
            if not stored:
                return
            if message.expiration and message.is_expired(self.now_ms()):
                self.metrics.expired.inc()
                return
            self.metrics.enqueued.count += 1
            for queue in targets:
                if not queue.detached:  # (a subscriber that left, a subscription dropped meanwhile)
                    queue.enqueue(message, size)

        return show

    def _enqueue(self, plan: list[tuple[Message, list[MessageQueue]]]) -> None:
        now = self.now_ms()
        for message, targets in plan:
            if message.is_expired(now):
                self.metrics.expired.inc()
                continue
            self.metrics.enqueued.inc()
            size = message_size(message)
            for queue in targets:
                queue.enqueue(message, size)

    def _targets(self, message: Message) -> list[MessageQueue]:
        destination = message.destination
        queue = self.queues.get(destination)
        if queue is not None and destination.startswith("/queue/"):  # (an existing queue, the common case)
            return [queue]
        is_queue = destination_kind(destination) == "queue"
        if destination.startswith(TEMP_PREFIXES) and destination not in (self.queues if is_queue else self.topics):
            raise DestinationError(f"temporary destination {destination!r} does not exist (its owner left)")
        if is_queue:
            return [self._queue(destination)]
        subscribers = self.topics.get(destination, ())
        if self.wildcards:  # (subscribers of the patterns the topic matches: gateway/broker/wildcards.py)
            patterns = self.wildcards.matching(destination)
            if patterns:
                subscribers = [*subscribers, *(q for pattern in patterns for q in self.topics.get(pattern, ()))]
        if self.virtual:  # (a virtual topic's consumer queues: gateway/broker/virtual_topics.py)
            consumer_queues = self.virtual.queues_of(destination)
            if consumer_queues:
                subscribers = [*subscribers, *(self.queues[name] for name in consumer_queues if name in self.queues)]
        return [queue for queue in subscribers if queue.accepts(message)]

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[ISubscription]:
        if spec.browser:
            return self._browse(spec, consumer)
        try:
            subscription, recorded = self._subscribe(spec, consumer)
        except GatewayError as error:
            return fail(error)
        if recorded is None:
            return succeed(subscription)
        # A new durable subscription exists once its record is stored; only
        # then does its consumer start receiving.  Until then it is claimed:
        # a second SUBSCRIBE to it is refused as if it were active.
        queue = subscription.queue
        self._subscribing.add(queue.key)

        def stored(_: object) -> ISubscription:
            self._subscribing.discard(queue.key)
            if subscription.closed:  # (its connection left meanwhile)
                return subscription
            queue.add_consumer(subscription)
            return subscription

        def failed(failure: Any) -> Any:
            self._subscribing.discard(queue.key)
            self._drop_durable(queue.key).addErrback(self._store_failed)
            return failure

        return recorded.addCallbacks(stored, failed)

    def _subscribe(
        self, spec: SubscriptionSpec, consumer: IConsumer
    ) -> tuple[QueueSubscription, Deferred[None] | None]:
        kind = destination_kind(spec.destination)
        selector = compile_predicate(spec.selector)
        recorded: Deferred[None] | None = None
        if kind == "queue":
            queue = self._queue(spec.destination)
            subscription = QueueSubscription(queue, spec, consumer, selector)
            queue.add_consumer(subscription)
            return subscription, None
        if spec.durable_name:
            if not spec.client_id:
                raise DestinationError(
                    f"durable subscription {spec.durable_name!r} needs a client-id header on CONNECT"
                )
            key = durable_key(spec.client_id, spec.durable_name)
            durable: MessageQueue | None = self.durables.get(key)
            self._check_owner(key, spec.durable_name, spec.login)
            if key in self._subscribing or (durable is not None and durable.consumers):
                raise DestinationError(f"durable subscription {spec.durable_name!r} of client "
                                       f"{spec.client_id!r} already has an active subscriber")
            if durable is not None and (durable.name != spec.destination or durable.selector_text != spec.selector):
                self._drop_durable(key)
                durable = None
            if durable is None:
                durable = self._make_durable(key, spec.destination, spec.selector)
                self.durable_owners[key] = spec.login
                recorded = self.store.add_durable(key, spec.destination, spec.selector, spec.login)
            elif self.durable_owners.get(key) is None and spec.login is not None:
                self.durable_owners[key] = spec.login  # (created without a login, or before owners were kept)
                self.store.add_durable(key, spec.destination, spec.selector, spec.login).addErrback(self._store_failed)
            queue = durable
        else:
            queue = MessageQueue(self, spec.destination, spec.destination, filter=selector, transient=True)
            self.topics.setdefault(spec.destination, []).append(queue)
            if is_wildcard(spec.destination):
                self.wildcards.add(spec.destination)
        subscription = QueueSubscription(queue, spec, consumer, None)
        if recorded is None:
            queue.add_consumer(subscription)
        return subscription, recorded

    def _browse(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[ISubscription]:
        """A ``browser:true`` subscription (:mod:`gateway.broker.browse`)."""
        if destination_kind(spec.destination) != "queue":
            return fail(DestinationError(f"browser:true browses queues only, not {spec.destination!r}"))
        browser = QueueBrowser(self._queue(spec.destination), spec, consumer, compile_predicate(spec.selector),
                               self.clock)
        browser.start()
        return succeed(browser)

    def _check_owner(self, key: str, name: str, login: str | None) -> None:
        """NotOwner unless ``login`` may use the durable subscription ``key``: it has none yet, was
        created without a login, or by ``login``."""
        owner = self.durable_owners.get(key)
        if owner is not None and owner != login:
            raise NotOwner(f"durable subscription {name!r} belongs to another login")

    def durable_owner(self, client_id: str, durable_name: str) -> str | None:
        """The login that created the durable subscription (None: none, or created without a login)."""
        return self.durable_owners.get(durable_key(client_id, durable_name))

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        key = durable_key(client_id, durable_name)
        queue = self.durables.get(key)
        if queue is None:
            return fail(DestinationError(f"no durable subscription {durable_name!r} for client {client_id!r}"))
        if queue.consumers:
            return fail(DestinationError(f"durable subscription {durable_name!r} is in use"))
        return self._drop_durable(key)

    # -- temporary destinations -------------------------------------------

    def create_temporary(self, destination: str) -> None:
        """Create a temporary queue or topic (its owner's session calls this)."""
        if destination_kind(destination) == "queue":
            self._queue(destination)
        else:
            self.topics.setdefault(destination, [])

    def delete_destination(self, destination: str) -> None:
        """Delete a (temporary) destination; pending messages are discarded."""
        queue = self.queues.pop(destination, None)
        if queue is not None:
            for subscription in list(queue.consumers):
                subscription.consumer.subscription_failed(DestinationError(f"{destination} was deleted"))
            dropped = queue.discard()
            if dropped:
                self.log.info("deleted {destination} with {count} undelivered messages",
                              destination=destination, count=dropped)
        self.topics.pop(destination, None)

    # -- internals ---------------------------------------------------------

    def _queue(self, destination: str) -> MessageQueue:
        queue = self.queues.get(destination)
        if queue is None:
            queue = self.queues[destination] = MessageQueue(self, destination, destination)
            topic = self.virtual.add(destination)
            if topic is not None:  # (a virtual topic's consumer queue exists from now on, across restarts)
                self.log.info("{queue} is a consumer queue of the virtual topic {topic}", queue=destination,
                              topic=topic)
                self.store.add_durable(record_key(destination), topic, None).addErrback(self._store_failed)
        return queue

    def forget_queue(self, destination: str) -> Deferred[None]:
        """A deleted queue stops being a virtual topic's consumer queue (in the store too)."""
        if self.virtual.remove(destination):
            removed: Deferred[None] = self.store.remove_durable(record_key(destination))
            return removed
        return succeed(None)

    def _stored(self, queue: MessageQueue) -> bool:
        """Whether persistent messages of ``queue`` go to the store: queues and
        durable subscriptions, not temporary destinations (they end with
        their owner's connection, as in ActiveMQ)."""
        if not self._persist_all:
            return False
        if queue.durable:
            return True
        return not queue.name.startswith(TOPIC_PREFIXES) and not queue.name.startswith(TEMP_PREFIXES)

    def _make_durable(self, key: str, destination: str, selector: str | None) -> MessageQueue:
        queue = MessageQueue(self, destination, key, filter=compile_predicate(selector), durable=True)
        queue.selector_text = selector
        self.durables[key] = queue
        self.topics.setdefault(destination, []).append(queue)
        if is_wildcard(destination):
            self.wildcards.add(destination)
        return queue

    def _drop_durable(self, key: str) -> Deferred[None]:
        self.durable_owners.pop(key, None)
        queue = self.durables.pop(key, None)
        if queue is not None:
            subscribers = self.topics.get(queue.name, [])
            if queue in subscribers:
                subscribers.remove(queue)
            if not subscribers:
                self.wildcards.discard(queue.name)
            queue.discard()
        result: Deferred[None] = self.store.remove_durable(key)
        return result

    def _dead_letter(self, queue: MessageQueue, message: Message, reason: str) -> Deferred[None]:
        """Move ``message`` to the dead-letter queue of ``queue``; fires once stored there."""
        name = queue.name.split("/", 2)[-1]
        dlq = f"{self.settings.dead_letter_prefix}{name}"
        dead = message.copy()
        dead.destination = dlq
        dead.properties["dlqDeliveryFailureCause"] = reason
        dead.properties["original-destination"] = queue.name
        self.metrics.dead_lettered.inc()
        queue.dead_lettered_count += 1
        self.log.warn("message {id} from {queue} moved to {dlq}: {reason}",
                      id=message.message_id, queue=queue.name, dlq=dlq, reason=reason)
        target = self._queue(dlq)
        if message.persistent and self._persist_all:
            d: Deferred[None] = self.store.add_batch([(target.key, dead)])

            def moved(_: object) -> Deferred[None]:
                target.enqueue(dead)
                removed: Deferred[None] = self.store.remove(queue.key, message.message_id)
                return removed

            def refused(failure: Any) -> None:
                # (the store refused the copy, e.g. its disk reserve): the message
                # stays where it is, in memory as in the store, and tries again
                # at its next failed delivery.
                self.log.warn("message {id} stays in {queue}: the dead-letter queue {dlq} could not store it: "
                              "{error}", id=message.message_id, queue=queue.name, dlq=dlq,
                              error=failure.getErrorMessage())
                queue.enqueue(message)

            d.addCallbacks(moved, refused)
            d.addErrback(self._store_failed)
            return d
        target.enqueue(dead)
        return succeed(None)

    def purge_expired(self) -> int:
        """Drop expired messages everywhere; returns how many."""
        dropped = sum(queue.purge_expired() for queue in self.queues.values())
        dropped += sum(queue.purge_expired() for queue in self.durables.values())
        for subscribers in self.topics.values():
            dropped += sum(queue.purge_expired() for queue in subscribers if not queue.durable)
        return dropped

    def _store_failed(self, failure: Any) -> None:
        self.log.failure("message store write failed", failure)

    def health(self) -> Health:
        """:class:`IStatusReporting`: the embedded broker is up while the gateway runs."""
        pending = sum(len(queue) for queue in self.queues.values())
        return Health(True, f"{len(self.queues)} queues, {pending} messages pending")

    def status(self) -> dict[str, Any]:
        """Queue depths, consumer counts, memory against the limits, paging (admin and tests)."""
        return {
            "memory": {"used": self.memory.used, "limit": self.memory.configured, "full": self.memory.full,
                       "page_file": self._pages.path if self._pages.opened else None,
                       "waiting_for_store": self._writing, "senders_held": self._store_held,
                       "removals_waiting": self._removing, "deliveries_held": self.removals_held,
                       "blocked": sorted(self._blocked)},
            "queues": {name: {"pending": len(q), "consumers": len(q.consumers), "inflight": q.inflight}
                       for name, q in self.queues.items()},
            "durables": {key: {"pending": len(q), "active": bool(q.consumers)} for key, q in self.durables.items()},
            "topics": {name: len(subs) for name, subs in self.topics.items()},
            "paging": {key: _queue_memory(q) for key, q in [*self.queues.items(), *self.durables.items()]},
            "scheduled": {"waiting": self.scheduler.waiting, "delivered": self.scheduler.delivered},
        }

    def why_cannot_tell(self, destination: str) -> str | None:
        """:class:`IHeldMessages`: the broker can always look."""
        return None

    def held_message_ids(self, destination: str, tail: int = 0) -> Deferred[set[str] | None]:
        """:class:`IHeldMessages`: the ids pending (paged ones included) or delivered and
        unacknowledged at the queue, or at every subscriber queue of the topic (``tail``
        does not apply)."""
        queues = [self.queues[destination]] if destination in self.queues else []
        queues.extend(self.topics.get(destination, ()))
        ids: set[str] = set()
        for queue in queues:
            ids.update(message.message_id for message in queue.messages())
            for consumer in queue.consumers:
                ids.update(message.message_id for message in consumer.unacked.values())
        return succeed(ids)

    def _gauges(self) -> Iterator[Metric]:
        memory = self.memory
        yield GaugeMetricFamily("jmsgateway_broker_memory_used_bytes",
                                "Bytes queued messages take in memory (estimated)", value=memory.used)
        yield GaugeMetricFamily("jmsgateway_broker_memory_limit_bytes",
                                "The embedded broker's memory_limit (0: none)", value=memory.configured)
        labels = ["destination", "full_policy"]
        in_memory = GaugeMetricFamily("jmsgateway_broker_destination_memory_bytes",
                                      "Bytes of a destination's pending messages held in memory", labels=labels)
        limit = GaugeMetricFamily("jmsgateway_broker_destination_max_size_bytes",
                                  "A destination's max_size (0: only memory_limit)", labels=labels)
        paged = GaugeMetricFamily("jmsgateway_broker_paged_messages",
                                  "Pending messages of a destination paged out to disk", labels=labels)
        paged_bytes = GaugeMetricFamily("jmsgateway_broker_paged_bytes",
                                        "Bytes of pending messages of a destination paged out to disk", labels=labels)
        for key, queue in [*self.queues.items(), *self.durables.items()]:
            values = [key, queue.policy.full_policy]
            in_memory.add_metric(values, queue.memory)
            limit.add_metric(values, queue.max_size)
            paged.add_metric(values, queue.paged)
            paged_bytes.add_metric(values, queue.paged_size)
        yield from (in_memory, limit, paged, paged_bytes)


def _queue_memory(queue: MessageQueue) -> dict[str, Any]:
    return {"memory": queue.memory, "paged": queue.paged, "paged_bytes": queue.paged_size,
            "max_size": queue.max_size, "full_policy": queue.policy.full_policy}


def compile_predicate(selector: str | None) -> Predicate | None:
    """Compile a JMS selector into a predicate (None for no selector)."""
    if selector is None or not selector.strip():
        return None
    from gateway.selector import compile_selector

    return compile_selector(selector).matches


__all__ = ["ConnectorError", "DurableRecord", "EmbeddedBroker", "destination_kind"]
