"""A message queue with its consumers: ordering, dispatch, acks, redelivery.

:class:`MessageQueue` holds pending messages ordered by priority (higher
first) then arrival, and serves its :class:`QueueSubscription` consumers in
turn, each up to its prefetch window (``client`` modes) or until it is
paused by transport back-pressure (``auto``).  Messages a consumer's
selector refuses stay for the others.  A queue is also the private backlog
of each topic subscriber, so the same code serves both.

Pending messages are held in memory while they fit (``memory_limit``, the
destination's ``max_size``); the rest is paged out (:mod:`gateway.broker.paging.page_file`)
and read back in order.

The queue knows nothing of stores or dead letters: it calls back into its
:class:`QueueOwner` (the broker) for those.
"""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from zope.interface import implementer

from gateway.broker.exclusive import exclusive_owner
from gateway.broker.groups import GROUP_ID, MessageGroups, closes_group, flagged, group_of
from gateway.broker.last_value import LastValues
from gateway.broker.limits import DestinationPolicy, MemoryUsage, message_size
from gateway.broker.paging.page_file import RETRY_SECONDS, SEARCH_SLICE, Entry, Key, PageFile, QueuePage, StoredTail
from gateway.deferreds import gather
from gateway.errors import StoreError
from gateway.interfaces import IConsumer, IImmediateAcks, ITransactionalAcks, SubscriptionSpec
from gateway.message.model import Message

Predicate = Callable[[Message], bool]


class QueueOwner(Protocol):
    """What a queue needs from the broker that owns it."""

    memory: MemoryUsage
    """Bytes of queued messages in memory, process-wide."""

    removals_held: bool
    """The store is behind with the removals of consumed messages: deliveries of stored
    queues wait (:meth:`holds_deliveries`); the owner dispatches them again once it caught up."""

    def holds_deliveries(self, queue: MessageQueue) -> bool:
        """While :attr:`removals_held`: whether ``queue``'s deliveries wait."""

    def now_ms(self) -> int: ...

    def page_file(self) -> PageFile:
        """Where queues page out what does not fit in memory."""

    def policy(self, destination: str) -> DestinationPolicy:
        """The ``max_size`` and ``full_policy`` in force on ``destination``."""

    def paging(self, queue: MessageQueue, started: bool) -> None:
        """``queue`` started paging out (``started``) or read its last paged message back."""

    def consumed(self, queue: MessageQueue, message: Message) -> Deferred[None] | None:
        """``message`` left ``queue`` for good (acked, auto-acked); a Deferred when that
        leaves a store write to wait for (None when nothing was stored: the hot path)."""

    def auto_consumed(self, queue: MessageQueue, message: Message) -> None:
        """``message`` left ``queue`` for an auto-ack subscriber: like :meth:`consumed`, not waited for."""

    def auto_consumed_copies(self, count: int) -> None:
        """:func:`fan_out` handed a non-persistent message to ``count`` auto-ack subscribers:
        :meth:`auto_consumed` for each of them at once."""

    def replaced(self, queue: MessageQueue, message: Message) -> None:
        """A last-value queue took the waiting ``message`` out: a newer one with its key came."""

    def expired(self, queue: MessageQueue, message: Message) -> None:
        """``message`` expired in ``queue`` and was dropped."""

    def delivered(self, queue: MessageQueue, message: Message) -> None:
        """``message`` was handed to a consumer that must acknowledge it."""

    def redelivering(self, queue: MessageQueue, message: Message) -> bool:
        """``message`` (already marked redelivered, count raised) goes back to
        ``queue``; return False if the owner dead-lettered it instead."""

    def subscription_closed(
        self, queue: MessageQueue, subscription: QueueSubscription, delete: bool
    ) -> Deferred[None] | None:
        """A consumer left the queue; ``delete`` if it asked to unsubscribe.
        Returns a Deferred when that leaves a write to wait for (a durable
        subscription's deletion)."""


PAGE_IN_ROWS = 1000
"""Most messages one read of the page brings back into memory (a read of :data:`PAGE_IN_BYTES`
of 1 KB messages: few reads, each a statement or two on the page file)."""
PAGE_IN_BYTES = 1024 * 1024
"""About the most bytes one read of the page brings back into memory."""
PAGE_IN_FLOOR = 64 * 1024
"""What one read of the page may bring back even when the limits leave no room."""


class MessageQueue:
    """Pending messages of one queue (or one topic subscriber) and its consumers.

    Pending messages are kept in memory (a heap ordered by priority, then
    arrival) while they fit: within the destination's ``max_size`` and the
    broker's ``memory_limit``.  The rest is paged out (:class:`QueuePage`) and
    read back in order as the memory window drains; a message is always
    dispatched before every later one, in memory or paged.  A consumer whose
    selector refuses everything in memory has the page searched for it.

    :ivar name: the destination (``/queue/a``) or topic subscriber's topic.
    :ivar key: the store key; durable subscriptions have their own.
    :ivar filter: a predicate a message must pass to enter (topic subscribers'
        selectors are applied here, at publish time).
    :ivar memory: counted bytes of the pending messages held in memory.
    """

    log = Logger()

    def __init__(
        self, owner: QueueOwner, name: str, key: str, *, filter: Predicate | None = None, durable: bool = False,
        transient: bool = False,
    ) -> None:
        self.owner = owner
        self.name = name
        self.key = key
        self.filter = filter
        self.durable = durable
        self.transient = transient
        """Whether the queue ends with its subscriber (a non-durable topic subscriber's backlog):
        its unacknowledged deliveries are not put back when it leaves."""
        self.selector_text: str | None = None
        self._heap: list[Entry] = []
        self._expiring = False
        """Whether a message in :attr:`_heap` may expire (else :meth:`purge_expired` skips the scan:
        a fan-out's 100 subscriber backlogs without expirations scanned every second were ~8 % of its CPU)."""
        self._seq = itertools.count()
        self.consumers: list[QueueSubscription] = []
        self.detached = False
        """Discarded (:meth:`discard`): no longer the broker's; a send still waiting for the store
        shows nothing in it."""
        self.exclusive: QueueSubscription | None = None
        """The consumer that gets every message (:mod:`gateway.broker.exclusive`); None: all share."""
        self.groups: MessageGroups[QueueSubscription] | None = None if transient or durable else MessageGroups()
        """Which consumer owns each message group (:mod:`gateway.broker.groups`); None: a topic
        subscriber's backlog (one consumer)."""
        self._rr = 0
        self._dispatching = False
        self._again = False
        self.memory = 0
        self.arriving = 0
        """Counted bytes of messages admitted to this queue and not in it yet (being stored):
        the owner counts them against ``max_size`` (a pipelined sender must not pass it)."""
        self.usage: MemoryUsage = owner.memory
        self.policy: DestinationPolicy = owner.policy(name)
        self.max_size = self.policy.max_size
        self.last_values: LastValues | None = LastValues() if self.policy.last_value else None
        """A last-value queue's index (:mod:`gateway.broker.last_value`); None for other queues."""
        self.page: QueuePage | None = None
        self.paged_out = 0
        """Messages paged out since start."""
        self._searched: set[QueueSubscription] = set()
        """Consumers whose selector accepts nothing in the page (searched, and nothing
        it accepts was paged out since)."""
        self._search_at: dict[QueueSubscription, Key] = {}
        """How far the page was searched for each selective consumer: every paged message up
        to that key is refused by its selector or was taken.  A search resumes there (a
        search stops after :data:`SEARCH_SLICE` seconds, to go on in the next reactor turn)."""
        self._search_later = False
        """Whether a dispatch is scheduled to go on with a search that ran out of time."""
        self.enqueued = 0
        """Messages that entered this queue since start (redeliveries not counted again)."""
        self.dequeued = 0
        """Messages consumers acknowledged (or auto-acknowledged) from this queue since start."""
        self.expired_count = 0
        """Messages that expired in this queue since start (admin metrics)."""
        self.dead_lettered_count = 0
        """Messages moved from this queue to its dead-letter queue since start (admin metrics)."""
        self.subscribed = 0
        """Consumers that attached since start: activity, as a message sent or taken is (a queue a client
        subscribes to now and then is not collected as inactive between its visits)."""
        self.scheduled = 0
        """Scheduled messages' jobs that will send to this queue, kept since start and not done (the
        broker counts them): the queue is not collected while it waits for one."""
        self.settling: set[QueueSubscription] | None = None
        """Closed subscriptions whose open transaction still holds deliveries of this queue (an ABORT
        puts them back here): the queue is not collected while one does (:mod:`gateway.broker.collection`);
        None until there is one (an empty set is 216 bytes a queue)."""

    def __len__(self) -> int:
        page = self.page
        return len(self._heap) + (page.count if page is not None else 0)

    @property
    def paged(self) -> int:
        """Pending messages paged out."""
        return self.page.count if self.page is not None else 0

    @property
    def paged_size(self) -> int:
        """Counted bytes of the pending messages paged out."""
        return self.page.size if self.page is not None else 0

    @property
    def inflight(self) -> int:
        """Deliveries handed to consumers and not yet acknowledged."""
        return sum(len(consumer.unacked) + len(consumer.held) for consumer in self.consumers)

    def accepts(self, message: Message) -> bool:
        """Whether ``message`` passes this queue's filter."""
        return self.filter is None or self.filter(message)

    def full(self, size: int = 0) -> bool:
        """Whether ``size`` more bytes would pass this queue's or the broker's memory limit."""
        if self.max_size and self.memory + size > self.max_size:
            return True
        usage = self.usage
        return usage.used + size > usage.limit

    # -- memory and page ----------------------------------------------------

    def _room(self) -> int:
        """Bytes one read of the page may bring back: what the limits leave, at most
        :data:`PAGE_IN_BYTES` (a read takes one message even when that is 0)."""
        room = self.usage.limit - self.usage.used
        if self.max_size:
            room = min(room, self.max_size - self.memory)
        # (when other queues hold the memory, still read a useful chunk: an eighth of the
        # limit, at most 64 KiB; the overshoot is bounded by that per queue being consumed)
        floor = min(PAGE_IN_FLOOR, self.usage.limit // 8, self.max_size // 8 if self.max_size else PAGE_IN_FLOOR)
        return max(0, floor, min(room, PAGE_IN_BYTES))

    def _hold(self, entry: Entry) -> None:
        heapq.heappush(self._heap, entry)
        if entry[2].expiration:
            self._expiring = True
        self.memory += entry[3]
        self.usage.add(entry[3])

    def _released(self, entry: Entry) -> None:
        """``entry`` left the heap for good (delivered, expired, removed)."""
        self.memory -= entry[3]
        self.usage.release(entry[3])
        if self.last_values is not None:
            self.last_values.forget(entry[2])

    def _page_out(self, entry: Entry) -> bool:
        page = self.page
        if page is None:
            page = self.page = self.owner.page_file().queue(self._not_paged)
        file = page.file
        if file.failing and not file.usable():  # (a page-out failed a moment ago: memory keeps the messages)
            return False
        failures, flushes = page.failures, page.flushes
        try:
            page.add(*entry)
        except (StoreError, sqlite3.Error, OSError) as error:  # (the file cannot be opened)
            self._not_paged([], error)
            return False
        if page.failures != failures:
            return True  # (not paged after all: _not_paged holds it in memory)
        if page.flushes != flushes and file.succeeded():
            self.log.info("the page file takes messages again ({queue} pages its messages out)", queue=self.name)
        self.paged_out += 1
        if page.count == 1:
            self.owner.paging(self, True)
        if self._searched:
            message = entry[2]
            self._searched = {c for c in self._searched if c.selector is None or not c.selector(message)}
        if self._search_at:
            key = (entry[0], entry[1])
            for consumer, searched in list(self._search_at.items()):
                if key <= searched and (consumer.selector is None or consumer.selector(entry[2])):
                    del self._search_at[consumer]
        return True

    def _not_paged(self, entries: list[Entry], error: BaseException) -> None:
        """A page-out failed (rolled back): memory keeps ``entries``, past the limit."""
        for entry in entries:
            self._hold(entry)
        page = self.page
        if page is not None and page.file.failed():  # (once per episode, not per message)
            self.log.error("messages of {queue} are kept in memory past the limit: they cannot be paged out "
                           "({error}); the page file is tried again every {seconds} s",
                           queue=self.name, error=error, seconds=RETRY_SECONDS)
        if entries and page is not None and not page.count:
            self.owner.paging(self, False)

    def _page_in(self, entries: list[Entry]) -> None:
        for entry in entries:
            self._hold(entry)
        if entries and self.page is not None and not self.page.count:
            self.owner.paging(self, False)

    def _taken_from_page(self, entries: list[Entry]) -> list[Entry]:
        """``entries`` were taken from the page for good (never held in memory)."""
        if entries and self.page is not None and not self.page.count:
            self.owner.paging(self, False)
        return entries

    # -- pending messages -----------------------------------------------------

    def enqueue(self, message: Message, size: int = 0) -> None:
        """Add a message (paged out when memory is full) and try to dispatch it; ``size`` is its
        :func:`message_size` when the caller knows it (a topic's message enters many queues).

        Issue 39: the queue's only consumer, an auto-ack one with credit and no selector, gets the
        message here, without :meth:`_hand_over` and :meth:`QueueSubscription.take`, when their
        conditions hold (nothing pending, not inside a dispatch, no expiration, no group, room in
        memory and under ``max_size``): the same sequence number, counts, refusal and dispatch."""
        if self.last_values is not None:
            replaced = self.last_values.replace(message)
            if replaced is not None:
                for old in self.remove_pending({replaced}):
                    self.owner.replaced(self, old)
        consumers = self.consumers
        if len(consumers) == 1 and not self._heap:
            target = consumers[0]
            page = self.page
            if (
                target.auto and not target.paused and not target.closed and target.selector is None
                and not self._dispatching and not message.expiration and (page is None or page.head is None)
                and GROUP_ID not in message.properties
            ):
                # (issue 39: the usual 1 -> 1 delivery: _hand_over and take in one step, as fan_out does)
                size = size or message_size(message)
                usage = self.usage
                if (
                    not usage.waiting and not usage.reported and usage.used + size <= usage.limit
                    and not (self.max_size and self.memory + size > self.max_size)
                ):
                    seq = next(self._seq)
                    self.enqueued += 1
                    self._rr = 1  # (as _pick with one consumer)
                    self._dispatching = True
                    try:
                        if target.consumer.deliver(message, seq) is False:
                            target._refused(seq, message)
                        else:
                            self.dequeued += 1
                            self.owner.auto_consumed(self, message)
                            if self.last_values is not None:
                                self.last_values.forget(message)
                    finally:
                        self._dispatching = False
                    page = self.page
                    if self._heap or self._again or (page is not None and page.head is not None):
                        self.dispatch()  # (what the dispatch loop does after a take; a refused message is back in)
                    return
        entry = (-message.priority, next(self._seq), message, size or message_size(message))
        self.enqueued += 1
        if len(consumers) == 1 and not self._heap and self._hand_over(entry):
            return
        self._add(entry)
        if self.consumers:
            self.dispatch()

    def _hand_over(self, entry: Entry) -> bool:
        """Deliver ``entry`` to the queue's only consumer without holding it first, when that
        is what :meth:`_add` and :meth:`dispatch` would do with it: nothing pending (in memory
        or paged), not inside a dispatch, the consumer has credit and accepts it, it has no
        expiration and memory has room for it, with no one waiting for room or for the
        "back under the limit" report (holding and releasing it would change nothing).
        False (nothing done) otherwise."""
        page = self.page
        message = entry[2]
        if self._dispatching or message.expiration or (page is not None and page.head is not None):
            return False
        if self.groups is not None and GROUP_ID in message.properties and group_of(message) is not None:
            return False  # (the dispatch loop assigns its group)
        target = self.consumers[0]
        if not (target.auto and not target.paused and not target.closed) and not target.has_credit():
            return False  # (issue 39: an auto-ack consumer's credit read without a call)
        if target.selector is not None and not target.selector(message):
            return False
        usage = self.usage
        if usage.waiting or usage.reported:
            return False
        size = entry[3]
        if usage.used + size > usage.limit or (self.max_size and self.memory + size > self.max_size):
            return False  # (self.full(size), read here without a call)
        self._rr = 1  # (as _pick with one consumer)
        self._dispatching = True
        if self.last_values is not None:
            self.last_values.forget(message)  # (a refusal puts it back: requeue)
        try:
            target.take(entry[1], message)
        finally:
            self._dispatching = False
        if self._heap or self._again or (self.page is not None and self.page.head is not None):
            self.dispatch()  # (what the dispatch loop does after a take)
        return True

    def attach_backlog(self, tail: StoredTail, last_seq: int) -> None:
        """Recovery: the queue's stored messages, left in the store (lazy recovery) and
        read in order as the queue reaches them; later messages come after them."""
        if not tail.count:
            return
        page = self.page
        if page is None:
            page = self.page = self.owner.page_file().queue(self._not_paged)
        self.enqueued += tail.count
        self._seq = itertools.count(last_seq + 1)
        page.attach(tail)
        if self.last_values is not None:  # (read back now: a newer message must find the one it replaces)
            self.enqueued -= tail.count
            for entry in self._taken_from_page(page.take_all()):
                self.enqueue(entry[2], entry[3])
        if self.consumers:
            self.dispatch()

    def requeue(self, message: Message, seq: int) -> None:
        """Put a message back at its original place in the order."""
        if self.last_values is not None:
            self.last_values.restore(message)
        self._add((-message.priority, seq, message, message_size(message)))

    def _add(self, entry: Entry) -> None:
        page = self.page
        behind = page is not None and page.head is not None and (entry[0], entry[1]) > page.head
        if (behind or self.full(entry[3])) and self._page_out(entry):
            if self.usage.used + entry[3] > self.usage.limit:
                self.usage.reached()
            return
        self._hold(entry)

    def messages(self, limit: int | None = None) -> list[Message]:
        """Pending messages in dispatch order, paged ones included (for inspection and tests);
        the first ``limit`` of them."""
        held = sorted(self._heap)
        page = self.page
        if page is None or not page.count:
            return [entry[2] for entry in held[:limit]]
        wanted = len(held) + page.count if limit is None else max(0, limit)
        merged = heapq.merge(held[:wanted], page.peek(wanted))
        return [entry[2] for entry in itertools.islice(merged, wanted)]

    def purge_expired(self) -> int:
        """Drop every expired pending message, in memory or paged; returns how many."""
        now = self.owner.now_ms()
        keep = []
        dropped = 0
        expiring = False
        for entry in self._heap if self._expiring else ():
            if entry[2].is_expired(now):
                dropped += 1
                self._released(entry)
                self.owner.expired(self, entry[2])
            else:
                keep.append(entry)
                expiring = expiring or bool(entry[2].expiration)
        self._expiring = expiring
        if dropped:
            heapq.heapify(keep)
            self._heap = keep
        page = self.page
        if page is not None and page.count:
            for entry in self._taken_from_page(page.take_expired(now)):
                dropped += 1
                if self.last_values is not None:
                    self.last_values.forget(entry[2])
                self.owner.expired(self, entry[2])
        return dropped

    def drain(self) -> list[Message]:
        """Remove and return every pending message (queue deletion)."""
        held = sorted(self._heap)
        for entry in held:
            self._released(entry)
        self._heap = []
        page = self.page
        if page is not None and page.count:
            held = list(heapq.merge(held, self._taken_from_page(page.take_all())))
        return [entry[2] for entry in held]

    def discard(self) -> int:
        """Forget every pending message without reading the paged ones back (a dropped
        durable subscription, a deleted temporary queue); returns how many there were."""
        count = len(self)
        self.detached = True
        for entry in self._heap:
            self._released(entry)
        self._heap = []
        page = self.page
        if page is not None and page.count:
            page.clear()
            self.owner.paging(self, False)
        return count

    def remove_pending(self, message_ids: set[str] | None = None) -> list[Message]:
        """Take pending messages out of the queue without delivering them: those whose
        id is in ``message_ids`` (None: all), in dispatch order.  In-flight ones stay."""
        if message_ids is None:
            return self.drain()
        keep = [entry for entry in self._heap if entry[2].message_id not in message_ids]
        taken = []
        if len(keep) != len(self._heap):
            taken = sorted(entry for entry in self._heap if entry[2].message_id in message_ids)
            for entry in taken:
                self._released(entry)
            heapq.heapify(keep)
            self._heap = keep
        page = self.page
        if page is not None and page.count:
            taken = sorted(taken + self._taken_from_page(page.take_ids(message_ids)))
        return [entry[2] for entry in taken]

    # -- consumers ------------------------------------------------------------

    def add_consumer(self, subscription: QueueSubscription) -> None:
        self.consumers.append(subscription)
        self.subscribed += 1
        if subscription.exclusive and self.exclusive is None:
            self.exclusive = subscription
        self.dispatch()

    def remove_consumer(self, subscription: QueueSubscription) -> None:
        if subscription in self.consumers:
            self.consumers.remove(subscription)
            self._searched.discard(subscription)
            self._search_at.pop(subscription, None)
            self._rr = 0
            if subscription is self.exclusive:
                self.exclusive = exclusive_owner(self.consumers)
            if self.groups is not None:
                self.groups.consumer_left(subscription)

    def dispatch(self) -> None:
        """Hand pending messages to consumers that have room for them."""
        if self._dispatching:
            self._again = True
            return
        if not self._heap and (self.page is None or self.page.head is None):
            return  # (nothing pending: what an ACK or a resume calls on a queue that keeps up)
        self._dispatching = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._dispatch_once()
        finally:
            self._dispatching = False

    def _dispatch_once(self) -> None:
        heap = self._heap
        consumers = self.consumers if self.exclusive is None else [self.exclusive]
        now = -1  # (the clock is read when the first message with an expiration comes up)
        skipped: list[Entry] = []
        searched: Key | None = None  # (the page was searched up to this key in this round)
        owner = self.owner
        try:
            while True:
                if owner.removals_held and owner.holds_deliveries(self):
                    return  # (the store is behind with removals: the owner dispatches again once it caught up)
                page = self.page
                if page is not None and page.head is not None:
                    if not skipped:
                        if not heap or page.head < (heap[0][0], heap[0][1]):
                            # (the page's head comes before anything in memory)
                            self._page_in(page.read(PAGE_IN_ROWS, self._room()))
                    elif not heap:
                        if not self._search_page(consumers) and not self._search_groups(consumers):
                            return
                    elif page.head < (heap[0][0], heap[0][1]) and (searched is None or searched < heap[0][:2]):
                        # Selective consumers skip what memory holds: a paged message they accept
                        # may come before the next one in memory.
                        searched = self._search_before(consumers, (heap[0][0], heap[0][1]))
                        if searched is None:  # (out of time: goes on in the next reactor turn)
                            return
                if not heap:
                    return
                if len(consumers) == 1:  # (a topic subscriber's queue, a queue with one consumer)
                    target = consumers[0]
                    if not target.has_credit():
                        return
                    ready = None
                else:
                    ready = [consumer for consumer in consumers if consumer.has_credit()]
                    if not ready:
                        return
                entry = heapq.heappop(heap)
                message = entry[2]
                if message.expiration:
                    if now < 0:
                        now = self.owner.now_ms()
                    if message.is_expired(now):
                        self._released(entry)
                        self.owner.expired(self, message)
                        continue
                groups = self.groups
                group = group_of(message) if groups is not None and self.exclusive is None else None
                first = False  # (whether this message's group is newly assigned to target)
                if group is not None:
                    grouped = self._grouped(group, message, [target] if ready is None else ready)
                    if grouped is None:  # (its owner has no room, or no one takes it: it waits)
                        skipped.append(entry)
                        continue
                    target, message, first = grouped
                elif ready is None:
                    # (what _pick does with one consumer ready)
                    if target.selector is not None and not target.selector(message):
                        skipped.append(entry)
                        continue
                    self._rr = 1
                else:
                    picked = self._pick(ready, message)
                    if picked is None:
                        skipped.append(entry)
                        continue
                    target = picked
                self._released(entry)
                if not target.take(entry[1], message):
                    if first and group is not None and groups is not None:
                        # (refused, so not delivered: the group is no one's, as before it was picked)
                        groups.close(group)
                elif group is not None and groups is not None and closes_group(message):
                    groups.close(group)
        finally:
            for entry in skipped:
                heapq.heappush(heap, entry)

    def _search_before(self, consumers: list[QueueSubscription], before: Key) -> Key | None:
        """Bring the paged messages before ``before`` that a ready consumer's selector accepts
        into memory; returns the key searched up to, None when the search ran out of time
        (dispatching goes on in a later reactor turn).  Without selectors, what memory skipped
        waits for its groups' owners: :meth:`_search_groups_before`."""
        page = self.page
        searching = [c for c in consumers if c.has_credit() and c.selector is not None]
        if page is None:
            return before
        if not searching:
            return self._search_groups_before(consumers, before)
        found, stopped = self._search(page, searching, before)
        if found:
            self._page_in(found)
        if stopped:
            return None
        return (found[-1][0], found[-1][1]) if found else before

    def _search_page(self, consumers: list[QueueSubscription]) -> bool:
        """The ready consumers refuse everything memory holds: bring the first paged
        messages one of their selectors accepts into memory; False when there are none
        (or none yet: a search that ran out of time goes on in a later reactor turn)."""
        page = self.page
        if page is None or not page.count:
            return False
        searching = [c for c in consumers if c.has_credit() and c.selector is not None and c not in self._searched]
        if not searching:
            return False
        found, stopped = self._search(page, searching, None)
        if not found:
            if not stopped:
                self._searched.update(searching)
            return False
        self._page_in(found)
        return True

    def _search(
        self, page: QueuePage, searching: list[QueueSubscription], before: Key | None
    ) -> tuple[list[Entry], bool]:
        """One search of the page for ``searching``'s selectors (up to the key ``before``, None:
        to the page's end), within :data:`SEARCH_SLICE`; (what it took, whether it ran out of
        time).

        It starts where the one of them that was searched for least got to (:attr:`_search_at`;
        from the page's head when one of them was never searched for), so what it covers joins
        what each of them was searched for before, and it moves each of them on to where it got:
        a search that stops (after at least one message) starts the next one past the last
        message it looked at, never again where it started, so a search in slices ends."""
        search_at = self._search_at
        after: Key | None = None
        for consumer in searching:
            known = search_at.get(consumer)
            if known is None:
                after = None
                break
            if after is None or known < after:
                after = known
        selectors = [consumer.selector for consumer in searching if consumer.selector is not None]

        def accepted(message: Message) -> bool:
            return any(selector(message) for selector in selectors)

        found = page.search(accepted, PAGE_IN_ROWS, self._room(), after=after, before=before, budget=SEARCH_SLICE)
        stopped = page.stopped
        # (every paged message up to ``reached`` is refused by all of these selectors or was taken:
        # where it stopped, the last it took (one it accepts may follow, left for room), or all up
        # to ``before``, which is in memory; at the page's end, _searched says it)
        reached = stopped if stopped is not None else (found[-1][0], found[-1][1]) if found else before
        if reached is not None:
            for consumer in searching:
                known = search_at.get(consumer)
                if known is None or known < reached:
                    search_at[consumer] = reached
        if stopped is not None and not self._search_later:
            self._search_later = page.file.later(self._searched_on)
        return found, stopped is not None

    def _search_groups(self, consumers: list[QueueSubscription]) -> bool:
        """What memory holds all waits for its groups' owners (no room): bring in the first paged
        messages a ready consumer may take (no group, a free group, or one a ready consumer owns);
        False when there are none within one search slice.  Without it a free group's message
        paged out behind them waited until the owners acked."""
        takeable = self._takeable(consumers)
        if takeable is None:
            return False
        assert self.page is not None
        # (one slice from the head, not resumed in later turns: while the owners have no room a
        # search would otherwise run for ever; the next ACK or new consumer searches again)
        found = self.page.search(takeable, PAGE_IN_ROWS, self._room(), budget=SEARCH_SLICE)
        if found:
            self._page_in(found)
            return True
        return False

    def _search_groups_before(self, consumers: list[QueueSubscription], before: Key) -> Key:
        """Memory skipped messages that wait for their groups' owners, and the page's head comes
        before the next one in memory (``before``): bring in the paged messages before it a ready
        consumer may take, so a worse message in memory does not pass them; one slice, as
        :meth:`_search_groups` (one deeper waits, docs/stomp.md).  Returns the key searched up to."""
        takeable = self._takeable(consumers)
        if takeable is None:
            return before
        assert self.page is not None
        found = self.page.search(takeable, PAGE_IN_ROWS, self._room(), before=before, budget=SEARCH_SLICE)
        if not found:
            return before
        self._page_in(found)
        return found[-1][0], found[-1][1]

    def _takeable(self, consumers: list[QueueSubscription]) -> Callable[[Message], bool] | None:
        """Whether a ready consumer may take a message now (no group, a free group or one a ready
        consumer owns, and its selector accepts it); None when no group is owned (nothing waits
        for an owner), no consumer is ready, or nothing is paged."""
        groups, page = self.groups, self.page
        if groups is None or page is None or not page.count or self.exclusive is not None:
            return None
        if not len(groups):
            return None
        ready = [consumer for consumer in consumers if consumer.has_credit()]
        if not ready:
            return None

        def takeable(message: Message) -> bool:
            group = group_of(message)
            owner = groups.owner(group) if group is not None else None
            takers = ready if owner is None else [owner] if owner in ready else []
            return any(taker.selector is None or taker.selector(message) for taker in takers)

        return takeable

    def _searched_on(self) -> None:
        self._search_later = False
        self.dispatch()

    def _grouped(
        self, group: str, message: Message, ready: list[QueueSubscription]
    ) -> tuple[QueueSubscription, Message, bool] | None:
        """The consumer for a message of ``group`` (its owner, or a new one it is assigned to:
        the message then carries ``JMSXGroupFirstForConsumer``, and the third item is True);
        None when it must wait.  A new owner that refuses the message (its transport is full)
        is no owner: the dispatch loop closes the group again."""
        assert self.groups is not None
        owner = self.groups.owner(group)
        if owner is not None:
            if owner not in ready or (owner.selector is not None and not owner.selector(message)):
                return None
            return owner, flagged(message, False), False
        picked = self._pick(ready, message)
        if picked is None:
            return None
        self.groups.assign(group, picked)
        return picked, flagged(message, True), True

    def _pick(self, ready: list[QueueSubscription], message: Message) -> QueueSubscription | None:
        count = len(ready)
        start = self._rr % count
        for offset in range(count):
            consumer = ready[(start + offset) % count]
            if consumer.selector is None or consumer.selector(message):
                self._rr = start + offset + 1
                return consumer
        return None


def fan_out(queues: list[MessageQueue], message: Message, size: int) -> None:
    """Issue 39: ``message`` (``size``: its :func:`message_size`) enters each of ``queues`` (a
    topic's subscriber queues, of one owner), in their order, as :meth:`MessageQueue.enqueue` would
    put it into each, with the conditions that are the message's or the owner's read once.

    A message with an expiration or a group takes ``enqueue`` everywhere; so does one the owner's
    memory has no room for (or while a sender waits for room, or the limit's report is out).
    Otherwise each queue in the plain state of :meth:`MessageQueue._hand_over` (one consumer with
    credit and no selector, nothing pending in memory or paged, not inside a dispatch, not a
    last-value queue, room under its ``max_size``) is handed the message here: the sequence number
    and the ``enqueued``/``dequeued`` counts ``enqueue`` and ``take`` make, an auto-ack delivery
    consumed at once (:meth:`QueueOwner.auto_consumed`; a non-persistent message's copies are
    counted in one :meth:`QueueOwner.auto_consumed_copies` at the end), a client-ack one through
    :meth:`QueueSubscription.take`, a refused one put back (the GlassFish rule).  Any other queue
    takes ``enqueue``.  The memory is read again after anything that may have held a message (an
    ``enqueue``, a refusal, a dispatch); a hand-over holds nothing, so a stale "room" never takes
    memory past its limit."""
    if message.expiration or GROUP_ID in message.properties:
        for queue in queues:
            queue.enqueue(message, size)
        return
    usage = queues[0].usage
    persistent = message.persistent
    copies = 0
    room = not usage.waiting and not usage.reported and usage.used + size <= usage.limit
    try:
        for queue in queues:
            consumers = queue.consumers
            if (room and len(consumers) == 1 and not queue._heap and not queue._dispatching
                    and queue.last_values is None):
                target = consumers[0]
                page = queue.page
                if (
                    not target.paused and not target.closed and target.selector is None
                    and (target.auto or len(target.unacked) < target.prefetch)
                    and (page is None or page.head is None)
                    and not (queue.max_size and queue.memory + size > queue.max_size)
                ):
                    seq = next(queue._seq)
                    queue.enqueued += 1
                    queue._rr = 1
                    queue._dispatching = True
                    try:
                        if not target.auto:
                            target.take(seq, message)
                        elif target.consumer.deliver(message, seq) is False:
                            target._refused(seq, message)
                        else:
                            queue.dequeued += 1
                            if persistent:
                                queue.owner.auto_consumed(queue, message)
                            else:
                                copies += 1
                    finally:
                        queue._dispatching = False
                    page = queue.page
                    if queue._heap or queue._again or (page is not None and page.head is not None):
                        queue.dispatch()  # (what _hand_over does after a take; a refused message is back in)
                        room = not usage.waiting and not usage.reported and usage.used + size <= usage.limit
                    continue
            queue.enqueue(message, size)
            room = not usage.waiting and not usage.reported and usage.used + size <= usage.limit
    finally:  # (the copies handed over so far are counted even when a consumer raised)
        if copies:
            queues[0].owner.auto_consumed_copies(copies)


@implementer(IImmediateAcks, ITransactionalAcks)
class QueueSubscription:
    """One consumer of a :class:`MessageQueue` (ISubscription).

    Delivery tags are the queue's sequence numbers.  In ``auto`` mode a
    delivery is consumed as it is handed over; otherwise it waits in
    :attr:`unacked` until acked, nacked or the subscription closes.
    Deliveries acknowledged inside an open transaction move to :attr:`held`
    (:meth:`hold`): they free their prefetch credit, and closing the
    subscription leaves them for the transaction to settle (ack at COMMIT,
    nack at ABORT).
    """

    log = Logger()

    def __init__(
        self, queue: MessageQueue, spec: SubscriptionSpec, consumer: IConsumer, selector: Predicate | None
    ) -> None:
        self.queue = queue
        self.spec = spec
        self.consumer = consumer
        self.selector = selector
        self.auto = spec.ack_mode == "auto"
        self.exclusive = (spec.exclusive or queue.policy.exclusive) and not queue.transient
        self.prefetch = max(1, spec.prefetch)
        self.paused = False
        self.closed = False
        self.unacked: dict[int, Message] = {}
        self.held: dict[int, Message] = {}

    def has_credit(self) -> bool:
        if self.paused or self.closed:
            return False
        return self.auto or len(self.unacked) < self.prefetch

    def take(self, seq: int, message: Message) -> bool:
        """Deliver ``message`` (queue sequence ``seq``) to the consumer; False when the consumer
        refused it (:meth:`_refused`: it is back in the queue, undelivered)."""
        if self.auto:
            if self.consumer.deliver(message, seq) is False:
                self._refused(seq, message)
                return False
            queue = self.queue
            queue.dequeued += 1
            queue.owner.auto_consumed(queue, message)
            return True
        self.unacked[seq] = message
        if self.consumer.deliver(message, seq) is False:
            if self.unacked.pop(seq, None) is not None:
                self._refused(seq, message)
            return False
        if seq in self.unacked:
            self.queue.owner.delivered(self.queue, message)
        return True

    def _refused(self, seq: int, message: Message) -> None:
        """The consumer could not take the message (its connection is closing or
        its transport is full, the GlassFish rule): it was not delivered, so it
        goes back to its place uncounted, and this consumer waits for :meth:`resume`."""
        self.paused = True
        self.queue.requeue(message, seq)

    def ack(self, tags: list[Any]) -> Deferred[Any]:
        done = self.acknowledge(tags)
        return done if done is not None else succeed([])

    def acknowledge(self, tags: list[Any]) -> Deferred[Any] | None:
        """:class:`IImmediateAcks`: :meth:`ack` without a Deferred when no store removal is
        to be waited for (None then)."""
        queue = self.queue
        owner = queue.owner
        writes: list[Deferred[None]] | None = None
        for tag in tags:
            message = self.unacked.pop(tag, None) or self.held.pop(tag, None)
            if message is not None:
                queue.dequeued += 1
                removed = owner.consumed(queue, message)
                if removed is not None:
                    if writes is None:
                        writes = []
                    writes.append(removed)
        queue.dispatch()
        return gather(writes) if writes is not None else None

    def acknowledge_one(self, tag: Any) -> Deferred[None] | None:
        """:meth:`acknowledge` of one delivery, the STOMP session's ACK (issue 39: no list): None,
        or the Deferred of its store removal."""
        message = self.unacked.pop(tag, None)
        if message is None:
            message = self.held.pop(tag, None)
        queue = self.queue
        removed = None
        if message is not None:
            queue.dequeued += 1
            removed = queue.owner.consumed(queue, message)
        if queue._dispatching or queue._heap or (queue.page is not None and queue.page.head is not None):
            queue.dispatch()  # (what dispatch() itself would check first: no call when nothing is pending)
        return removed

    def nack(self, tags: list[Any]) -> Deferred[Any]:
        for tag in tags:
            message = self.unacked.pop(tag, None) or self.held.pop(tag, None)
            if message is not None:
                self._redeliver(tag, message)
        self.queue.dispatch()
        return succeed(None)

    def hold(self, tags: list[Any]) -> None:
        """:class:`ITransactionalAcks`: the deliveries were acknowledged (or
        rejected) in an open transaction: they free their prefetch credit now
        and stay this subscription's, even after it closes, until :meth:`ack`
        (COMMIT) or :meth:`nack` (ABORT) settles them."""
        for tag in tags:
            message = self.unacked.pop(tag, None)
            if message is not None:
                self.held[tag] = message
        if not self.closed:
            self.queue.dispatch()

    def _redeliver(self, seq: int, message: Message, put_back: bool = True) -> None:
        """A delivery of ``message`` failed: past ``max_redeliveries`` the owner dead-letters it,
        otherwise it goes back to its place (unless ``put_back`` is false)."""
        again = message.copy()
        again.redelivered = True
        again.redelivery_count = message.redelivery_count + 1
        if self.queue.owner.redelivering(self.queue, again) and put_back:
            self.queue.requeue(again, seq)

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        if self.paused and not self.closed:
            self.paused = False
            self.queue.dispatch()

    def close(self) -> Deferred[None]:
        return self._end(delete=False)

    def unsubscribe(self) -> Deferred[None]:
        return self._end(delete=True)

    def _end(self, delete: bool) -> Deferred[None]:
        if self.closed:
            return succeed(None)
        self.closed = True
        self.queue.remove_consumer(self)
        queue = self.queue
        if self.held and not queue.durable and not queue.transient:  # (a queue's: its transaction settles them
            # later, and the queue must still be the broker's then)
            if queue.settling is None:
                queue.settling = set()
            queue.settling.add(self)
        unacked, self.unacked = self.unacked, {}
        # A topic subscriber's backlog goes with it: nothing is put back, but a message whose
        # failed deliveries pass max_redeliveries is dead-lettered, as from a queue.
        for seq, message in unacked.items():
            self._redeliver(seq, message, put_back=not self.queue.transient)
        ended = self.queue.owner.subscription_closed(self.queue, self, delete)
        if self.queue.consumers:
            self.queue.dispatch()
        return ended if ended is not None else succeed(None)

