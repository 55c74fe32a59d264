"""Fixtures shared by unit tests: a fake clock, an embedded broker running on it, and the reactor and
file of the store tests."""

from __future__ import annotations

import threading
import time
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


WRITER_THREAD_PREFIX = "store-writer:"
"""How :class:`gateway.broker.store.sqlite_writer.GroupCommitWriter` names its thread (``SqliteStore``'s)."""

WRITER_END_SECONDS = 5.0
"""How long a writer thread a test started may take to end after the test: a closed store's thread ends
at once (its last step), so only a store left open uses up this time, on a loaded host too."""


def writer_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith(WRITER_THREAD_PREFIX)}


@pytest.fixture(autouse=True)
def no_store_writer_outlives_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test that leaves a SQLite store open: its writer thread would run on for the rest of the
    worker's tests (and be counted by those that look for a store's thread)."""
    before = writer_threads()
    yield
    started = writer_threads() - before
    deadline = time.monotonic() + WRITER_END_SECONDS
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = sorted(thread.name for thread in started if thread.is_alive())
    if alive:
        pytest.fail(f"{request.node.nodeid} left {len(alive)} SQLite store writer thread(s) running "
                    f"({', '.join(alive)}): close every store the test opens", pytrace=False)
