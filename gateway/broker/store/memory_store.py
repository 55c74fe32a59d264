"""The memory store: keeps nothing across restarts.

:class:`MemoryStore` is the store for non-persistent deployments (the broker
does not even write to it) and the reference for the store contract tests.
"""

from __future__ import annotations

import itertools
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from gateway.broker.store.snapshot import DurableRecord, Snapshot
from gateway.interfaces import IMessageStore
from gateway.message.model import Message, now_millis


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
