"""Operator actions on the embedded broker's queues: browse, purge, remove one, move dead letters back,
create and delete a queue.

The admin console calls these (after its own authorization and confirmation);
they know nothing of HTTP.  Each works on a queue's *pending* messages: those
out for acknowledgement at a consumer stay where they are, as ActiveMQ's
purge and browse leave in-flight messages alone.  A persistent message that
leaves a queue here leaves the store too, so it does not come back at the
next start; a moved message is stored at its new queue before it is
forgotten at the old one (a crash in between may keep it in both: at least
once, never lost).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.queue import MessageQueue
from gateway.deferreds import gather
from gateway.errors import DestinationError
from gateway.message.model import Message

ORIGIN_PROPERTY = "original-destination"
"""The property the broker sets on a dead letter: the destination it failed on."""

CAUSE_PROPERTY = "dlqDeliveryFailureCause"
"""The property the broker sets on a dead letter: why it was dead-lettered."""


class QueueOperations:
    """Browse and change the pending messages of ``broker``'s queues."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker

    def queue(self, destination: str) -> MessageQueue:
        """The queue ``destination`` (``/queue/name``); KeyError naming it when the broker has none."""
        queue = self.broker.queues.get(destination)
        if queue is None:
            raise KeyError(f"the embedded broker has no queue {destination!r}")
        return queue

    def is_dead_letter_queue(self, destination: str) -> bool:
        """Whether ``destination`` is a dead-letter queue (its name has the configured prefix)."""
        return destination.startswith(self.broker.settings.dead_letter_prefix)

    def browse(self, destination: str, limit: int = 100) -> list[Message]:
        """The first ``limit`` pending messages of the queue, in delivery order; nothing is consumed."""
        return self.queue(destination).messages(max(0, limit))

    def purge(self, destination: str) -> Deferred[int]:
        """Drop every pending message of the queue; fires with how many once the store forgot them."""
        queue = self.queue(destination)
        dropped = queue.remove_pending(None)
        return self._forget(queue, dropped).addCallback(lambda _: len(dropped))

    def remove(self, destination: str, message_id: str) -> Deferred[bool]:
        """Drop the pending message ``message_id``; fires with whether it was pending there."""
        queue = self.queue(destination)
        dropped = queue.remove_pending({message_id})
        return self._forget(queue, dropped).addCallback(lambda _: bool(dropped))

    def move_to_origin(self, destination: str, message_ids: set[str] | None = None) -> Deferred[int]:
        """Send pending dead letters of the queue ``destination`` (all, or those in
        ``message_ids``) back to the destination each came from (its
        ``original-destination`` property), as fresh messages: not marked
        redelivered, redelivery count 0, without the dead-letter properties.
        Messages without an origin stay.  Fires with how many moved; if the
        broker refuses them (a temporary origin that is gone), they stay and
        the Deferred fails.
        """
        queue = self.queue(destination)
        if message_ids is None:
            message_ids = {m.message_id for m in queue.messages() if isinstance(m.properties.get(ORIGIN_PROPERTY), str)}
        taken = queue.remove_pending(message_ids)
        movable = [m for m in taken if isinstance(m.properties.get(ORIGIN_PROPERTY), str)]
        for message in taken:
            if message not in movable:
                queue.enqueue(message)
        if not movable:
            return succeed(0)
        moved = [_revived(message) for message in movable]
        sent: Deferred[None] = self.broker.send_batch(moved, deduplicate=False)  # (not a resend: issue 35)

        def stored(_: object) -> Deferred[int]:
            return self._forget(queue, movable).addCallback(lambda _: len(movable))

        def refused(failure: Failure) -> Failure:
            back = self.broker.destinations.queue(destination)  # (as it is now: collected meanwhile if empty)
            for message in movable:
                back.enqueue(message)
            return failure

        return sent.addCallbacks(stored, refused)

    def create_queue(self, destination: str) -> Deferred[bool]:
        """Make the queue ``destination`` (``/queue/name``) if the broker has none; fires with whether it
        was made, once its record is stored.  A queue the console creates (or names, existing) is configured
        (:meth:`EmbeddedBroker.configure_queue`): never collected when inactive
        (:mod:`gateway.broker.collection`), and recorded in the store, so that it exists, empty or not,
        after a restart or a standby's takeover until the console deletes it (with the memory store
        nothing survives a restart)."""
        if not destination.startswith("/queue/") or len(destination) == len("/queue/") \
                or any(c.isspace() or not c.isprintable() for c in destination):
            raise ValueError(f"{destination!r} is not a queue name such as /queue/orders")
        destinations = self.broker.destinations
        made = destination not in destinations.queues
        configured = destination in destinations.configured
        if made:
            destinations.create_queue(destination, None)  # (LimitReached past max_destinations)

        def unrecorded(failure: Failure) -> Failure:
            """The store refused the record (it is full, or closed: a standby before its takeover): the create
            leaves nothing behind (the queue it made, empty, goes again), and the answer is the failure."""
            if not configured:
                destinations.configured.discard(destination)
            queue = destinations.queues.get(destination)
            if made and queue is not None and not queue.consumers and not len(queue):
                destinations.remove_queue(destination)
                self.broker.virtual.remove(destination)  # (its record, if any, was refused too)
            return failure

        return self.broker.configure_queue(destination).addCallbacks(lambda _: made, unrecorded)

    def delete_queue(self, destination: str) -> Deferred[int]:
        """Delete the queue ``destination`` with its pending messages and its record (from the store too: a
        configured or consumer queue does not come back at the next start); fires with how many were dropped.
        Refused (:class:`DestinationError`) while consumers are attached: their in-flight messages would have
        nowhere to go back to."""
        queue = self.queue(destination)
        if queue.consumers:
            raise DestinationError(f"{destination} has {len(queue.consumers)} consumer(s): it is deleted only "
                                   "without consumers (close their connections first)")
        dropped = queue.remove_pending(None)
        self.broker.destinations.remove_queue(destination)
        queue.discard()  # (detached: a send still waiting for the store shows nothing in it)
        forgotten = self.broker.forget_queue(destination, configured=True)  # (its record too, if configured)
        return self._forget(queue, dropped).addCallback(lambda _: forgotten).addCallback(lambda _: len(dropped))

    def _forget(self, queue: MessageQueue, messages: list[Message]) -> Deferred[None]:
        """Remove the persistent ones of ``messages`` (taken from ``queue``) from the store."""
        store = self.broker.store
        writes = [store.remove(queue.key, m.message_id) for m in messages if m.persistent]
        if not writes:
            return succeed(None)
        return gather(writes).addCallback(lambda _: None)


def _revived(dead: Message) -> Message:
    """A copy of the dead letter ``dead`` addressed to where it came from, as if sent afresh."""
    message = dead.copy()
    origin = message.properties.pop(ORIGIN_PROPERTY)
    assert isinstance(origin, str)
    message.properties.pop(CAUSE_PROPERTY, None)
    message.destination = origin
    message.redelivered = False
    message.redelivery_count = 0
    return message
