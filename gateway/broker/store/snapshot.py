"""What a message store gives back on open, and the store keys (durable subscriptions', configured
queues').

:class:`Snapshot` is the recovered state an :class:`IMessageStore` hands to
the broker at start-up; :class:`StoredBacklog` the messages it recovered
lazily.  The stores: :mod:`gateway.broker.store.memory_store` (the reference)
and :mod:`gateway.broker.store.sqlite_store`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gateway.message.model import Message

DURABLE_PREFIX = "durable:"

CONFIGURED_PREFIX = "configured:"
"""Key prefix of a configured queue's record among the store's durable records: a queue the admin console
created (or named when it existed), which exists, empty or not, until the console deletes it (Artemis
journals the queues its management creates; ActiveMQ keeps a destination its web console created).  It is
stored as a virtual topic's consumer queue is (:data:`gateway.broker.virtual_topics.RECORD_PREFIX`): a
durable record whose destination is the queue, without selector or owner, and no message under its key."""


def durable_key(client_id: str, name: str) -> str:
    """Store key of the durable subscription ``name`` of client ``client_id``.

    The client id has ``\\`` and ``:`` so that the first bare ``:``
    ends it: ``("a:b", "c")`` and ``("a", "b:c")`` get different keys, and ids
    without those characters keep the key they always had (stores written by
    earlier versions still match).
    """
    escaped = client_id.replace("\\", "\\\\").replace(":", "\\:")
    return f"{DURABLE_PREFIX}{escaped}:{name}"


def configured_key(queue: str) -> str:
    """The store record key of the configured queue ``queue`` (``/queue/name``)."""
    return CONFIGURED_PREFIX + queue


def configured_queue_of(key: str) -> str | None:
    """The configured queue a store record key names, else None."""
    return key[len(CONFIGURED_PREFIX):] if key.startswith(CONFIGURED_PREFIX) else None


@dataclass(slots=True)
class DurableRecord:
    """A durable topic subscription as stored."""

    key: str
    destination: str
    selector: str | None = None
    owner: str | None = None
    """The login that created it (None: created without authentication)."""


@dataclass(slots=True)
class StoredRow:
    """A stored message as the store holds it, not decoded (lazy recovery).

    :ivar seq: its place in the store's order.
    :ivar record: :func:`gateway.broker.store.sqlite_records.encode_message` bytes; the
        stored redelivery count is :attr:`redelivery`, not the record's.
    """

    seq: int
    queue: str
    message_id: str
    redelivery: int
    record: bytes


BacklogRow = tuple[int, int, str, int, int, int, bytes]
"""A stored message read lazily: (-priority, store seq, message id, expiration, record
length, redelivery count, record)."""


@dataclass(slots=True)
class Snapshot:
    """Everything a store holds, for recovery at start-up.

    :ivar messages: (queue key, message) pairs in the order they were stored;
        each message carries its stored redelivery count.
    :ivar expired: how many expired messages the store purged while opening.
    :ivar stored: messages not in :attr:`messages` (a store that recovers lazily).
    :ivar backlogs: a store that recovers lazily: queue key -> (messages, bytes of
        their records) it holds, none of them read yet.
    :ivar backlog: reads those messages in dispatch order when the broker needs them
        (:class:`StoredBacklog`); None when :attr:`messages` has all.
    """

    durables: list[DurableRecord] = field(default_factory=list)
    messages: list[tuple[str, Message]] = field(default_factory=list)
    expired: int = 0
    stored: int = 0
    backlogs: dict[str, tuple[int, int]] = field(default_factory=dict)
    backlog: StoredBacklog | None = None
    redelivered: list[tuple[str, BacklogRow]] = field(default_factory=list)
    """Lazy recovery: the stored messages delivered before (a redelivery count above 0), with
    their queue key, in stored order; they are part of :attr:`backlogs` too."""
    send_ids: list[tuple[str, int]] = field(default_factory=list)
    """The idempotency window (issue 35: :mod:`gateway.broker.idempotency`): (key, stored at ms), oldest first."""


class StoredBacklog(Protocol):
    """The messages a store recovered lazily, read in dispatch order (priority, then
    stored order) on the caller's thread, a few at a time."""

    last_seq: int
    """Stored messages past this seq came after the restart: never part of a backlog."""

    def read(self, queue: str, after: tuple[int, int], limit: int) -> list[BacklogRow]:
        """Up to ``limit`` messages of ``queue`` whose (-priority, seq) comes after ``after``."""

    def track(self, queue: str, rows: list[BacklogRow]) -> None:
        """``rows`` were read: acknowledging them (by message id) must find them."""
