"""An IConsumer that collects a connector's deliveries for pytest-twisted tests to await."""

from __future__ import annotations

from typing import Any

from zope.interface import implementer

from gateway.interfaces import IConsumer
from gateway.message.model import Message
from tests.support.reactor_waits import sleep, until


@implementer(IConsumer)
class CollectingConsumer:
    """Keeps every delivery (made on the reactor) in order; ``take`` awaits the next ones."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[Message, Any]] = []
        self.failures: list[Exception] = []

    def deliver(self, message: Message, tag: Any) -> bool | None:
        self.deliveries.append((message, tag))
        return None  # (taken: a session that keeps the message answers None)

    def subscription_failed(self, reason: Exception) -> None:
        self.failures.append(reason)

    async def take(self, count: int, timeout: float = 15.0) -> list[tuple[Message, Any]]:
        """The next ``count`` deliveries; AssertionError if they do not come within ``timeout``."""
        try:
            await until(lambda: len(self.deliveries) >= count, timeout)
        except AssertionError:
            raise AssertionError(f"expected {count} deliveries, got {len(self.deliveries)}") from None
        taken, self.deliveries[:count] = self.deliveries[:count], []
        return taken

    async def nothing_more(self, wait: float = 0.5) -> bool:
        """Whether no delivery comes within ``wait`` seconds."""
        await sleep(wait)
        return not self.deliveries
