"""Browsing a queue (ActiveMQ's ``SUBSCRIBE`` with ``browser:true``).

A :class:`QueueBrowser` takes a snapshot of a queue when it starts: every pending message at
that moment, in dispatch order, paged and stored ones included.  It delivers them without
consuming anything (acknowledgements are ignored), a slice per reactor turn and only while
its consumer takes them (back-pressure pauses it), then the end-of-browse marker ActiveMQ
sends: a message with the ``browser`` property ``end`` and an empty body.  It never changes
the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from gateway.interfaces import IConsumer, ISubscription, SubscriptionSpec
from gateway.message.model import Message, TextMessage

SLICE = 500
"""Most messages a browser delivers in one reactor turn."""

END_TAG = "browse-end"
"""The delivery tag of the end-of-browse marker."""


class Browsable(Protocol):
    """What a browser needs of the queue: its pending messages in dispatch order."""

    name: str

    def messages(self, limit: int | None = None) -> list[Message]: ...


def end_marker(destination: str) -> Message:
    """ActiveMQ's end-of-browse MESSAGE: header ``browser:end``, empty body, message-id ``0``."""
    return TextMessage(destination=destination, message_id="0", properties={"browser": "end"}, text="")


@implementer(ISubscription)
class QueueBrowser:
    """One browse of a queue (ISubscription): the snapshot, then the end marker."""

    def __init__(
        self, queue: Browsable, spec: SubscriptionSpec, consumer: IConsumer,
        selector: Callable[[Message], bool] | None, clock: IReactorTime,
    ) -> None:
        self.spec = spec
        self.consumer = consumer
        self.clock = clock
        snapshot = queue.messages()
        self._pending = [m for m in snapshot if selector is None or selector(m)]
        self._pending.append(end_marker(queue.name))
        self._next = 0
        self.paused = False
        self.closed = False
        self._call: Any = None

    def start(self) -> None:
        """Deliver the first slice now, the rest in later reactor turns."""
        self._pump()

    def _pump(self) -> None:
        self._call = None
        pending = self._pending
        stop = min(self._next + SLICE, len(pending))
        while self._next < stop and not self.paused and not self.closed:
            last = self._next == len(pending) - 1
            if self.consumer.deliver(pending[self._next], END_TAG if last else f"browse-{self._next}") is False:
                self.paused = True  # (its transport is full: resume() goes on with this one)
                return
            self._next += 1
        if self._next >= len(pending):
            self._pending = []  # (delivered, the end marker included)
        elif not self.paused and not self.closed:
            self._call = self.clock.callLater(0, self._pump)

    def ack(self, tags: list[Any]) -> Deferred[Any]:
        return succeed(None)  # (a browse consumes nothing)

    def nack(self, tags: list[Any]) -> Deferred[Any]:
        return succeed(None)

    def pause(self) -> None:
        self.paused = True
        if self._call is not None and self._call.active():
            self._call.cancel()
            self._call = None

    def resume(self) -> None:
        if self.paused and not self.closed:
            self.paused = False
            if self._pending and self._call is None:
                self._pump()

    def close(self) -> Deferred[None]:
        self.closed = True
        self._pending = []
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        return succeed(None)

    def unsubscribe(self) -> Deferred[None]:
        return self.close()
