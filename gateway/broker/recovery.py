"""Recovery of the embedded broker: its queues and durable subscriptions rebuilt from the
store's :class:`Snapshot` at start.

Owns the order of a recovery: durable subscriptions, virtual topics' consumer queues and the queues
the console created (configured: they exist without messages and are never collected) first, then
the messages (or, with lazy recovery, each backlog's count and a reader of the rest), and the stored
messages whose redelivery count passed ``max_redeliveries`` (a delivery was under way at the crash)
sent to their dead-letter queue as a NACK would have; a warning when what it finds holds more
destinations than ``max_destinations`` allows (all are kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.broker.destinations import Destinations
from gateway.broker.limits import MESSAGE_OVERHEAD
from gateway.broker.metrics import BrokerMetrics
from gateway.broker.paging.page_file import StoredTail
from gateway.broker.queue import MessageQueue
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.snapshot import DURABLE_PREFIX, BacklogRow, Snapshot, StoredBacklog, configured_queue_of
from gateway.broker.store.sqlite_records import decode_message
from gateway.broker.virtual_topics import queue_of_record
from gateway.deferreds import gather
from gateway.errors import StoreError
from gateway.message.model import Message

DeadLetter = Callable[[MessageQueue, Message, str], Deferred[None]]
"""Moves a message of a queue to its dead-letter queue, for a reason; fires once stored there."""


class Recovery:
    """Rebuilds ``destinations`` from a snapshot."""

    log = Logger()

    def __init__(self, destinations: Destinations, settings: BrokerSettings, metrics: BrokerMetrics,
                 dead_letter: DeadLetter) -> None:
        self.destinations = destinations
        self.settings = settings
        self.metrics = metrics
        self.dead_letter = dead_letter

    def recover(self, snapshot: Snapshot) -> Deferred[Any]:
        """Rebuild state from a store snapshot; fires when recovery's own writes are stored.

        A stored message's redelivery count includes a delivery that was under way when the
        broker stopped (see ``EmbeddedBroker.delivered``); one past ``max_redeliveries`` goes
        to the dead-letter queue, as it would have on a NACK.
        """
        destinations = self.destinations
        configured: list[str] = []
        consumer_queues = 0
        for record in snapshot.durables:
            consumer_queue = queue_of_record(record.key)
            if consumer_queue is not None:  # (a virtual topic's consumer queue: it exists without messages)
                consumer_queues += 1
                destinations.virtual.add(consumer_queue)
                destinations.queue(consumer_queue, record.owner)  # (held by its maker again: gateway/broker/quota.py)
                continue
            configured_queue = configured_queue_of(record.key)
            if configured_queue is not None:  # (made after the rest: a consumer queue keeps its maker's login)
                configured.append(configured_queue)
                continue
            destinations.make_durable(record.key, record.destination, record.selector, record.owner)
            destinations.durable_owners[record.key] = record.owner
        for name in configured:  # (the console's queues: they exist without messages, never collected)
            destinations.queue(name)  # (counted against max_destinations, as before the restart, never refused)
            destinations.configured.add(name)
        limit = self.settings.max_redeliveries
        moves: list[Deferred[None]] = []
        for key, message in snapshot.messages:
            queue = destinations.stored_queue(key)
            if queue is None:
                self.log.warn("dropping stored message {id} of unknown durable subscription {key}",
                              id=message.message_id, key=key)
                continue
            if message.redelivery_count > limit and not queue.name.startswith(self.settings.dead_letter_prefix):
                reason = f"delivery failed {message.redelivery_count} times (limit {limit})"
                moves.append(self.dead_letter(queue, message, reason))
                continue
            queue.enqueue(message)
        if snapshot.expired:
            self.metrics.expired.inc(snapshot.expired)
        backlog = snapshot.backlog
        if backlog is not None:
            self._attach_backlogs(snapshot.backlogs, backlog)
            moves.extend(self._dead_letter_backlogs(snapshot.redelivered))
        self._over_the_limit(len(configured), consumer_queues)
        paged = sum(queue.paged for _, queue in destinations.backlogs())
        self.log.info(
            "embedded broker recovered {messages} messages ({paged} left in the store until consumers reach them), "
            "{durables} durable subscriptions, {configured} queues the console created, purged {expired}",
            messages=len(snapshot.messages) + snapshot.stored, paged=paged, durables=len(destinations.durables),
            configured=len(configured), expired=snapshot.expired,
        )
        return gather(moves)

    def _over_the_limit(self, configured: int, consumer_queues: int) -> None:
        """A warning when the start finds more destinations than ``max_destinations`` allows (it was lowered
        since they were made, or their records came with a standby's takeover or a restore): all are kept
        (``configured`` queues the console created and ``consumer_queues`` virtual topics' consumer queues
        among them, counted as they were before the restart), never refused at start, and creations are
        refused until fewer exist."""
        quota = self.destinations.quota
        limit = quota.max_destinations
        if limit and quota.count > limit:
            self.log.warn(
                "the message store holds {count} destinations ({configured} queues the console created, {consumer} "
                "virtual topics' consumer queues, {durables} durable subscriptions, the rest queues with stored "
                "messages), more than [broker] max_destinations = {limit} allows: all are kept, and no destination "
                "is created until fewer than {limit} exist (delete queues in the console, or raise max_destinations)",
                count=quota.count, configured=configured, consumer=consumer_queues,
                durables=len(self.destinations.durables), limit=limit)

    def _attach_backlogs(self, backlogs: dict[str, tuple[int, int]], backlog: StoredBacklog) -> None:
        """Lazy recovery: each queue learns how many stored messages it has and reads them
        from the store, in order, as its consumers reach them (none is read now, so a
        restart takes the same time whatever the backlog)."""
        for key, (count, size) in backlogs.items():
            queue = self.destinations.stored_queue(key)
            if queue is None:
                self.log.warn("ignoring {count} stored messages of unknown durable subscription {key}",
                              count=count, key=key)
                continue
            queue.attach_backlog(StoredTail(backlog, key, count, size), backlog.last_seq)

    def _dead_letter_backlogs(self, redelivered: list[tuple[str, BacklogRow]]) -> list[Deferred[None]]:
        """Lazy recovery: the stored messages whose redelivery count passed ``max_redeliveries``
        leave their backlog for the dead-letter queue (the store finds them by an index, the
        rest is not read)."""
        limit = self.settings.max_redeliveries
        moves = []
        destinations = self.destinations
        for key, row in redelivered:
            rank, seq, message_id, expiration, size, redelivery, record = row
            queue = destinations.durables.get(key) if key.startswith(DURABLE_PREFIX) else destinations.queues.get(key)
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
            moves.append(self.dead_letter(queue, message, reason))
        return moves
