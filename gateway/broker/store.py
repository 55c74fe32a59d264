"""What a message store gives back on open, the store keys, and the memory store.

:class:`Snapshot` is the recovered state an :class:`IMessageStore` hands to
the broker at start-up.  :class:`MemoryStore` keeps nothing across restarts:
it is the store for non-persistent deployments (the broker does not even
write to it) and the reference for the store contract tests.  The SQLite
store lives in :mod:`gateway.broker.sqlite_store`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from gateway.interfaces import IMessageStore
from gateway.message.model import Message, now_millis

DURABLE_PREFIX = "durable:"


def durable_key(client_id: str, name: str) -> str:
    """Store key of the durable subscription ``name`` of client ``client_id``.

    The client id has ``\\`` and ``:`` so that the first bare ``:``
    ends it: ``("a:b", "c")`` and ``("a", "b:c")`` get different keys, and ids
    without those characters keep the key they always had (stores written by
    earlier versions still match).
    """
    escaped = client_id.replace("\\", "\\\\").replace(":", "\\:")
    return f"{DURABLE_PREFIX}{escaped}:{name}"


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
    :ivar record: :func:`gateway.broker.sqlite_records.encode_message` bytes; the
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


@implementer(IMessageStore)
class MemoryStore:
    """A store that keeps what it is given for this process only.

    Every write is at once 'durable' (its Deferred has fired when the call
    returns).  The broker does not write to it at all (nothing would survive
    a restart anyway); it is the reference the store contract tests hold
    every store to: closing and opening it again gives back what it holds,
    minus the messages expired by then (``clock``: the reactor, else wall time).
    """

    def __init__(self, clock: IReactorTime | None = None) -> None:
        self.clock = clock
        self._messages: dict[int, tuple[str, Message]] = {}
        self._durables: dict[str, DurableRecord] = {}
        self._seq = itertools.count()

    def open(self) -> Deferred[Snapshot]:
        now = int(self.clock.seconds() * 1000) if self.clock is not None else now_millis()
        expired = [seq for seq, (_, message) in self._messages.items() if message.is_expired(now)]
        for seq in expired:
            del self._messages[seq]
        return succeed(
            Snapshot(
                durables=[DurableRecord(r.key, r.destination, r.selector, r.owner) for r in self._durables.values()],
                messages=[(queue, message.copy()) for queue, message in self._messages.values()],
                expired=len(expired),
            )
        )

    def close(self) -> Deferred[None]:
        return succeed(None)

    def add(self, queue: str, message: Message) -> Deferred[None]:
        return self.add_batch([(queue, message)])

    def add_batch(self, entries: list[tuple[str, Message]]) -> Deferred[None]:
        for queue, message in entries:
            self._messages[next(self._seq)] = (queue, message.copy())
        return succeed(None)

    def _find(self, queue: str, message_id: str) -> int | None:
        for seq, (key, message) in self._messages.items():
            if key == queue and message.message_id == message_id:
                return seq
        return None

    def remove(self, queue: str, message_id: str) -> Deferred[None]:
        seq = self._find(queue, message_id)
        if seq is not None:
            del self._messages[seq]
        return succeed(None)

    def set_redelivery(self, queue: str, message_id: str, count: int) -> Deferred[None]:
        seq = self._find(queue, message_id)
        if seq is not None:
            message = self._messages[seq][1]
            message.redelivery_count = count
            message.redelivered = message.redelivered or count > 0
        return succeed(None)

    def add_durable(self, key: str, destination: str, selector: str | None,
                    owner: str | None = None) -> Deferred[None]:
        self._durables.pop(key, None)
        self._durables[key] = DurableRecord(key, destination, selector, owner)
        return succeed(None)

    def remove_durable(self, key: str) -> Deferred[None]:
        self._durables.pop(key, None)
        for seq in [seq for seq, (queue, _) in self._messages.items() if queue == key]:
            del self._messages[seq]
        return succeed(None)


def is_memory_store(store: Any) -> bool:
    """Whether writes to ``store`` complete synchronously (no durability wait)."""
    return isinstance(store, MemoryStore)
