"""Fixtures shared by unit tests: a fake clock and an embedded broker running on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(clock: Clock) -> Iterator[EmbeddedBroker]:
    """Started on ``clock``, stopped after the test (test modules may define their own)."""
    broker = EmbeddedBroker(clock)
    broker.start()
    yield broker
    broker.stop()
