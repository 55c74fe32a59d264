"""The embedded broker's destinations by name: queues, topics and their subscribers, durable
subscriptions and who owns them, wildcard patterns, virtual topics' consumer queues, temporary
destinations.

Owns the maps from a name to its :class:`MessageQueue` objects, how a message finds the queues it
goes to (:meth:`Destinations.targets`), and creating and deleting destinations; each creation and
deletion is told to the :class:`~gateway.broker.quota.DestinationQuota`, which judges the creations a
client asks for (``create_…`` methods; the broker's own, such as recovery and dead-letter queues, are
counted, never refused).  It writes nothing to the store: the broker (:mod:`gateway.broker.broker`)
does, told through ``on_consumer_queue`` when a queue becomes a virtual topic's consumer queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from twisted.logger import Logger

from gateway.broker.queue import MessageQueue, Predicate, QueueOwner
from gateway.broker.queue_wildcards import QueueWildcards
from gateway.broker.quota import CREATOR_PROPERTY, DestinationQuota
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

    :param on_consumer_queue: called with (queue, topic, login) when a new queue is a consumer queue
        of the virtual topic ``topic``, made by ``login`` (the broker records it in the store).
    :param quota: counts what exists and judges creations (no limit when not given).
    """

    log = Logger()

    def __init__(self, owner: QueueOwner, virtual: VirtualTopics,
                 on_consumer_queue: Callable[[str, str, str | None], None],
                 quota: DestinationQuota | None = None) -> None:
        self.owner = owner
        self.quota = quota or DestinationQuota()
        """The destinations held, counted, and the queues each login holds (:mod:`gateway.broker.quota`)."""
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
        self.temporary_topics: set[str] = set()
        """The temporary topics that exist (counted by the quota as destinations)."""
        self.configured: set[str] = set()
        """Queues the console created: configured, never collected when inactive (:mod:`gateway.broker.collection`)."""

    # -- lookup ------------------------------------------------------------

    def queue(self, destination: str, login: str | None = None) -> MessageQueue:
        """The queue ``destination``, created on first use (held by ``login``, and not judged by the
        limits: the broker's own creations; a client's go through :meth:`create_queue`)."""
        queue = self.queues.get(destination)
        if queue is None:
            queue = self.queues[destination] = MessageQueue(self.owner, destination, destination)
            self.quota.created(destination, login)
            topic = self.virtual.add(destination)
            if topic is not None:  # (a virtual topic's consumer queue exists from now on, across restarts)
                self.log.info("{queue} is a consumer queue of the virtual topic {topic}", queue=destination,
                              topic=topic)
                self._on_consumer_queue(destination, topic, login)
            if self.queue_wildcards:  # (a new queue joins the wildcard subscriptions that match it)
                self.queue_wildcards.created(queue)
        return queue

    def create_queue(self, destination: str, login: str | None) -> MessageQueue:
        """The queue ``destination`` a client (``login``) asked for: made now if it does not exist and the
        limits allow (else :class:`~gateway.errors.LimitReached`)."""
        queue = self.queues.get(destination)
        if queue is not None:
            return queue
        self.quota.admit(destination, login)
        return self.queue(destination, login)

    def admit_batch(self, messages: list[Message]) -> list[str]:
        """Raise what :meth:`targets` would for the parts of one batch (``messages``: a COMMIT's SENDs, a
        composite SEND's parts), before it makes any queue, so a refused batch creates none (a failed
        COMMIT applies nothing): :class:`~gateway.errors.LimitReached` when its new queues do not all fit
        the limits together, :class:`~gateway.errors.DestinationError` for a temporary destination that
        no longer exists (a reply to a requester that left).  Returns the queues the batch will make."""
        wanted: dict[str, str | None] = {}
        for message in messages:
            destination = message.destination
            if destination in self.queues or destination in wanted:
                continue
            is_queue = destination_kind(destination) == "queue"
            if destination.startswith(TEMP_PREFIXES):
                if destination not in (self.queues if is_queue else self.topics):
                    raise gone_temporary(destination)
                continue
            if is_queue:
                login = message.properties.get(CREATOR_PROPERTY)
                wanted[destination] = login if isinstance(login, str) else None
        if len(wanted) > 1:  # (one new queue is judged by create_queue, as a single SEND's)
            self.quota.admit_all(list(wanted.items()))
        return list(wanted)

    def remove_queue(self, destination: str) -> MessageQueue | None:
        """Forget the queue ``destination`` (the caller discards what it held); None: there was none."""
        queue = self.queues.pop(destination, None)
        if queue is not None:
            self.quota.removed(destination)
            self.configured.discard(destination)
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
            raise gone_temporary(destination)
        if is_queue:  # (a new queue, held by the login that sent: its verified JMSXUserID)
            login = message.properties.get(CREATOR_PROPERTY)
            return [self.create_queue(destination, login if isinstance(login, str) else None)]
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
            if not queue.name.startswith(TEMP_PREFIXES):  # (a topic nobody listens to holds nothing: its name
                self.topics.pop(queue.name, None)        # goes too, so new names do not pile up)

    # -- durable subscriptions ---------------------------------------------

    def make_durable(self, key: str, destination: str, selector: str | None, login: str | None = None) -> MessageQueue:
        """The queue of the durable subscription ``key`` to ``destination`` (made now, held by ``login``;
        the caller judged it against the limits)."""
        queue = MessageQueue(self.owner, destination, key, filter=compile_predicate(selector), durable=True)
        queue.selector_text = selector
        if key in self.durables:
            self.drop_durable(key)
        self.durables[key] = queue
        self.quota.created(key, login)
        self._add_subscriber(destination, queue)
        return queue

    def drop_durable(self, key: str) -> None:
        """Forget the durable subscription ``key`` and discard what it held (the store is the broker's)."""
        self.durable_owners.pop(key, None)
        queue = self.durables.pop(key, None)
        if queue is not None:
            self.quota.removed(key)
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

    def create_temporary(self, destination: str, login: str | None = None) -> None:
        """Create a temporary queue or topic (its owner's session asks the broker, for ``login``);
        :class:`~gateway.errors.LimitReached` past a limit."""
        if destination_kind(destination) == "queue":
            self.create_queue(destination, login)
        elif destination not in self.topics:
            self.quota.admit(destination, login)
            self.topics[destination] = []
            self.temporary_topics.add(destination)
            self.quota.created(destination, login)

    def delete(self, destination: str) -> None:
        """Delete a destination; its consumers are told, its pending messages discarded."""
        queue = self.remove_queue(destination)
        if queue is not None:
            for subscription in list(queue.consumers):
                subscription.consumer.subscription_failed(DestinationError(f"{destination} was deleted"))
            dropped = queue.discard()
            if dropped:
                self.log.info("deleted {destination} with {count} undelivered messages",
                              destination=destination, count=dropped)
        self.topics.pop(destination, None)
        if destination in self.temporary_topics:
            self.temporary_topics.discard(destination)
            self.quota.removed(destination)

    def purge_expired(self) -> int:
        """Drop expired messages everywhere; returns how many."""
        dropped = sum(queue.purge_expired() for queue in self.queues.values())
        dropped += sum(queue.purge_expired() for queue in self.durables.values())
        for subscribers in self.topics.values():
            dropped += sum(queue.purge_expired() for queue in subscribers if not queue.durable)
        return dropped


def gone_temporary(destination: str) -> DestinationError:
    """The refusal of a SEND to a temporary destination that does not exist (any more)."""
    return DestinationError(f"temporary destination {destination!r} does not exist (its owner left)")
