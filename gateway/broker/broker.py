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

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from gateway.broker.admission import Admission
from gateway.broker.browse import QueueBrowser
from gateway.broker.collection import InactiveQueues
from gateway.broker.composite import expand
from gateway.broker.destinations import TEMP_PREFIXES, TOPIC_PREFIXES, Destinations, compile_predicate, destination_kind
from gateway.broker.idempotency import ARTEMIS_HEADER, DEDUP_HEADER, IdempotentSends, has_send_id
from gateway.broker.limits import (
    DestinationPolicy,
    message_size,
)
from gateway.broker.metrics import BrokerMetrics
from gateway.broker.paging.page_file import PageFile
from gateway.broker.publication import Publication, PublicationOrder
from gateway.broker.queue import MessageQueue, QueueSubscription, fan_out
from gateway.broker.queue_wildcards import WildcardQueueSubscription
from gateway.broker.quota import DestinationQuota
from gateway.broker.recovery import Recovery
from gateway.broker.scheduler import SCHEDULING, MemorySchedule, Scheduler, ScheduleStore, is_scheduled
from gateway.broker.settings import BrokerSettings
from gateway.broker.status import broker_gauges, broker_status
from gateway.broker.store.memory_store import MemoryStore
from gateway.broker.store.snapshot import (
    DurableRecord,
    Snapshot,
    configured_key,
    durable_key,
)
from gateway.broker.stored_sends import StoredSends, arrive
from gateway.broker.virtual_topics import VirtualTopicNames, VirtualTopics, record_key
from gateway.broker.wildcards import is_queue_wildcard
from gateway.deferreds import gather
from gateway.errors import ConnectorError, DestinationError, GatewayError
from gateway.flow import Congestion
from gateway.interfaces import (
    Capability,
    Health,
    IConsumer,
    IDestinationFlowControlled,
    IGroupedWrites,
    IHeldMessages,
    IMessageStore,
    IPostingConnector,
    IStatusReporting,
    ISubscription,
    SubscriptionSpec,
)
from gateway.message.model import Message
from gateway.security.quotas import LoginQuotas

Settled = Callable[[Exception | None, Any], None]
"""How :meth:`EmbeddedBroker.post` reports a send: ``(error, None)``."""

_SPECIAL_PROPERTIES = frozenset((DEDUP_HEADER, ARTEMIS_HEADER, *SCHEDULING))
"""The properties that take a SEND off the plain path (an idempotency key, a schedule): a message
with none of them is not asked :func:`has_send_id` or :func:`is_scheduled`."""

_POSTED: Deferred[None] = Deferred()
"""What :meth:`EmbeddedBroker._send` returns for a send it answers through its ``settled`` (never fired)."""

REMOVALS_HELD = 20_000
"""Removals of consumed persistent messages waiting for the store's writer thread past which
deliveries of stored queues wait (until half as many wait): a consumer that drains a deep
backlog faster than the disk deletes it must not pile up removals in memory without bound
(each waiting removal is a few hundred bytes; ~300 MB for a 300,000-message backlog before)."""

@implementer(IPostingConnector, IStatusReporting, IDestinationFlowControlled, IHeldMessages)
class EmbeddedBroker:
    """Queues, topics and durable subscriptions in this process (IPostingConnector).

    :param page_path: the page file (queues past their memory limit page out
        there); None keeps pages in SQLite's memory (tests).
    :param logins: the logins' ``max_queues`` (``[auth.limits]``; a reload replaces them in place).
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
        logins: LoginQuotas | None = None,
    ) -> None:
        self.clock = clock
        self.settings = settings or BrokerSettings()
        self.store: IMessageStore = store or MemoryStore()
        self.scheduler = Scheduler(clock, schedule or MemorySchedule(), self._send_occurrence, self.now_ms)
        """Messages sent with AMQ_SCHEDULED_* until they are due (:mod:`gateway.broker.scheduler`)."""
        self.scheduler.on_waiting = self._waits_for_job
        self.scheduler.max_size = self.settings.max_scheduled_size
        self.metrics = BrokerMetrics(registry)
        names = VirtualTopicNames(self.settings.virtual_topic_prefix, self.settings.virtual_topic_consumer_prefix)
        self.quota = DestinationQuota(self.settings.max_destinations, logins)
        """``max_destinations`` and the logins' ``max_queues``: what exists, counted (:mod:`gateway.broker.quota`)."""
        self.destinations = Destinations(self, VirtualTopics(names), self._record_consumer_queue, self.quota)
        """Every queue, topic and durable subscription by name (:mod:`gateway.broker.destinations`)."""
        self.admission = Admission(self.settings, self.metrics, self.destinations)
        """The memory and destination limits and the senders they hold (:mod:`gateway.broker.admission`)."""
        self.metrics.gauges = lambda: broker_gauges(self.admission, self.destinations)
        self.recovery = Recovery(self.destinations, self.settings, self.metrics, self._dead_letter)
        # (the hot path's names for the parts it reads on every send)
        self.memory = self.admission.memory
        self.policies = self.admission.policies
        self.queues = self.destinations.queues
        self.topics = self.destinations.topics
        self.durables = self.destinations.durables
        self.wildcards = self.destinations.wildcards
        self.virtual = self.destinations.virtual
        self._pages = PageFile(page_path, getattr(clock, "callLater", None), min_free=self.settings.min_free)
        self._removing = 0
        """Store removals of consumed messages not yet committed."""
        self.removals_held = False
        """Past :data:`REMOVALS_HELD` removals waiting: deliveries of stored queues wait."""
        self._expiry = LoopingCall(self.purge_expired)
        self._expiry.clock = clock
        self._persist_all = not isinstance(self.store, MemoryStore)
        self._bookkeeping = True
        self._subscribing: set[str] = set()
        """Keys of durable subscriptions whose first SUBSCRIBE waits for its record."""
        self._recording: dict[str, list[Deferred[None]]] = {}
        """Virtual topics' consumer queues whose record is being stored: the SUBSCRIBEs waiting for it."""
        self._publishing = PublicationOrder()
        grouped = IGroupedWrites.providedBy(self.store)
        writes: Any = self.store  # (an IGroupedWrites when ``grouped``)
        self._stored_sends = StoredSends(writes.add_then, self.admission, self._publishing, self.metrics,
                                         self.now_ms) if grouped else None
        """The posted persistent SENDs' way to a store that groups writes (:mod:`gateway.broker.stored_sends`)."""
        self._remove_then: Callable[[str, str, Callable[[BaseException | None], None]], None] | None = \
            writes.remove_then if grouped else None
        """The auto-acknowledged messages' way out of a store that groups writes."""
        self.inactive = InactiveQueues(clock, self.destinations, self.settings.inactive_queue_timeout,
                                       self._needed, lambda _: self.metrics.queues_collected.inc())
        """The sweep that removes inactive auto-created queues (:mod:`gateway.broker.collection`)."""
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
            self.inactive.start()
            return gather([moved, self.scheduler.open()])

        return d.addCallback(recovered).addCallback(lambda _: None)

    def stop(self) -> Deferred[None]:
        if self._expiry.running:
            self._expiry.stop()
        self.inactive.stop()
        # From here on the store holds what a crash would have left, which is
        # what recovery expects: deliveries returned by connections closing
        # after this point are not written (sends and ACKs still fail).
        self._bookkeeping = False
        scheduled = self.scheduler.close()
        result: Deferred[None] = self.store.close()
        self._pages.close()
        return gather([scheduled, result]).addCallback(lambda _: None)

    def recover(self, snapshot: Snapshot) -> Deferred[Any]:
        """Rebuild state from a store snapshot (:mod:`gateway.broker.recovery`); fires when
        recovery's own writes are stored."""
        self.idempotency.recover(snapshot.send_ids)  # (issue 35)
        return self.recovery.recover(snapshot)

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
            self._removal_started()
            result.addBoth(self._removed)
            return result
        return None

    def auto_consumed(self, queue: MessageQueue, message: Message) -> None:
        """QueueOwner: ``message`` was delivered to an auto-ack subscriber; its removal from the store
        is not waited for (a failure is logged: the message comes back after a restart).  A store
        that groups writes removes the auto-acknowledged messages of a turn in one operation."""
        if not message.persistent:  # (issue 39: the usual case, nothing to remove; as consumed())
            self.metrics.consumed.count += 1
            return
        remove_then = self._remove_then
        if remove_then is None or not self._stored(queue):
            removed = self.consumed(queue, message)
            if removed is not None:
                removed.addErrback(lambda failure: self._auto_removed(failure.value, False))
            return
        self.metrics.consumed.count += 1
        self._removal_started()
        remove_then(queue.key, message.message_id, self._auto_removed)

    def auto_consumed_copies(self, count: int) -> None:
        """QueueOwner: ``count`` auto-ack subscribers took a non-persistent message (a topic's fan-out)."""
        self.metrics.consumed.count += count

    def _auto_removed(self, error: BaseException | None, counted: bool = True) -> None:
        if counted:
            self._removed(None)
        if error is not None:
            self.log.warn("auto-acknowledged message not removed from the store, it will be delivered again after "
                          "a restart: {error}", error=error)

    def _removal_started(self) -> None:
        self._removing += 1
        if self._removing > REMOVALS_HELD and not self.removals_held:
            self.removals_held = True
            self.log.debug("{count} removals wait for the message store: deliveries wait", count=self._removing)

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
            self.destinations.unsubscribe_topic(queue)
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
        ``confirm`` changes nothing: every send is settled on its own.  A persistent message for
        stored queues makes no Deferred either: the store reports its write
        (:mod:`gateway.broker.stored_sends`)."""
        pending = self._send(message, settled=settled)
        if pending is None:
            settled(None, None)
        elif pending is not _POSTED:
            pending.addCallbacks(lambda _: settled(None, None), lambda failure: settled(failure.value, None))

    def _send(self, message: Message, deduplicate: bool = True,
              settled: Settled | None = None) -> Deferred[None] | None:
        """Take ``message``: None when it is settled already (enqueued, expired, dropped);
        a Deferred when it waits for the store or is refused; :data:`_POSTED` when it was handed
        to the store to be answered through ``settled`` (a post's persistent message)."""
        destination = message.destination
        properties = message.properties
        if properties and not _SPECIAL_PROPERTIES.isdisjoint(properties):  # (issue 39: one C-level test)
            if deduplicate and has_send_id(message):  # (issue 35: a resend with a stored x-dedup-id is settled)
                return self.idempotency.send([message], lambda fresh: self._send(fresh[0], False))
            if is_scheduled(message):  # (AMQ_SCHEDULED_*: held until due, gateway/broker/scheduler.py)
                return self.scheduler.schedule(message)
        if "," in destination:  # (is_composite: one copy per part, stored as one batch: one receipt)
            return self.send_batch([message], deduplicate=False)
        queue = self.queues.get(destination)
        if queue is not None and destination.startswith("/queue/"):  # (an existing queue: targets' first case)
            targets = [queue]
        else:
            try:
                targets = self.destinations.targets(message)
            except GatewayError as error:
                return fail(error)
            if self._recording and destination in self._recording:  # (it made a virtual topic's consumer queue)
                return self._send_recorded(message)
        memory = self.memory
        if targets and (self.policies.rules or memory.used >= memory.limit):  # (policies or memory.full)
            refusal = self.admission.admit(message, targets)
            if refusal is not None:
                if queue is None and refusal.called and getattr(refusal, "result", None) is not None:
                    self._unmake([destination])  # (FAIL: a queue this SEND made goes again, nothing in it)
                return refusal
        if (message.persistent and self._persist_all) or destination in self._publishing.lines:  # (busy)
            stored_sends = self._stored_sends
            if settled is not None and stored_sends is not None and message.persistent:
                entries = [(queue.key, message) for queue in targets if self._stored(queue)]
                if entries:
                    stored_sends.post(message, targets, entries, settled)
                    return _POSTED
            return self._store_then_enqueue([(message, targets)])
        if message.expiration and message.is_expired(self.now_ms()):
            self.metrics.expired.inc()
            return None
        self.metrics.enqueued.count += 1
        if len(targets) == 1:
            targets[0].enqueue(message)
        elif targets:  # (a topic's subscribers: gateway/broker/queue.py's fan_out)
            fan_out(targets, message, message_size(message))
        return None

    def _send_recorded(self, message: Message) -> Deferred[None]:
        """A SEND that made a virtual topic's consumer queue: sent now (the queue exists), answered once
        the queue's record is stored too, as the SUBSCRIBE that makes one is (kill -9 after its RECEIPT
        must not forget the group's queue, nor a non-persistent message's queue)."""
        recorded = self.recorded(message.destination)
        sent = self._send(message, False)  # (the queue exists now: the plain path, no second record)
        return gather([recorded, succeed(None) if sent is None else sent]).addCallback(lambda _: None)

    def send_batch(self, messages: list[Message], deduplicate: bool = True) -> Deferred[None]:
        """Store the persistent ones in one transaction, then make all visible (scheduled ones
        are recorded as jobs once the others are in).  ``deduplicate``: messages whose
        idempotency key was stored are left out (False: a dead letter sent back)."""
        if deduplicate and any(map(has_send_id, messages)):  # (issue 35)
            sent = self.idempotency.send(messages, lambda fresh: self.send_batch(fresh, False))
            return succeed(None) if sent is None else sent
        later = [message for message in messages if is_scheduled(message)]
        if later:
            scheduler = self.scheduler
            try:
                reserved = scheduler.reserve(later)  # (past max_scheduled_size: nothing of the batch is sent)
            except GatewayError as error:
                return fail(error)
            now = [message for message in messages if not is_scheduled(message)]
            sent = self.send_batch(now, False) if now else succeed(None)

            def unsent(failure: Failure) -> Failure:
                scheduler.release(reserved)
                return failure

            def jobs(_: object) -> Deferred[Any]:
                return gather([scheduler.schedule(m, reserved=True) for m in later])

            done: Deferred[Any] = sent.addErrback(unsent).addCallback(jobs)
            return done.addCallback(lambda _: None)
        try:
            parts = [part for message in messages for part in expand(message)]
            made = self.destinations.admit_batch(parts)  # (all or none: a refused batch makes no queue)
            plan = [(part, self.destinations.targets(part)) for part in parts]
        except GatewayError as error:
            return fail(error)
        if self.policies or self.memory.full:
            admitted = []
            batch: dict[MessageQueue | None, int] = {}
            for message, targets in plan:
                refusal = self.admission.admit(message, targets, batch) if targets else None
                if refusal is None:
                    admitted.append((message, targets))
                elif refusal.called and getattr(refusal, "result", None) is not None:
                    self._unmake(made)
                    return refusal  # FAIL: the whole transaction is refused, nothing stored
            plan = admitted
        return self._store_then_enqueue(plan)

    # -- flow control ------------------------------------------------------

    def congestion_for(self, destination: str) -> Congestion | None:
        """:class:`IDestinationFlowControlled`: the senders of ``destination``: its own for a BLOCK
        destination, else the senders of every destination (held while the store is behind)."""
        return self.admission.congestion_for(destination)

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
        self.admission.writing_started(size)
        written: Deferred[None] = self.store.add_batch(entries)

        def stored(_: object) -> Deferred[None] | None:
            self.admission.writing_ended(size)
            settle(True)
            return self._when_shown(waiting)  # (the send is done once its messages are in their queues)

        def failed(failure: Any) -> Any:
            self.admission.writing_ended(size)
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

    def _shower(self, message: Message, targets: list[MessageQueue]) -> Callable[[bool], None]:
        """What makes ``message`` visible in ``targets`` once its turn comes (``show(True)``), or
        gives up its place when it was not stored (``show(False)``); until then it counts against
        their limits (:attr:`MessageQueue.arriving`)."""
        size = message_size(message)
        admission = self.admission
        admission.arriving += size
        for queue in targets:
            queue.arriving += size

        metrics, now_ms = self.metrics, self.now_ms

        def show(stored: bool) -> None:
            arrive(admission, metrics, now_ms, message, targets, size, stored)

        return show

    def _enqueue(self, plan: list[tuple[Message, list[MessageQueue]]]) -> None:
        now = self.now_ms()
        for message, targets in plan:
            if message.is_expired(now):
                self.metrics.expired.inc()
                continue
            self.metrics.enqueued.inc()
            if len(targets) > 1:
                fan_out(targets, message, message_size(message))
            elif targets:
                targets[0].enqueue(message)

    def subscribe(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[ISubscription]:
        if spec.browser:
            return self._browse(spec, consumer)
        if is_queue_wildcard(spec.destination):  # (gateway/broker/queue_wildcards.py)
            return succeed(self._subscribe_wildcard_queue(spec, consumer))
        try:  # (LimitReached when it would make a destination past a limit: gateway/broker/quota.py)
            subscription, recorded = self._subscribe(spec, consumer)
        except GatewayError as error:
            return fail(error)
        if recorded is None:
            return succeed(subscription)
        if not subscription.queue.durable:
            # A virtual topic's consumer queue that its first SUBSCRIBE made: until 2026-11-29 its record
            # was not waited for, so kill -9 right after the RECEIPT could forget the group's queue.
            def attach(_: object) -> ISubscription:
                if not subscription.closed:
                    subscription.queue.add_consumer(subscription)
                return subscription

            return recorded.addCallback(attach)
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
            queue = self.destinations.create_queue(spec.destination, spec.login)
            subscription = QueueSubscription(queue, spec, consumer, selector)
            waiting = self._recording.get(spec.destination)
            if waiting is not None:  # (a virtual topic's new consumer queue: it consumes once it is recorded)
                recorded = Deferred()
                waiting.append(recorded)
                return subscription, recorded
            queue.add_consumer(subscription)
            return subscription, None
        if spec.durable_name:
            if not spec.client_id:
                raise DestinationError(
                    f"durable subscription {spec.durable_name!r} needs a client-id header on CONNECT"
                )
            key = durable_key(spec.client_id, spec.durable_name)
            owners = self.destinations.durable_owners
            durable: MessageQueue | None = self.durables.get(key)
            self.destinations.check_owner(key, spec.durable_name, spec.login)
            if key in self._subscribing or (durable is not None and durable.consumers):
                raise DestinationError(f"durable subscription {spec.durable_name!r} of client "
                                       f"{spec.client_id!r} already has an active subscriber")
            if durable is None:  # (a new one; one replaced for a new topic or selector takes its place)
                self.quota.admit(f"durable subscription {spec.durable_name!r} of client {spec.client_id!r}",
                                 spec.login)
            if durable is not None and (durable.name != spec.destination or durable.selector_text != spec.selector):
                self._drop_durable(key)
                durable = None
            if durable is None:
                durable = self.destinations.make_durable(key, spec.destination, spec.selector, spec.login)
                owners[key] = spec.login
                recorded = self.store.add_durable(key, spec.destination, spec.selector, spec.login)
            elif owners.get(key) is None and spec.login is not None:
                owners[key] = spec.login  # (created without a login, or before owners were kept)
                self.store.add_durable(key, spec.destination, spec.selector, spec.login).addErrback(self._store_failed)
            queue = durable
        else:
            queue = self.destinations.subscribe_topic(spec.destination, selector)
        subscription = QueueSubscription(queue, spec, consumer, None)
        if recorded is None:
            queue.add_consumer(subscription)
        return subscription, recorded

    def _subscribe_wildcard_queue(self, spec: SubscriptionSpec, consumer: IConsumer) -> WildcardQueueSubscription:
        """A SUBSCRIBE to ``/queue/orders.>``: consumes from every queue the pattern matches, now or later."""
        queues = [queue for name, queue in self.queues.items() if name.startswith("/queue/")]
        return self.destinations.queue_wildcards.subscribe(spec, consumer, compile_predicate(spec.selector), queues)

    def _browse(self, spec: SubscriptionSpec, consumer: IConsumer) -> Deferred[ISubscription]:
        """A ``browser:true`` subscription (:mod:`gateway.broker.browse`)."""
        if destination_kind(spec.destination) != "queue":
            return fail(DestinationError(f"browser:true browses queues only, not {spec.destination!r}"))
        try:
            queue = self.destinations.create_queue(spec.destination, spec.login)
        except GatewayError as error:
            return fail(error)
        browser = QueueBrowser(queue, spec, consumer, compile_predicate(spec.selector), self.clock)
        browser.start()
        return succeed(browser)

    def durable_owner(self, client_id: str, durable_name: str) -> str | None:
        """The login that created the durable subscription (None: none, or created without a login)."""
        return self.destinations.durable_owner(client_id, durable_name)

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        key = durable_key(client_id, durable_name)
        queue = self.durables.get(key)
        if queue is None:
            return fail(DestinationError(f"no durable subscription {durable_name!r} for client {client_id!r}"))
        if queue.consumers:
            return fail(DestinationError(f"durable subscription {durable_name!r} is in use"))
        return self._drop_durable(key)

    # -- temporary destinations -------------------------------------------

    def create_temporary(self, destination: str, login: str | None = None) -> None:
        """Create a temporary queue or topic (its owner's session calls this, for ``login``);
        :class:`~gateway.errors.LimitReached` past ``max_destinations`` or the login's ``max_queues``."""
        self.destinations.create_temporary(destination, login)

    def delete_destination(self, destination: str) -> None:
        """Delete a (temporary) destination; pending messages are discarded."""
        self.destinations.delete(destination)

    # -- internals ---------------------------------------------------------

    def _needed(self, destination: str) -> bool:
        """Whether the queue ``destination`` is needed outside itself (not collected while it is): a SEND
        to it is being stored, or its record is being stored."""
        return destination in self._publishing.lines or destination in self._recording

    def _waits_for_job(self, destination: str, change: int) -> None:
        """The scheduler kept a job for ``destination`` (``change`` 1) or is done with one (-1): the queue,
        when it exists, counts the jobs it waits for (:attr:`MessageQueue.scheduled`) and is not collected
        while it waits for one.  A job recovered after a restart was not counted (an empty queue does not
        exist after a restart): its occurrence makes the queue again when it falls due."""
        queue = self.queues.get(destination)
        if queue is not None:
            queue.scheduled = max(0, queue.scheduled + change)

    def _record_consumer_queue(self, destination: str, topic: str, login: str | None) -> None:
        """A virtual topic's consumer queue exists from now on, across restarts: its record is stored (with
        the login that made it, which holds it after a restart too), and a SUBSCRIBE or SEND that made it
        (or came meanwhile) takes effect, and is receipted, once it is."""
        waiting: list[Deferred[None]] = []
        self._recording[destination] = waiting

        def recorded(result: object) -> object:
            if self._recording.get(destination) is waiting:
                del self._recording[destination]
            for subscribed in waiting:
                subscribed.callback(None)
            return result

        self.store.add_durable(record_key(destination), topic, None, login).addBoth(recorded).addErrback(
            self._store_failed)

    def recorded(self, destination: str) -> Deferred[None]:
        """Fires once ``destination``'s record as a virtual topic's consumer queue is stored (at once
        when none is being stored): the console's create answers then, as a SUBSCRIBE that made it does."""
        waiting = self._recording.get(destination)
        if waiting is None:
            return succeed(None)
        done: Deferred[None] = Deferred()
        waiting.append(done)
        return done

    def configure_queue(self, destination: str) -> Deferred[None]:
        """The console made the queue ``destination`` or named it (it exists): from now on it is configured,
        never collected when inactive (:mod:`gateway.broker.collection`), and recorded in the store
        (:data:`~gateway.broker.store.snapshot.CONFIGURED_PREFIX`, among the durable records as a virtual
        topic's consumer queue is) so that it exists after a restart or a standby's takeover, empty or not,
        until the console deletes it (:meth:`forget_queue`).  Fires once the record is stored, and a consumer
        queue's record being stored with it: the console answers then (kill -9 after the answer keeps it).
        The record is written at each call (a create naming a recorded queue rewrites the same row)."""
        self.destinations.configured.add(destination)
        stored: Deferred[None] = self.store.add_durable(configured_key(destination), destination, None, None)
        return gather([stored, self.recorded(destination)]).addCallback(lambda _: None)

    def _unmake(self, made: list[str]) -> None:
        """The queues a refused batch made (``made``) go again while nothing uses them (no message, no
        consumer, not configured meanwhile by the console): a refused COMMIT or composite SEND applies
        nothing, and its queues would have been held by its login."""
        configured = self.destinations.configured
        for destination in made:
            queue = self.queues.get(destination)
            if queue is not None and not queue.consumers and not len(queue) and destination not in configured:
                self.destinations.remove_queue(destination)
                self.forget_queue(destination)

    def forget_queue(self, destination: str, configured: bool = False) -> Deferred[None]:
        """A deleted queue stops being a virtual topic's consumer queue and, with ``configured`` (the console
        deletes it), a configured queue: their records leave the store; fires once they have."""
        removals: list[Deferred[None]] = []
        if self.virtual.remove(destination):
            removals.append(self.store.remove_durable(record_key(destination)))
        if configured:
            removals.append(self.store.remove_durable(configured_key(destination)))
        if not removals:
            return succeed(None)
        return gather(removals).addCallback(lambda _: None)

    def _stored(self, queue: MessageQueue) -> bool:
        """Whether persistent messages of ``queue`` go to the store: queues and
        durable subscriptions, not temporary destinations (they end with
        their owner's connection, as in ActiveMQ)."""
        if not self._persist_all:
            return False
        if queue.durable:
            return True
        return not queue.name.startswith(TOPIC_PREFIXES) and not queue.name.startswith(TEMP_PREFIXES)

    def _drop_durable(self, key: str) -> Deferred[None]:
        self.destinations.drop_durable(key)
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
        target = self.destinations.queue(dlq)
        if message.persistent and self._persist_all:
            d: Deferred[None] = self.store.add_batch([(target.key, dead)])

            def moved(_: object) -> Deferred[None]:
                # (the queue as it is now: an inactive dead-letter queue may have been collected meanwhile)
                self.destinations.queue(dlq).enqueue(dead)
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
        return self.destinations.purge_expired()

    def _store_failed(self, failure: Any) -> None:
        self.log.failure("message store write failed", failure)

    def health(self) -> Health:
        """:class:`IStatusReporting`: the embedded broker is up while the gateway runs."""
        pending = sum(len(queue) for queue in self.queues.values())
        return Health(True, f"{len(self.queues)} queues, {pending} messages pending")

    def status(self) -> dict[str, Any]:
        """Queue depths, consumer counts, memory against the limits, paging (admin and tests)."""
        return broker_status(self.admission, self.destinations, self._pages.path if self._pages.opened else None,
                             (self._removing, self.removals_held), (self.scheduler.waiting, self.scheduler.delivered))

    def why_cannot_tell(self, destination: str) -> str | None:
        """:class:`IHeldMessages`: the broker can always look."""
        return None

    def held_message_ids(self, destination: str, tail: int = 0) -> Deferred[set[str] | None]:
        """:class:`IHeldMessages`: the ids pending (paged ones included) or delivered and
        unacknowledged at the queue, or at every subscriber queue of the topic (``tail``
        does not apply)."""
        ids: set[str] = set()
        for queue in self.destinations.of_destination(destination):
            ids.update(message.message_id for message in queue.messages())
            for consumer in queue.consumers:
                ids.update(message.message_id for message in consumer.unacked.values())
        return succeed(ids)


__all__ = ["ConnectorError", "DurableRecord", "EmbeddedBroker", "destination_kind"]
