"""Start-up by role: active when the message store's lock is free, else a standby that waits for it.

:class:`RoleGate` takes the store's lock (:class:`~gateway.ha.store_lock.StoreLock`)
before anything opens the store.  Free: the gateway starts as always.  Held by
another gateway: the gateway is a standby (its admin endpoint only: no STOMP
listener, bridge, route or consumer), and a thread of its own blocks in
``flock`` until the lock is released (the active gateway stopped, died, or its
host's lock manager gave up on it); then the reactor thread hands the lock to
the store and runs the normal start-up, which recovers the store.  It must not
decide anything by timing, and never starts a second active gateway on a
file system whose locks do not exclude (:class:`LocksNotEnforced`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.broker.store.sqlite_store import SqliteStore
from gateway.errors import GatewayError
from gateway.ha.role import GatewayRole
from gateway.ha.store_lock import StoreLock


def store_lock_for(store: Any) -> StoreLock | None:
    """The lock of ``store`` when it is a file others can share (SQLite); None for a memory store."""
    return StoreLock(store.path) if isinstance(store, SqliteStore) else None


def pending_messages(broker: Any) -> int:
    """Messages pending in the embedded broker's queues and durable subscriptions (stored backlogs included)."""
    return sum(len(queue) for queue in [*broker.queues.values(), *broker.durables.values()])


class RoleGate:
    """Decides the role at start-up and runs ``activate`` when (and only when) the lock is ours.

    :param gateway: the :class:`~gateway.app.Gateway` (its ``store``, ``broker`` and ``role``).
    :param activate: the normal start-up (connectors, bridges, listeners); fires once listening.
    :param standby_opened: called once when the gateway becomes a standby (opens the admin endpoint).
    :param failed: called with the failure when the lock cannot be used or ``activate`` fails.
    """

    log = Logger()

    def __init__(self, gateway: Any, reactor: Any, *, activate: Callable[[], Deferred[Any]],
                 standby_opened: Callable[[], None], failed: Callable[[Failure], None],
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.gateway = gateway
        self.reactor = reactor
        self.role: GatewayRole = gateway.role
        self._activate_gateway = activate
        self._standby_opened = standby_opened
        self._failed = failed
        self._wall_clock = wall_clock
        self.activated = False
        """Whether the start-up ran (the gateway needs stopping on shutdown)."""
        self.stopped = False
        self._lock: StoreLock | None = None

    def start(self) -> None:
        lock = self._lock = store_lock_for(self.gateway.store)
        if lock is None:
            self.role.become_active(None)
            self._activate()
            return
        try:
            free = lock.try_acquire()
        except (GatewayError, OSError):
            self._failed(Failure())
            return
        if free:
            self.role.become_active(lock.path)
            self._activate()
            return
        self.role.become_standby(lock.path)
        self._standby_opened()
        threading.Thread(target=self._wait, args=(lock,), name="store-lock-standby", daemon=True).start()

    def stop(self) -> None:
        """No takeover after this (a lock obtained later is released at once)."""
        self.stopped = True

    def _wait(self, lock: StoreLock) -> None:
        """In the standby thread: block until the lock is ours."""
        try:
            lock.wait()
        except BaseException:
            self.reactor.callFromThread(self._wait_failed, Failure())
        else:
            self.reactor.callFromThread(self._obtained, lock, self._wall_clock(), time.monotonic())

    def _wait_failed(self, failure: Failure) -> None:
        if not self.stopped:
            self._failed(failure)

    def _obtained(self, lock: StoreLock, at: float, started: float) -> None:
        if self.stopped:
            lock.release()
            return
        self.log.info("jmsgateway standby obtained the message store's lock on {path}: recovering the store",
                      path=lock.path)

        def took_over(result: Any) -> Any:
            self.role.took_over(lock.path, at, time.monotonic() - started, pending_messages(self.gateway.broker))
            return result

        self._activate(took_over)

    def _activate(self, then: Callable[[Any], Any] | None = None) -> None:
        self.activated = True
        if self._lock is not None and self._lock.fd is not None:
            self.gateway.store.adopt_lock(self._lock.hand_over())
        d = self._activate_gateway()
        if then is not None:
            d.addCallback(then)
        d.addErrback(self._failed)
