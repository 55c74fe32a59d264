"""Collection of inactive auto-created queues: ``[broker] inactive_queue_timeout`` (ActiveMQ's
``gcInactiveDestinations``, Artemis's ``auto-delete-queues``).

Owns the periodic sweep that finds the queues a SEND, SUBSCRIBE, browse, reply-to or dead letter made,
notes those it finds idle (nothing pending or paged, no consumer, nothing arriving, no transaction holding
a delivery, nothing scheduled for them) with the activity counts they keep (``enqueued``, ``dequeued``,
``subscribed``), and removes those idle and unchanged for the timeout, giving their place back to
``max_destinations`` and their login's ``max_queues``.  It takes no time stamp on the hot path and
adds nothing to it.  It never collects a queue made by the console (configured), a virtual topic's
consumer queue, a durable subscription or a temporary queue.  The sweep works in slices of
:data:`SLICE` queues a reactor turn, so 50,000 queues do not stall the reactor.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gateway.broker.destinations import Destinations
from gateway.broker.queue import MessageQueue

SLICE = 2000
"""Queues one reactor turn of a sweep looks at (about 5 ms of the reactor: bench/inactive_sweep.py)."""

NAMED = 10
"""Queues a turn's debug line names at most."""

LONGEST_INTERVAL = 30.0
"""Seconds between sweeps at most (a timeout of 300 s is swept every 30 s)."""

Busy = Callable[[str], bool]
"""Whether something outside the queue still needs the queue ``name`` (a SEND being stored for it, a
virtual topic's record): it is not collected."""


def sweep_interval(timeout: float) -> float:
    """Seconds between sweeps for a ``timeout``: a tenth of it, at least 0.1 s, at most
    :data:`LONGEST_INTERVAL` (a queue goes between ``timeout`` and ``timeout`` + two intervals
    after it became idle: the first sweep that finds it idle notes it, the first a timeout later removes it)."""
    return min(LONGEST_INTERVAL, max(0.1, timeout / 10))


def is_held(queue: MessageQueue) -> bool:
    """Whether ``queue`` holds or is owed anything: a pending message (in memory, paged out or still
    in the store after a restart), a consumer (a wildcard subscription's too), a message being stored
    for it, a scheduled message's job that will send to it, or a delivery that a closed subscription's
    open transaction still holds."""
    if queue.consumers or queue.arriving or queue.scheduled or len(queue):
        return True
    settling = queue.settling
    if settling:
        settling.difference_update([subscription for subscription in settling if not subscription.held])
        if settling:
            return True
        queue.settling = None
    return False


class InactiveQueues:
    """The sweep of one broker's auto-created queues.

    :param timeout: seconds a queue stays idle before it goes (0: never, no sweep runs).
    :param busy: whether something outside the queue still needs it (:data:`Busy`).
    :param collected: called with each queue collected (the broker counts it:
        ``jmsgateway_broker_queues_collected_total``).
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, destinations: Destinations, timeout: float, busy: Busy,
                 collected: Callable[[MessageQueue], None]) -> None:
        self.clock = clock
        self.destinations = destinations
        self.timeout = timeout
        self.busy = busy
        self.collected = collected
        self.idle: dict[str, tuple[MessageQueue, int, float]] = {}
        """Name -> (the queue, its :func:`activity`, when it was first seen idle with it)."""
        self._call: IDelayedCall | None = None
        self._running = False

    def start(self) -> None:
        """Sweep every :func:`sweep_interval` from now on (nothing when the timeout is 0)."""
        self._running = True
        self._next()

    def stop(self) -> None:
        self._running = False
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def set_timeout(self, timeout: float) -> None:
        """A SIGHUP's new timeout: the next sweep judges by it (0 stops the sweeps, until it is set again)."""
        self.timeout = timeout
        if not self._running:
            return
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._next()

    def _next(self) -> None:
        if self._running and self.timeout > 0 and self._call is None:
            self._call = self.clock.callLater(sweep_interval(self.timeout), self._sweep)

    def _sweep(self) -> None:
        self._call = None
        if not self.timeout:
            self.idle = {}
            return
        names = list(self.destinations.queues)
        self._slice(names, 0, {}, 0)

    def _slice(self, names: list[str], start: int, idle: dict[str, tuple[MessageQueue, int, float]],
               collected: int) -> None:
        """Look at ``names[start:start + SLICE]``; the rest in the next reactor turn."""
        self._call = None
        if not self._running or not self.timeout:
            return
        destinations = self.destinations
        queues = destinations.queues
        configured = destinations.configured
        consumer_queue = destinations.virtual.names.topic_of
        seen = self.idle
        gone: list[str] = []
        now = self.clock.seconds()
        timeout = self.timeout
        busy = self.busy
        for name in names[start:start + SLICE]:
            queue = queues.get(name)
            if queue is None or is_held(queue) or not name.startswith("/queue/") or name in configured \
                    or busy(name) or consumer_queue(name) is not None:
                continue
            marks = queue.enqueued + queue.dequeued + queue.subscribed  # (each only grows: one sum tells a change)
            before = seen.get(name)
            if before is None or before[0] is not queue or before[1] != marks:
                idle[name] = (queue, marks, now)
            elif now - before[2] >= timeout:
                self._collect(name, queue)
                gone.append(name)
            else:
                idle[name] = before
        if gone:  # (one debug line a turn, naming a few: a line a queue costs more than collecting it)
            collected += len(gone)
            self.log.debug("collected {count} queues inactive for {timeout} s: {names}", count=len(gone),
                           timeout=timeout, names=", ".join(gone[:NAMED]) + (", ..." if len(gone) > NAMED else ""))
        start += SLICE
        if start < len(names):
            self._call = self.clock.callLater(0, self._slice, names, start, idle, collected)
            return
        self.idle = idle
        if collected:
            self.log.info("collected {count} queues inactive for {timeout} s ([broker] inactive_queue_timeout); "
                          "{left} destinations left", count=collected, timeout=timeout,
                          left=destinations.quota.count)
        self._next()

    def _collect(self, name: str, queue: MessageQueue) -> None:
        self.destinations.remove_queue(name)
        queue.discard()  # (detached: nothing is shown in it any more)
        self.collected(queue)
