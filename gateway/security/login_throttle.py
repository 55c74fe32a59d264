"""Brute-force protection: refusing logins from a client address after failed logins.

Failures are counted per address *and* per login: a record per (address,
login) of the failures within ``[auth] failed_login_window_ms``.  When the
failures of every login from one address, **plus the logins from it whose
check is still in flight** (an attempt counts as a failure until it has
succeeded), reach ``max_failed_logins``, further logins from that address are
refused unchecked (their credentials are not even looked at, a right password
included); once that many have actually failed, the address is locked out for
``lockout_ms``: a STOMP CONNECT gets an ERROR "too many failed logins", an
admin endpoint request HTTP 429 with ``Retry-After``.  Each further lockout of
the same address doubles that time, up to 64 times ``lockout_ms``.  A success
forgives only that login's own failures from that address - never another
login's, never the address's count of other logins' failures - so guessing
root's password between logins of one's own account does not reset anything.

Password hashing is bounded per address: at most :data:`CHECKS_PER_ADDRESS`
checks of one address run at once (the others wait their turn, at most
:data:`WAITING_PER_ADDRESS` of them), so a flood of logins from one address
cannot take the hashing threads from the others.

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

It owns no sockets: a listener asks :meth:`LoginThrottle.admit` before
checking credentials, runs the check through :meth:`LoginThrottle.check` and
reports the outcome with :meth:`LoginThrottle.settle`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gateway.errors import ConfigError

_T = TypeVar("_T")

Listener = Literal["stomp", "admin"]
"""Which kind of listener a login came through (the metrics are counted per kind)."""

_METRICS: dict[str, tuple[str, str, str]] = {  # kind -> metric prefix, what a failure is, what a refusal is
    "stomp": ("jmsgateway_stomp_logins", "STOMP CONNECTs whose credentials were refused",
              "STOMP CONNECTs refused unchecked because their address failed too many logins"),
    "admin": ("jmsgateway_admin_logins", "admin endpoint requests whose HTTP Basic credentials were refused",
              "admin endpoint requests refused unchecked (429) because their address failed too many logins"),
}

MAX_LOCKOUT_FACTOR = 64
CHECKS_PER_ADDRESS = 1
"""Password checks of one client address that run at once (the rest wait their turn)."""
WAITING_PER_ADDRESS = 32
"""Checks of one address that may wait for their turn; past that a login is refused unchecked."""
_TABLE_LIMIT = 100_000


@dataclass(slots=True)
class _Address:
    failures: dict[str, list[float]] = field(default_factory=dict)
    """Login -> the times of its failed logins from this address within the window."""
    pending: int = 0
    """Logins from this address whose check is in flight (each counts as a failure meanwhile)."""
    locked_until: float = 0.0
    lockouts: int = 0
    refused: int = 0
    running: int = 0
    """Password checks of this address running now (at most :data:`CHECKS_PER_ADDRESS`)."""
    waiting: deque[Deferred[None]] = field(default_factory=deque)
    """Checks waiting for their turn, first come first served."""

    def failed(self) -> int:
        return sum(len(times) for times in self.failures.values())

    def idle(self) -> bool:
        return not (self.failures or self.pending or self.locked_until or self.lockouts or self.running
                    or self.waiting)


class LoginThrottle:
    """Failed-login bookkeeping per client address and login (see the module docstring).

    :param max_failures: failures (and checks in flight) within ``window`` that lock an
        address out (0: never).
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

    # -- one login attempt: admit, check, settle -------------------------------

    def admit(self, address: str, login: str | None, listener: Listener = "stomp") -> str | None:
        """Why a login from ``address`` is refused unchecked now (the refusal is counted), or None:
        the attempt is admitted and counts as a failure until :meth:`settle` says otherwise."""
        reason = self.refusal(address, listener)
        if reason is not None:
            return reason
        state = self._state(address)
        now = self.clock.seconds()
        self._forget_old(state, now)
        if self.max_failures and state.failed() + state.pending >= self.max_failures:
            return self._refuse(state, listener, f"too many logins from {address} are failing or being "
                                                 "checked; try again later ([auth] max_failed_logins)")
        if len(state.waiting) >= WAITING_PER_ADDRESS:
            return self._refuse(state, listener, f"too many logins from {address} are being checked; "
                                                 "try again later")
        state.pending += 1
        return None

    def check(self, address: str, run: Callable[[], Deferred[_T]]) -> Deferred[_T]:
        """``run()`` (a password check) once fewer than :data:`CHECKS_PER_ADDRESS` checks of
        ``address`` are running; its result."""
        state = self._state(address)
        turn: Deferred[None] = Deferred()
        if state.running < CHECKS_PER_ADDRESS:
            state.running += 1
            turn.callback(None)
        else:
            state.waiting.append(turn)

        def finished(result: object) -> object:
            if state.waiting:
                state.waiting.popleft().callback(None)  # (its turn: running stays the same)
            else:
                state.running -= 1
                if state.idle() and self.addresses.get(address) is state:
                    del self.addresses[address]
            return result

        def start(_: None) -> Deferred[_T]:
            d: Deferred[_T] = maybeDeferred(run)
            d.addBoth(finished)
            return d

        return turn.addCallback(start)

    def settle(self, address: str, login: str | None, succeeded: bool, listener: Listener = "stomp") -> None:
        """The check of an admitted login ended: a success forgives that login's failures from
        ``address``; a failure is recorded (and may lock the address out)."""
        state = self.addresses.get(address)
        if state is not None and state.pending:
            state.pending -= 1
        if succeeded:
            self.login_succeeded(address, login)
        else:
            self.login_failed(address, listener, login)

    # -- the pieces (also used by callers that do not admit) ---------------------

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

    def locked_seconds(self, address: str) -> float | None:
        """How many more seconds ``address`` is locked out (nothing counted), or None."""
        state = self.addresses.get(address)
        if state is None or not state.locked_until:
            return None
        remaining = state.locked_until - self.clock.seconds()
        return remaining if remaining > 0 else None

    def refusal(self, address: str, listener: Listener = "stomp") -> str | None:
        """Why a login from ``address`` is refused now (see :meth:`locked_for`), or None."""
        seconds = self.locked_for(address, listener)
        if seconds is None:
            return None
        return f"too many failed logins from {address}; try again in {seconds:.0f}s ([auth] max_failed_logins)"

    def login_failed(self, address: str, listener: Listener = "stomp", login: str | None = None) -> None:
        """A login from ``address`` gave wrong credentials."""
        self.failed[listener].inc()
        if not self.max_failures:
            return
        now = self.clock.seconds()
        state = self._state(address)
        if state.locked_until and now >= state.locked_until:
            self._end_episode(address, state)
        self._forget_old(state, now)
        state.failures.setdefault(login or "", []).append(now)
        if state.failed() >= self.max_failures and not state.locked_until:
            state.lockouts += 1
            seconds = self.lockout * min(2 ** (state.lockouts - 1), MAX_LOCKOUT_FACTOR)
            state.locked_until = now + seconds
            state.failures.clear()
            self.log.warn("refusing logins (STOMP CONNECTs, admin requests) from {address} for {seconds:g}s: "
                          "{count} failed logins within {window:g}s ([auth] max_failed_logins); logged again "
                          "when the lockout ends", address=address, seconds=seconds, count=self.max_failures,
                          window=self.window)

    def login_succeeded(self, address: str, login: str | None = None) -> None:
        """``login`` logged in from ``address``: its own failures from there are forgiven (no
        other login's; without a login, nothing is)."""
        state = self.addresses.get(address)
        if state is None or login is None:
            return
        state.failures.pop(login, None)
        if state.idle():
            del self.addresses[address]

    # -- internals ---------------------------------------------------------------

    def _state(self, address: str) -> _Address:
        state = self.addresses.get(address)
        if state is None:
            if len(self.addresses) >= _TABLE_LIMIT:
                self._prune(self.clock.seconds())
            state = self.addresses[address] = _Address()
        return state

    def _refuse(self, state: _Address, listener: Listener, reason: str) -> str:
        state.refused += 1
        self.refused[listener].inc()
        return reason

    def _forget_old(self, state: _Address, now: float) -> None:
        for login, times in list(state.failures.items()):
            recent = [t for t in times if now - t < self.window]
            if recent:
                state.failures[login] = recent
            else:
                del state.failures[login]

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
            if state.pending or state.running or state.waiting:
                continue
            latest = max([state.locked_until, *(t for times in state.failures.values() for t in times)])
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
