"""Password hashes and the ``twisted.cred`` checker that verifies logins against them.

A password in ``[auth] users`` (or a ``login:password`` line of
``[auth] password_file``) is either a bcrypt hash (``$2b$...``, made by
``jmsgateway hash-password``) or plain text, which still works but is warned
about at start-up (or refused with ``[auth] allow_plaintext = false``).

bcrypt is slow on purpose (a quarter of a second at cost 12), so
:class:`PasswordChecker` verifies in the reactor's thread pool: a login never
blocks the reactor.  An unknown login is checked against a dummy hash of a
cost some configured login has (chosen per login name), and a weak known one
(plain text or a low cost, allowed only with ``allow_weak_passwords``) is
padded with such a check, so the time taken does not tell which logins exist
or which are weak.  This module owns no policy about who may do what
(:mod:`gateway.security.authorization` does).
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

import bcrypt
from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import IUsernamePassword
from twisted.cred.error import UnauthorizedLogin
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from zope.interface import implementer

BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
"""How a bcrypt hash starts."""

DEFAULT_ROUNDS = 12
"""bcrypt's cost factor for new hashes (2^12 rounds, about 0.25 s on a current core)."""

MAX_PASSWORD_BYTES = 72
"""bcrypt reads at most this many bytes of a password; longer ones are refused, not cut."""

MIN_ROUNDS = 10
"""The lowest bcrypt cost that is not weak (OWASP's floor; cost 4 is 64 times quicker to guess)."""


def is_hashed(password: str) -> bool:
    """Whether a configured password is a bcrypt hash (else plain text)."""
    return password.startswith(BCRYPT_PREFIXES)


def bcrypt_cost(configured: str) -> int | None:
    """The cost factor of a bcrypt hash (``$2b$12$...`` → 12), None for plain text or a malformed hash."""
    if not is_hashed(configured) or len(configured) < 7 or not configured[4:6].isdigit():
        return None
    return int(configured[4:6])


def weak_password(configured: str) -> str | None:
    """What makes a configured password weak (plain text, a bcrypt cost below :data:`MIN_ROUNDS`), or None."""
    if not is_hashed(configured):
        return "stored in plain text"
    cost = bcrypt_cost(configured)
    if cost is not None and cost < MIN_ROUNDS:
        return f"a bcrypt hash of cost {cost} (below {MIN_ROUNDS})"
    return None


def hash_password(password: str, rounds: int = DEFAULT_ROUNDS) -> str:
    """A bcrypt hash of ``password`` for ``[auth] users`` (ValueError past 72 UTF-8 bytes)."""
    encoded = password.encode()
    if len(encoded) > MAX_PASSWORD_BYTES:
        raise ValueError(f"bcrypt takes at most {MAX_PASSWORD_BYTES} bytes of a password, this one has {len(encoded)}")
    return bcrypt.hashpw(encoded, bcrypt.gensalt(rounds)).decode("ascii")


def password_matches(password: bytes, configured: str) -> bool:
    """Whether ``password`` fits ``configured`` (a bcrypt hash, or plain text compared in constant time)."""
    if is_hashed(configured):
        if len(password) > MAX_PASSWORD_BYTES:
            return False
        try:
            return bcrypt.checkpw(password, configured.encode("ascii"))
        except ValueError:  # a malformed hash (checked at start-up, so only by a race with nothing)
            return False
    return hmac.compare_digest(password, configured.encode())


_DUMMY_HASH = "$2b$12$lDkqtCfH0NSWTVHl20IoMOlKFxP20Nbmay4GPB.pQcvTAlGk4KQKC"
"""Checked for an unknown login when no login has a bcrypt hash of another cost."""


def _check(password: bytes, expected: str, padding: str | None) -> bool:
    """``password_matches``, then (a weak login) the same work as a strong one's check."""
    matches = password_matches(password, expected)
    if padding is not None:
        password_matches(password, padding)
    return matches


@implementer(ICredentialsChecker)
class PasswordChecker:
    """Checks ``login``/``passcode`` against configured passwords (hashed or plain).

    Every check of a name costs what a configured login's check costs: an unknown login is
    checked against a dummy hash of the cost of a configured login chosen by the name (keyed
    with a secret of this process, so it cannot be computed from outside), and a weak known
    login (plain text, low cost) is padded with such a dummy check when strong hashes exist.

    :param passwords: login → bcrypt hash or plain-text password.
    :param reactor: whose thread pool runs bcrypt.
    """

    credentialInterfaces = (IUsernamePassword,)

    def __init__(self, passwords: dict[str, str], reactor: Any) -> None:
        self.passwords = dict(passwords)
        self.reactor = reactor
        self._secret = secrets.token_bytes(16)
        costs = sorted(cost for cost in map(bcrypt_cost, self.passwords.values()) if cost is not None)
        self._costs = costs
        """One entry per login with a bcrypt hash: its cost (what a dummy check picks from)."""
        self._dummies = {cost: _DUMMY_HASH if cost == 12 else hash_password(secrets.token_hex(8), cost)
                         for cost in set(costs)}
        self._plain_dummy = secrets.token_hex(16)

    def _dummy_for(self, login: str) -> str | None:
        """A dummy hash of a configured cost chosen by ``login`` (None: no login has a bcrypt hash)."""
        if not self._costs:
            return None
        digest = hmac.new(self._secret, login.encode("utf-8", "replace"), "sha256").digest()
        return self._dummies[self._costs[int.from_bytes(digest[:4], "big") % len(self._costs)]]

    def requestAvatarId(self, credentials: Any) -> Deferred[Any]:
        username = credentials.username
        login = username.decode("utf-8", "replace") if isinstance(username, bytes) else str(username)
        password = credentials.password
        password = password.encode() if isinstance(password, str) else password
        configured = self.passwords.get(login)
        known = configured is not None
        padding: str | None = None
        if configured is None:
            expected = self._dummy_for(login) or self._plain_dummy
        else:
            expected = configured
            if weak_password(configured) is not None:
                padding = self._dummy_for(login)

        def verdict(matches: bool) -> bytes:
            if matches and known:
                return login.encode()
            raise UnauthorizedLogin(f"login {login!r} refused")

        if not is_hashed(expected) and padding is None:  # plain text only: cheap, no thread needed
            d: Deferred[Any] = Deferred()
            d.callback(password_matches(password, expected))
        else:
            d = deferToThreadPool(self.reactor, self.reactor.getThreadPool(), _check, password, expected, padding)
        return d.addCallback(verdict)
