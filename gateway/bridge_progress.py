"""What ``jmsgateway bridge`` logs while it runs: each bridge's state changes as they happen, and
every ``interval`` seconds a line per bridge with its state, messages forwarded, the rate since the
last line, what is pending and the retries.

Reads :meth:`BridgeService.status` only (the same dicts the admin endpoint shows); owns nothing else.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.interfaces import BridgeState

TICK = 1.0
"""Seconds between looks at the states (a change is logged at the next look)."""


class BridgeProgress:
    """Logs the progress of ``bridges`` (a :class:`~gateway.bridges.service.BridgeService`) on ``clock``."""

    log = Logger()

    def __init__(self, bridges: Any, clock: Any, interval: float = 10.0) -> None:
        self.bridges = bridges
        self.clock = clock
        self.interval = interval
        self._states: dict[str, str] = {}
        self._forwarded: dict[str, int] = {}
        self._last_report = 0.0
        self._loop = LoopingCall(self.look)
        self._loop.clock = clock

    def start(self) -> None:
        self._last_report = self.clock.seconds()
        self._loop.start(TICK, now=False)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def look(self) -> None:
        """Log state changes; every ``interval`` seconds, the rates."""
        statuses = self.bridges.status()
        for status in statuses:
            name, state = status["name"], str(status["state"])
            before = self._states.get(name)
            if state != before:
                self._states[name] = state
                error = f": {status['last_error']}" if status.get("last_error") and state != BridgeState.RUNNING else ""
                self.log.info("bridge {bridge}: {before} -> {state}{error}", bridge=name, before=before or "new",
                              state=state, error=error)
        now = self.clock.seconds()
        elapsed = now - self._last_report
        if self.interval <= 0 or elapsed < self.interval - TICK / 2:  # (ticks drift by a few milliseconds)
            return
        self._last_report = now
        for status in statuses:
            name, forwarded = status["name"], int(status["forwarded"])
            rate = (forwarded - self._forwarded.get(name, 0)) / elapsed
            self._forwarded[name] = forwarded
            self.log.info("bridge {bridge}: {state}, {forwarded} forwarded ({rate:.1f}/s over {elapsed:.0f}s), "
                          "{pending} pending, {retries} retries", bridge=name, state=status["state"],
                          forwarded=forwarded, rate=rate, elapsed=elapsed, pending=status["pending"],
                          retries=status["retries"])
