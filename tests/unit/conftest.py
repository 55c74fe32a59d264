"""Fixtures shared by unit tests: a fake clock, an embedded broker running on it, and the reactor and
file of the store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.settings import BrokerSettings
from tests.unit.test_store_contract import PumpedReactor

CLOCK_START = 1_000_000.0
"""Where :func:`clock` starts: well after the epoch, so no timestamp, expiration or delivery time a test
computes is zero (which STOMP and JMS read as "none")."""


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.advance(CLOCK_START)
    return clock


@pytest.fixture
def broker_settings() -> BrokerSettings:
    """The settings :func:`broker` starts with; a test module overrides this fixture for others."""
    return BrokerSettings()


@pytest.fixture
def broker(clock: Clock, broker_settings: BrokerSettings) -> Iterator[EmbeddedBroker]:
    """Started on ``clock`` with ``broker_settings``, stopped after the test."""
    broker = EmbeddedBroker(clock, broker_settings)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def reactor() -> PumpedReactor:
    """Runs a store's writer-thread results on the test's thread (:class:`PumpedReactor`)."""
    return PumpedReactor()


@pytest.fixture
def path(tmp_path: Path) -> str:
    """Where a test's SQLite store file goes."""
    return str(tmp_path / "broker.sqlite")
