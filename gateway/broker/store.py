"""What a message store gives back on open, the store keys, and the memory store.

:class:`Snapshot` is the recovered state an :class:`IMessageStore` hands to
the broker at start-up.  :class:`MemoryStore` keeps nothing across restarts:
it is the store for non-persistent deployments and the reference for the
store contract tests.  The SQLite store lives in :mod:`gateway.broker.sqlite_store`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from gateway.interfaces import IMessageStore
from gateway.message.model import Message

DURABLE_PREFIX = "durable:"


def durable_key(client_id: str, name: str) -> str:
    """Store key of the durable subscription ``name`` of client ``client_id``."""
    return f"{DURABLE_PREFIX}{client_id}:{name}"


@dataclass(slots=True)
class DurableRecord:
    """A durable topic subscription as stored."""

    key: str
    destination: str
    selector: str | None = None


@dataclass(slots=True)
class Snapshot:
    """Everything a store holds, for recovery at start-up.

    :ivar messages: (queue key, message) pairs in the order they were stored;
        each message carries its stored redelivery count.
    :ivar expired: how many expired messages the store purged while opening.
    """

    durables: list[DurableRecord] = field(default_factory=list)
    messages: list[tuple[str, Message]] = field(default_factory=list)
    expired: int = 0


@implementer(IMessageStore)
class MemoryStore:
    """A store that forgets everything at exit; every write is at once 'durable'."""

    def open(self) -> Deferred[Snapshot]:
        return succeed(Snapshot())

    def close(self) -> Deferred[None]:
        return succeed(None)

    def add(self, queue: str, message: Message) -> Deferred[None]:
        return succeed(None)

    def add_batch(self, entries: list[tuple[str, Message]]) -> Deferred[None]:
        return succeed(None)

    def remove(self, queue: str, message_id: str) -> Deferred[None]:
        return succeed(None)

    def set_redelivery(self, queue: str, message_id: str, count: int) -> Deferred[None]:
        return succeed(None)

    def add_durable(self, key: str, destination: str, selector: str | None) -> Deferred[None]:
        return succeed(None)

    def remove_durable(self, key: str) -> Deferred[None]:
        return succeed(None)


def is_memory_store(store: Any) -> bool:
    """Whether writes to ``store`` complete synchronously (no durability wait)."""
    return isinstance(store, MemoryStore)
