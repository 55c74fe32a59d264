"""The global Twisted reactor running in a background thread, for the benchmarks.

A benchmark is a plain script that times blocking clients against reactor-based
code (connectors) in the same process; it calls :func:`run_in_reactor`, which
starts the reactor once per process in a daemon thread (no signal handlers),
runs the function on the reactor thread and waits for its result, following a
returned Deferred.  Tests do not use it: they run on pytest-twisted's reactor
(tests/support/reactor_waits.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.threads import blockingCallFromThread

_lock = threading.Lock()
_thread: threading.Thread | None = None

reactor: Any = _reactor


def ensure_reactor() -> Any:
    """Start the reactor in a daemon thread unless it already runs; returns it."""
    global _thread
    with _lock:
        if _thread is None:
            started = threading.Event()
            reactor.callWhenRunning(started.set)
            _thread = threading.Thread(
                target=reactor.run, kwargs={"installSignalHandlers": False}, name="test-reactor", daemon=True
            )
            _thread.start()
            if not started.wait(10):
                raise RuntimeError("the reactor did not start")
    return reactor


def run_in_reactor(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``function`` on the reactor thread and return its (Deferred's) result."""
    ensure_reactor()
    return blockingCallFromThread(reactor, function, *args, **kwargs)
