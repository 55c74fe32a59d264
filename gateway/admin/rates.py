"""Message rates in and out over the last minutes, for the admin console's live chart.

:class:`RateHistory` samples the STOMP traffic counters
(:class:`~gateway.stomp.traffic.StompTraffic`) every ``interval`` seconds on
the reactor's clock and keeps the last ``span`` seconds of per-second rates,
so a page opened now shows the minutes before it too.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

from gateway.stomp.traffic import StompTraffic


class RateHistory:
    """Samples of ``(time, messages in per second, messages out per second)``."""

    def __init__(self, clock: IReactorTime, traffic: StompTraffic, *, interval: float = 2.0,
                 span: float = 600.0) -> None:
        self.clock = clock
        self.traffic = traffic
        self.interval = interval
        self.span = span
        self.samples: deque[tuple[float, float, float]] = deque(maxlen=max(2, int(span / interval)))
        self._last = (clock.seconds(), traffic.received, traffic.sent)
        self._loop = LoopingCall(self.sample)
        self._loop.clock = clock

    def start(self) -> None:
        """Sample every ``interval`` seconds from now on."""
        if not self._loop.running:
            self._loop.start(self.interval, now=False)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def sample(self) -> None:
        """Record the rates since the previous sample."""
        now, received, sent = self.clock.seconds(), self.traffic.received, self.traffic.sent
        then, received_before, sent_before = self._last
        elapsed = now - then
        if elapsed <= 0:
            return
        self.samples.append((now, (received - received_before) / elapsed, (sent - sent_before) / elapsed))
        self._last = (now, received, sent)

    def latest(self) -> dict[str, float]:
        """The last sample's rates (0 before the first)."""
        if not self.samples:
            return {"in": 0.0, "out": 0.0}
        _, rate_in, rate_out = self.samples[-1]
        return {"in": round(rate_in, 2), "out": round(rate_out, 2)}

    def document(self) -> dict[str, Any]:
        """The history as JSON: ``{"interval": s, "span": s, "samples": [[t, in, out], ...]}``."""
        return {"interval": self.interval, "span": self.span,
                "samples": [[round(t, 3), round(i, 2), round(o, 2)] for t, i, o in self.samples]}
