"""Virtual topics (ActiveMQ's): a topic whose messages each consumer group gets as a queue.

A SEND to ``/topic/VirtualTopic.orders`` reaches the topic's subscribers as any topic's does,
and a copy goes to every *consumer queue* of it: ``/queue/Consumer.<group>.VirtualTopic.orders``.
The consumers of one group share their queue (load-balanced, acknowledged, persistent, paged as
any queue), each group gets every message.  A consumer queue exists from its first use (a
SUBSCRIBE, a SEND, the console's create) until it is deleted, with or without consumers, across
restarts too: the broker records it in the message store (:data:`RECORD_PREFIX`), so a group
whose consumers are away, or not yet back after a restart, misses nothing.  As in ActiveMQ, a
message sent before a group's queue first existed is not in it.

:class:`VirtualTopicNames` reads the names (the prefixes come from ``[broker]``
``virtual_topic_prefix`` and ``virtual_topic_consumer_prefix``); :class:`VirtualTopics` is the
index topic -> consumer queues.  Pure: no Twisted, no broker.
"""

from __future__ import annotations

from dataclasses import dataclass

RECORD_PREFIX = "virtual:"
"""Key prefix of a consumer queue's record among the store's durable records."""

TOPIC = "/topic/"
QUEUE = "/queue/"


@dataclass(frozen=True, slots=True)
class VirtualTopicNames:
    """Which topics are virtual and how their consumer queues are named.

    :ivar topic_prefix: a topic whose name (after ``/topic/``) starts with it is virtual; "" turns
        virtual topics off.
    :ivar consumer_prefix: what comes before the topic's name in a consumer queue's name, its
        segments separated by ``.``, ``*`` standing for the group (one segment).
    """

    topic_prefix: str = "VirtualTopic."
    consumer_prefix: str = "Consumer.*."

    def __post_init__(self) -> None:
        if self.topic_prefix and (not self.consumer_prefix.endswith(".") or "*" not in self.consumer_prefix.split(".")):
            raise ValueError(f"virtual_topic_consumer_prefix {self.consumer_prefix!r} must end with '.' and have "
                             "a '*' segment for the consumer group (ActiveMQ's default: 'Consumer.*.')")

    def is_virtual(self, destination: str) -> bool:
        """Whether ``destination`` (``/topic/...``) is a virtual topic."""
        return bool(self.topic_prefix) and destination.startswith(TOPIC) \
            and destination[len(TOPIC):].startswith(self.topic_prefix)

    def topic_of(self, queue: str) -> str | None:
        """The virtual topic whose consumer queue ``queue`` (``/queue/...``) is, else None."""
        if not self.topic_prefix or not queue.startswith(QUEUE):
            return None
        segments = queue[len(QUEUE):].split(".")
        wanted = self.consumer_prefix.split(".")[:-1]
        if len(segments) <= len(wanted):
            return None
        for want, segment in zip(wanted, segments[:len(wanted)], strict=True):
            if not segment or (want != "*" and want != segment):
                return None
        topic = TOPIC + ".".join(segments[len(wanted):])
        return topic if self.is_virtual(topic) else None


class VirtualTopics:
    """The consumer queues of each virtual topic, in the order they came to exist."""

    def __init__(self, names: VirtualTopicNames) -> None:
        self.names = names
        self._queues: dict[str, dict[str, None]] = {}

    def __bool__(self) -> bool:
        return bool(self._queues)

    def add(self, queue: str) -> str | None:
        """Index ``queue`` if it is a consumer queue; the virtual topic it belongs to if it was not
        indexed yet (so the caller records it once), else None."""
        topic = self.names.topic_of(queue)
        if topic is None:
            return None
        queues = self._queues.setdefault(topic, {})
        if queue in queues:
            return None
        queues[queue] = None
        return topic

    def remove(self, queue: str) -> bool:
        """Forget the consumer queue ``queue`` (deleted); whether it was one."""
        topic = self.names.topic_of(queue)
        queues = self._queues.get(topic) if topic is not None else None
        if queues is None or queue not in queues:
            return False
        del queues[queue]
        if not queues:
            del self._queues[topic]  # type: ignore[arg-type]
        return True

    def queues_of(self, topic: str) -> list[str]:
        """The consumer queues of the virtual topic ``topic``."""
        queues = self._queues.get(topic)
        return [] if queues is None else list(queues)


def record_key(queue: str) -> str:
    """The store record key of the consumer queue ``queue``."""
    return RECORD_PREFIX + queue


def queue_of_record(key: str) -> str | None:
    """The consumer queue a store record key names, else None (a durable subscription's)."""
    return key[len(RECORD_PREFIX):] if key.startswith(RECORD_PREFIX) else None
