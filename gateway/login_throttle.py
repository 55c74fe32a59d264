"""Brute-force protection: refusing CONNECTs from a client address after failed logins.

After ``[auth] max_failed_logins`` failed logins from one address within
``failed_login_window_ms``, every CONNECT from that address is refused with an
ERROR "too many failed logins" (its credentials are not even checked) for
``lockout_ms``; each further lockout of the same address doubles that time,
up to 64 times ``lockout_ms``, until a login from it succeeds (which clears
its record) or it stays quiet for longer than the longest lockout.  Each
lockout episode is logged once when it starts (naming the address, how long)
and once when it ends with how many CONNECTs it refused; refusals are counted in
``jmsgateway_stomp_logins_refused_total`` and failed logins in
``jmsgateway_stomp_logins_failed_total``.

It owns no sockets: the STOMP session asks :meth:`LoginThrottle.refusal` before
checking credentials and reports the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gateway.errors import ConfigError

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
        self.failed = Counter("jmsgateway_stomp_logins_failed", "STOMP CONNECTs whose credentials were refused",
                              registry=registry)
        self.refused = Counter("jmsgateway_stomp_logins_refused", "STOMP CONNECTs refused unchecked because "
                               "their address failed too many logins", registry=registry)

    def refusal(self, address: str) -> str | None:
        """Why a CONNECT from ``address`` is refused now, or None."""
        state = self.addresses.get(address)
        if state is None or not state.locked_until:
            return None
        now = self.clock.seconds()
        if now >= state.locked_until:
            self._end_episode(address, state)
            return None
        state.refused += 1
        self.refused.inc()
        return (f"too many failed logins from {address}; try again in {state.locked_until - now:.0f}s "
                "([auth] max_failed_logins)")

    def login_failed(self, address: str) -> None:
        """A CONNECT from ``address`` gave wrong credentials."""
        self.failed.inc()
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
            self.log.warn("refusing STOMP CONNECTs from {address} for {seconds:g}s: {count} failed logins within "
                          "{window:g}s ([auth] max_failed_logins); logged again when the lockout ends",
                          address=address, seconds=seconds, count=self.max_failures, window=self.window)

    def login_succeeded(self, address: str) -> None:
        """A CONNECT from ``address`` logged in: its failures are forgiven."""
        state = self.addresses.get(address)
        if state is not None and not state.locked_until:
            del self.addresses[address]

    def _end_episode(self, address: str, state: _Address) -> None:
        self.log.info("accepting STOMP CONNECTs from {address} again ({refused} refused during the lockout)",
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
