"""Waiting inside pytest-twisted tests without blocking the reactor.

pytest-twisted runs the global reactor in a greenlet and each test on it: a
``@pytest_twisted.ensureDeferred`` test awaits Deferreds, and waits for a
condition or for time to pass with the coroutines here (a ``time.sleep`` would
stop the reactor the code under test runs on).  Blocking clients that need
the reactor to answer meanwhile (stomp.py against a gateway in this process)
run through :func:`in_thread`.  Fixtures run outside the reactor greenlet and
wait for a Deferred with :func:`wait_for`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest_twisted
from twisted.internet import reactor as _reactor
from twisted.internet import task, threads
from twisted.internet.defer import Deferred, maybeDeferred

T = TypeVar("T")

reactor: Any = _reactor


async def sleep(seconds: float) -> None:
    """Let the reactor run for ``seconds``."""
    await task.deferLater(reactor, seconds, lambda: None)


async def until(condition: Callable[[], bool], timeout: float = 15.0, what: str = "condition",
                interval: float = 0.02) -> None:
    """Return once ``condition()`` is true; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await sleep(interval)


def in_thread(function: Callable[..., T], *args: Any, **kwargs: Any) -> Deferred[T]:
    """Run a blocking ``function`` in the reactor's thread pool; its result as a Deferred."""
    return threads.deferToThread(function, *args, **kwargs)


FIXTURE_DEADLINE = 120.0
"""Seconds :func:`wait_for` runs the reactor for a result before it cancels the wait (TimeoutError)."""


def wait_for(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """From a fixture: call ``function`` and run the reactor until its (Deferred's) result is there
    (:class:`twisted.internet.defer.TimeoutError` after :data:`FIXTURE_DEADLINE` seconds: a start or
    stop that never ends fails its fixture instead of holding the test run)."""
    return pytest_twisted.blockon(maybeDeferred(function, *args, **kwargs).addTimeout(FIXTURE_DEADLINE, reactor))


def off_reactor(test: Callable[..., Any]) -> Callable[..., Deferred[Any]]:
    """A test driving blocking clients against code on the reactor (a gateway in this process).

    Its body runs in a thread and the test returns that Deferred, so pytest-twisted runs the
    reactor meanwhile; the body reaches the reactor with :func:`on_reactor`.
    """

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Deferred[Any]:
        return threads.deferToThread(test, *args, **kwargs)

    return run


def on_reactor(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """From an :func:`off_reactor` body: call ``function`` on the reactor and wait for its result."""
    return threads.blockingCallFromThread(reactor, function, *args, **kwargs)
