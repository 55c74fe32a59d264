"""The embedded broker's destinations by name: queues, topics and their subscribers, durable
subscriptions and who owns them, wildcard patterns, virtual topics' consumer queues, temporary
destinations.

Owns the maps from a name to its :class:`MessageQueue` objects, how a message finds the queues it
goes to (:meth:`Destinations.targets`), and creating and deleting destinations.  It writes nothing
to the store: the broker (:mod:`gateway.broker.broker`) does, told through ``on_consumer_queue``
when a queue becomes a virtual topic's consumer queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from twisted.logger import Logger

from gateway.broker.queue import MessageQueue, Predicate, QueueOwner
from gateway.broker.queue_wildcards import QueueWildcards
from gateway.broker.store.snapshot import durable_key
from gateway.broker.virtual_topics import VirtualTopics
from gateway.broker.wildcards import WildcardTopics, is_wildcard
from gateway.errors import DestinationError, NotOwner
from gateway.message.model import Message
from gateway.selector import compile_selector

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


def compile_predicate(selector: str | None) -> Predicate | None:
    """Compile a JMS selector into a predicate (None for no selector)."""
    if selector is None or not selector.strip():
        return None
    return compile_selector(selector).matches


class Destinations:
    """Every destination of one embedded broker; the queues it makes belong to ``owner``.

    :param on_consumer_queue: called with (queue, topic) when a new queue is a consumer queue of
        the virtual topic ``topic`` (the broker records it in the store).
    """

    log = Logger()

    def __init__(self, owner: QueueOwner, virtual: VirtualTopics,
                 on_consumer_queue: Callable[[str, str], None]) -> None:
        self.owner = owner
        self.virtual = virtual
        """The consumer queues of each virtual topic (:mod:`gateway.broker.virtual_topics`)."""
        self._on_consumer_queue = on_consumer_queue
        self.queues: dict[str, MessageQueue] = {}
        self.topics: dict[str, list[MessageQueue]] = {}
        """Topic name (or wildcard pattern) -> the queues of its subscribers, durable ones included."""
        self.wildcards = WildcardTopics()
        """Which names in :attr:`topics` are wildcard patterns."""
        self.queue_wildcards = QueueWildcards()
        """The live wildcard queue subscriptions (:mod:`gateway.broker.queue_wildcards`)."""
        self.durables: dict[str, MessageQueue] = {}
        self.durable_owners: dict[str, str | None] = {}
        """Durable subscription key -> the login that created it (None: created without a login)."""

    # -- lookup ------------------------------------------------------------

    def queue(self, destination: str) -> MessageQueue:
        """The queue ``destination``, created on first use."""
        queue = self.queues.get(destination)
        if queue is None:
            queue = self.queues[destination] = MessageQueue(self.owner, destination, destination)
            topic = self.virtual.add(destination)
            if topic is not None:  # (a virtual topic's consumer queue exists from now on, across restarts)
                self.log.info("{queue} is a consumer queue of the virtual topic {topic}", queue=destination,
                              topic=topic)
                self._on_consumer_queue(destination, topic)
            if self.queue_wildcards:  # (a new queue joins the wildcard subscriptions that match it)
                self.queue_wildcards.created(queue)
        return queue

    def stored_queue(self, key: str) -> MessageQueue | None:
        """The queue or durable subscription a store key names (None: an unknown durable)."""
        return self.durables.get(key) if key.startswith("durable:") else self.queue(key)

    def backlogs(self) -> Iterator[tuple[str, MessageQueue]]:
        """(key, queue) of every queue and durable subscription: the backlogs that page and are stored."""
        yield from self.queues.items()
        yield from self.durables.items()

    def targets(self, message: Message) -> list[MessageQueue]:
        """The queues ``message`` goes to: its queue, or its topic's subscribers, those of the
        wildcard patterns it matches and the virtual topic's consumer queues, that accept it."""
        destination = message.destination
        queue = self.queues.get(destination)
        if queue is not None and destination.startswith("/queue/"):  # (an existing queue, the common case)
            return [queue]
        is_queue = destination_kind(destination) == "queue"
        if destination.startswith(TEMP_PREFIXES) and destination not in (self.queues if is_queue else self.topics):
            raise DestinationError(f"temporary destination {destination!r} does not exist (its owner left)")
        if is_queue:
            return [self.queue(destination)]
        subscribers = self.topics.get(destination, ())
        if self.wildcards:  # (subscribers of the patterns the topic matches: gateway/broker/wildcards.py)
            patterns = self.wildcards.matching(destination)
            if patterns:
                subscribers = [*subscribers, *(q for pattern in patterns for q in self.topics.get(pattern, ()))]
        if self.virtual:  # (a virtual topic's consumer queues: gateway/broker/virtual_topics.py)
            consumer_queues = self.virtual.queues_of(destination)
            if consumer_queues:
                subscribers = [*subscribers, *(self.queues[name] for name in consumer_queues if name in self.queues)]
        return [queue for queue in subscribers if queue.filter is None or queue.filter(message)]  # (accepts, in place)

    def of_destination(self, destination: str) -> list[MessageQueue]:
        """The queue named ``destination`` and every subscriber queue of the topic so named."""
        queues = [self.queues[destination]] if destination in self.queues else []
        queues.extend(self.topics.get(destination, ()))
        return queues

    # -- topic subscribers -------------------------------------------------

    def subscribe_topic(self, destination: str, selector: Predicate | None) -> MessageQueue:
        """A new non-durable subscriber queue of the topic (or wildcard pattern) ``destination``."""
        queue = MessageQueue(self.owner, destination, destination, filter=selector, transient=True)
        self._add_subscriber(destination, queue)
        return queue

    def unsubscribe_topic(self, queue: MessageQueue) -> None:
        """A non-durable subscriber left: its queue and what it held go."""
        self._remove_subscriber(queue)
        queue.discard()  # (a topic subscriber's backlog ends with it: its memory and pages go)

    def _add_subscriber(self, destination: str, queue: MessageQueue) -> None:
        self.topics.setdefault(destination, []).append(queue)
        if is_wildcard(destination):
            self.wildcards.add(destination)

    def _remove_subscriber(self, queue: MessageQueue) -> None:
        subscribers = self.topics.get(queue.name, [])
        if queue in subscribers:
            subscribers.remove(queue)
        if not subscribers:
            self.wildcards.discard(queue.name)

    # -- durable subscriptions ---------------------------------------------

    def make_durable(self, key: str, destination: str, selector: str | None) -> MessageQueue:
        """The queue of the durable subscription ``key`` to ``destination`` (made now)."""
        queue = MessageQueue(self.owner, destination, key, filter=compile_predicate(selector), durable=True)
        queue.selector_text = selector
        self.durables[key] = queue
        self._add_subscriber(destination, queue)
        return queue

    def drop_durable(self, key: str) -> None:
        """Forget the durable subscription ``key`` and discard what it held (the store is the broker's)."""
        self.durable_owners.pop(key, None)
        queue = self.durables.pop(key, None)
        if queue is not None:
            self._remove_subscriber(queue)
            queue.discard()

    def check_owner(self, key: str, name: str, login: str | None) -> None:
        """NotOwner unless ``login`` may use the durable subscription ``key``: it has none yet, was
        created without a login, or by ``login``."""
        owner = self.durable_owners.get(key)
        if owner is not None and owner != login:
            raise NotOwner(f"durable subscription {name!r} belongs to another login")

    def durable_owner(self, client_id: str, durable_name: str) -> str | None:
        """The login that created the durable subscription (None: none, or created without a login)."""
        return self.durable_owners.get(durable_key(client_id, durable_name))

    # -- temporary and deleted destinations ---------------------------------

    def create_temporary(self, destination: str) -> None:
        """Create a temporary queue or topic (its owner's session asks the broker)."""
        if destination_kind(destination) == "queue":
            self.queue(destination)
        else:
            self.topics.setdefault(destination, [])

    def delete(self, destination: str) -> None:
        """Delete a destination; its consumers are told, its pending messages discarded."""
        queue = self.queues.pop(destination, None)
        if queue is not None:
            for subscription in list(queue.consumers):
                subscription.consumer.subscription_failed(DestinationError(f"{destination} was deleted"))
            dropped = queue.discard()
            if dropped:
                self.log.info("deleted {destination} with {count} undelivered messages",
                              destination=destination, count=dropped)
        self.topics.pop(destination, None)

    def purge_expired(self) -> int:
        """Drop expired messages everywhere; returns how many."""
        dropped = sum(queue.purge_expired() for queue in self.queues.values())
        dropped += sum(queue.purge_expired() for queue in self.durables.values())
        for subscribers in self.topics.values():
            dropped += sum(queue.purge_expired() for queue in subscribers if not queue.durable)
        return dropped
