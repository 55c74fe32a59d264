"""Password hashes and the ``twisted.cred`` checker that verifies logins against them.

A password in ``[auth] users`` (or a ``login:password`` line of
``[auth] password_file``) is either a bcrypt hash (``$2b$...``, made by
``jmsgateway hash-password``) or plain text, which still works but is warned
about at start-up (or refused with ``[auth] allow_plaintext = false``).

bcrypt is slow on purpose (a quarter of a second at cost 12), so
:class:`PasswordChecker` verifies in the reactor's thread pool: a login never
blocks the reactor.  An unknown login is checked against a dummy hash, so the
time taken does not tell which logins exist.  This module owns no policy about
who may do what (:mod:`gateway.authorization` does).
"""

from __future__ import annotations

import hmac
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


def is_hashed(password: str) -> bool:
    """Whether a configured password is a bcrypt hash (else plain text)."""
    return password.startswith(BCRYPT_PREFIXES)


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
"""Checked for an unknown login, so it takes as long as a known one."""


@implementer(ICredentialsChecker)
class PasswordChecker:
    """Checks ``login``/``passcode`` against configured passwords (hashed or plain).

    :param passwords: login → bcrypt hash or plain-text password.
    :param reactor: whose thread pool runs bcrypt.
    """

    credentialInterfaces = (IUsernamePassword,)

    def __init__(self, passwords: dict[str, str], reactor: Any) -> None:
        self.passwords = dict(passwords)
        self.reactor = reactor

    def requestAvatarId(self, credentials: Any) -> Deferred[Any]:
        username = credentials.username
        login = username.decode("utf-8", "replace") if isinstance(username, bytes) else str(username)
        password = credentials.password
        password = password.encode() if isinstance(password, str) else password
        configured = self.passwords.get(login)
        known = configured is not None
        expected = configured if configured is not None else _DUMMY_HASH

        def verdict(matches: bool) -> bytes:
            if matches and known:
                return login.encode()
            raise UnauthorizedLogin(f"login {login!r} refused")

        if not is_hashed(expected):  # plain text: cheap, no thread needed
            d: Deferred[Any] = Deferred()
            d.callback(password_matches(password, expected))
        else:
            d = deferToThreadPool(self.reactor, self.reactor.getThreadPool(), password_matches, password, expected)
        return d.addCallback(verdict)
