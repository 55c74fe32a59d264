"""The gateway's role (active or standby) and its last takeover, as the admin endpoint reports them.

Plain state read on the reactor thread: ``/status`` shows :meth:`GatewayRole.status`,
``/readyz`` and ``/health`` are not ready while the role is ``standby``, and
``/metrics`` has ``jmsgateway_role{role}`` (1 for the current role, 0 for the
other), ``jmsgateway_takeovers_total`` and the last takeover's duration,
recovered messages and time.  Each change of role is logged once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from twisted.logger import Logger

ACTIVE, STANDBY = "active", "standby"
ROLES = (ACTIVE, STANDBY)


@dataclass(frozen=True)
class Takeover:
    """One takeover: when the standby got the lock, how long until its listeners opened, what it recovered."""

    at: float
    """Wall-clock time (seconds since the epoch) the lock was obtained."""
    duration_seconds: float
    """From obtaining the lock to the listeners being open (store recovery included)."""
    recovered_messages: int
    """Messages pending in the embedded broker's queues and durable subscriptions once it started."""


class GatewayRole:
    """``active`` or ``standby``; the lock's path; the takeovers so far."""

    log = Logger()

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.role = ACTIVE
        self.lock_path: str | None = None
        """The store file whose lock decides the role (None: no shared store, always active)."""
        self.since = wall_clock()
        self.takeovers = 0
        self.last_takeover: Takeover | None = None
        self._wall_clock = wall_clock
        if registry is not None:
            registry.register(_RoleCollector(self))

    @property
    def standby(self) -> bool:
        return self.role == STANDBY

    def become_standby(self, lock_path: str) -> None:
        self.lock_path = lock_path
        self._change(STANDBY, "standby: another gateway holds the message store's lock on {path}; waiting for it "
                     "(no STOMP listener, bridge or consumer until then)")

    def become_active(self, lock_path: str | None) -> None:
        self.lock_path = lock_path
        if lock_path is None:
            self._change(ACTIVE, "active: the message store is in memory (no lock: no standby can share it)")
        else:
            self._change(ACTIVE, "active: this gateway holds the message store's lock on {path}")

    def took_over(self, lock_path: str, obtained_at: float, duration: float, recovered: int) -> None:
        """Record a takeover (the lock obtained at wall-clock ``obtained_at``) and become active."""
        self.takeovers += 1
        self.last_takeover = Takeover(round(obtained_at, 3), round(duration, 3), recovered)
        self.lock_path = lock_path
        self._change(ACTIVE, "active: took over from the standby role in {duration:.3f}s with {recovered} "
                     "recovered messages (the lock on {path} obtained)", duration=duration, recovered=recovered)

    def _change(self, role: str, text: str, **fields: Any) -> None:
        self.role = role
        self.since = self._wall_clock()
        self.log.info("jmsgateway role " + text, path=self.lock_path, **fields)

    def status(self) -> dict[str, Any]:
        """``{"role", "since", "store_lock", "takeovers", "last_takeover"}`` for ``/status``."""
        return {
            "role": self.role,
            "since": round(self.since, 3),
            "store_lock": self.lock_path,
            "takeovers": self.takeovers,
            "last_takeover": asdict(self.last_takeover) if self.last_takeover is not None else None,
        }


class _RoleCollector(Collector):
    """The role metrics, read from a :class:`GatewayRole` at scrape time."""

    def __init__(self, role: GatewayRole) -> None:
        self.role = role

    def collect(self) -> Iterator[Any]:
        role = GaugeMetricFamily("jmsgateway_role", "1 for the gateway's role (active or standby), 0 for the other",
                                 labels=["role"])
        for name in ROLES:
            role.add_metric([name], 1.0 if self.role.role == name else 0.0)
        yield role
        yield CounterMetricFamily("jmsgateway_takeovers", "Times this process took over as the active gateway",
                                  value=self.role.takeovers)
        last = self.role.last_takeover
        if last is not None:
            yield GaugeMetricFamily("jmsgateway_last_takeover_duration_seconds",
                                    "Seconds from obtaining the store's lock to open listeners, last takeover",
                                    value=last.duration_seconds)
            yield GaugeMetricFamily("jmsgateway_last_takeover_recovered_messages",
                                    "Messages pending once the last takeover recovered the store",
                                    value=last.recovered_messages)
            yield GaugeMetricFamily("jmsgateway_last_takeover_timestamp_seconds",
                                    "When the last takeover obtained the store's lock (seconds since the epoch)",
                                    value=last.at)

    def describe(self) -> Iterator[Any]:
        role = GaugeMetricFamily("jmsgateway_role", "role", labels=["role"])
        yield role
        yield CounterMetricFamily("jmsgateway_takeovers", "takeovers")
