"""Brute-force protection: refusing logins from a client address after failed logins.

After ``[auth] max_failed_logins`` failed logins from one address within
``failed_login_window_ms``, every login from that address is refused unchecked
(its credentials are not even looked at) for ``lockout_ms``: a STOMP CONNECT
gets an ERROR "too many failed logins", an admin endpoint request HTTP 429 with
``Retry-After``.  Each further lockout of the same address doubles that time,
up to 64 times ``lockout_ms``, until a login from it succeeds (which clears
its record) or it stays quiet for longer than the longest lockout.

One throttle serves both listener kinds (``stomp``: every STOMP listener,
WebSocket included; ``admin``: the admin endpoint's HTTP Basic logins), so an
address's failures add up wherever it guesses the same ``[auth]`` passwords,
and a lockout earned on one side holds on the other.  Each lockout episode is
logged once when it starts (naming the address, how long) and once when it
ends with how many logins it refused.  Failed and refused logins are counted
per listener kind: ``jmsgateway_stomp_logins_failed_total`` and
``jmsgateway_stomp_logins_refused_total`` for STOMP,
``jmsgateway_admin_logins_failed_total`` and
``jmsgateway_admin_logins_refused_total`` for the admin endpoint.

It owns no sockets: the STOMP session and the admin site ask
:meth:`LoginThrottle.locked_for` (or :meth:`LoginThrottle.refusal`) before
checking credentials and report the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import CollectorRegistry, Counter
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gateway.errors import ConfigError

Listener = Literal["stomp", "admin"]
"""Which kind of listener a login came through (the metrics are counted per kind)."""

_METRICS: dict[str, tuple[str, str, str]] = {  # kind -> metric prefix, what a failure is, what a refusal is
    "stomp": ("jmsgateway_stomp_logins", "STOMP CONNECTs whose credentials were refused",
              "STOMP CONNECTs refused unchecked because their address failed too many logins"),
    "admin": ("jmsgateway_admin_logins", "admin endpoint requests whose HTTP Basic credentials were refused",
              "admin endpoint requests refused unchecked (429) because their address failed too many logins"),
}

MAX_LOCKOUT_FACTOR = 64
_TABLE_LIMIT = 100_000


@dataclass(slots=True)
class _Address:
    failures: list[float] = field(default_factory=list)
    locked_until: float = 0.0
    lockouts: int = 0
    refused: int = 0


class LoginThrottle:
    """Failed-login bookkeeping per client address (see the module docstring).

    :param max_failures: failures within ``window`` that lock an address out (0: never).
    :param window: seconds in which failures are counted.
    :param lockout: seconds of the first lockout.
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, max_failures: int = 5, window: float = 60.0, lockout: float = 10.0,
                 registry: CollectorRegistry | None = None) -> None:
        self.clock = clock
        self.max_failures = max_failures
        self.window = window
        self.lockout = lockout
        self.addresses: dict[str, _Address] = {}
        registry = registry or CollectorRegistry()
        self.failed: dict[str, Counter] = {}
        self.refused: dict[str, Counter] = {}
        for kind, (prefix, failed, refused) in _METRICS.items():
            self.failed[kind] = Counter(f"{prefix}_failed", failed, registry=registry)
            self.refused[kind] = Counter(f"{prefix}_refused", refused, registry=registry)

    def locked_for(self, address: str, listener: Listener = "stomp") -> float | None:
        """How many more seconds a login from ``address`` is refused unchecked (the refusal is
        counted), or None: check its credentials."""
        state = self.addresses.get(address)
        if state is None or not state.locked_until:
            return None
        now = self.clock.seconds()
        if now >= state.locked_until:
            self._end_episode(address, state)
            return None
        state.refused += 1
        self.refused[listener].inc()
        return state.locked_until - now

    def refusal(self, address: str, listener: Listener = "stomp") -> str | None:
        """Why a login from ``address`` is refused now (see :meth:`locked_for`), or None."""
        seconds = self.locked_for(address, listener)
        if seconds is None:
            return None
        return f"too many failed logins from {address}; try again in {seconds:.0f}s ([auth] max_failed_logins)"

    def login_failed(self, address: str, listener: Listener = "stomp") -> None:
        """A login from ``address`` gave wrong credentials."""
        self.failed[listener].inc()
        if not self.max_failures:
            return
        now = self.clock.seconds()
        state = self.addresses.get(address)
        if state is None:
            if len(self.addresses) >= _TABLE_LIMIT:
                self._prune(now)
            state = self.addresses[address] = _Address()
        if state.locked_until and now >= state.locked_until:
            self._end_episode(address, state)
        state.failures = [t for t in state.failures if now - t < self.window]
        state.failures.append(now)
        if len(state.failures) >= self.max_failures and not state.locked_until:
            state.lockouts += 1
            seconds = self.lockout * min(2 ** (state.lockouts - 1), MAX_LOCKOUT_FACTOR)
            state.locked_until = now + seconds
            state.failures.clear()
            self.log.warn("refusing logins (STOMP CONNECTs, admin requests) from {address} for {seconds:g}s: "
                          "{count} failed logins within {window:g}s ([auth] max_failed_logins); logged again "
                          "when the lockout ends", address=address, seconds=seconds, count=self.max_failures,
                          window=self.window)

    def login_succeeded(self, address: str) -> None:
        """A login from ``address`` succeeded: its failures are forgiven."""
        state = self.addresses.get(address)
        if state is not None and not state.locked_until:
            del self.addresses[address]

    def _end_episode(self, address: str, state: _Address) -> None:
        self.log.info("accepting logins from {address} again ({refused} refused during the lockout)",
                      address=address, refused=state.refused)
        state.locked_until = 0.0
        state.refused = 0
        state.failures.clear()

    def _prune(self, now: float) -> None:
        """Forget addresses with nothing recent (the table stays bounded under a scan from many addresses)."""
        horizon = self.window + self.lockout * MAX_LOCKOUT_FACTOR
        for address, state in list(self.addresses.items()):
            latest = max([state.locked_until, *state.failures])
            if now - latest > horizon:
                del self.addresses[address]


def build_login_throttle(auth: object, clock: IReactorTime, path: str = "",
                         registry: CollectorRegistry | None = None) -> LoginThrottle:
    """The throttle ``[auth] max_failed_logins``, ``failed_login_window_ms`` and ``lockout_ms`` describe."""
    values = {key: getattr(auth, key) for key in ("max_failed_logins", "failed_login_window_ms", "lockout_ms")}
    for key, value in values.items():
        if value < 0:
            raise ConfigError(f"must not be negative, got {value}", path=path, key=f"auth.{key}")
    return LoginThrottle(clock, values["max_failed_logins"], values["failed_login_window_ms"] / 1000,
                         values["lockout_ms"] / 1000, registry)
