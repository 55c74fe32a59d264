"""Authentication of STOMP logins through ``twisted.cred``.

:func:`build_portal` turns the ``[auth]`` section into a Portal:

- ``users`` (login → password) and ``password_file`` (``login:password``
  lines, read at start-up) are checked by one
  :class:`~gateway.security.passwords.PasswordChecker`; a password is a bcrypt hash
  (``jmsgateway hash-password``) or plain text.  A *weak* password (plain
  text, or a bcrypt cost below :data:`~gateway.security.passwords.MIN_ROUNDS`) stops
  start-up naming the login and key, unless ``allow_weak_passwords = true``
  (development), which warns once per such login instead;
  ``allow_plaintext = false`` refuses plain text even then.  A login in both:
  the file's line wins.
- ``certificates`` (subject CN → login) lets a client that proved a
  certificate on an ``mtls:`` listener log in as that login without a
  passcode (:class:`CertificateChecker`).

No users, no file and no certificates means anonymous access and no portal
at all.
"""

from __future__ import annotations

from typing import Any

from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.error import UnauthorizedLogin
from twisted.cred.portal import IRealm, Portal
from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from zope.interface import implementer

from gateway.errors import ConfigError
from gateway.interfaces import ICertificateIdentity, IStompUser
from gateway.security.passwords import MIN_ROUNDS, PasswordChecker, is_hashed, weak_password
from gateway.security.settings import AuthSettings

log = Logger()


@implementer(IStompUser)
class StompUser:
    """An authenticated STOMP login."""

    def __init__(self, login: str | None) -> None:
        self.login = login


@implementer(IRealm)
class StompRealm:
    """Hands out :class:`StompUser` avatars."""

    def requestAvatar(self, avatarId: Any, mind: Any, *interfaces: Any) -> tuple[Any, StompUser, Any]:
        if IStompUser not in interfaces:
            raise NotImplementedError("only IStompUser avatars are served")
        login = avatarId.decode() if isinstance(avatarId, bytes) else avatarId
        return IStompUser, StompUser(login), lambda: None


@implementer(ICertificateIdentity)
class CertificateIdentity:
    """Credentials of a client whose certificate (subject ``common_name``) the ``mtls:`` listener verified."""

    def __init__(self, common_name: str, login: str | None = None) -> None:
        self.common_name = common_name
        self.login = login


@implementer(ICredentialsChecker)
class CertificateChecker:
    """Maps a verified certificate's subject CN to a login (``[auth] certificates``).

    A CONNECT naming a login other than the certificate's is refused.
    """

    credentialInterfaces = (ICertificateIdentity,)

    def __init__(self, users_by_name: dict[str, str]) -> None:
        self.users_by_name = dict(users_by_name)

    def requestAvatarId(self, credentials: Any) -> Deferred[Any]:
        login = self.users_by_name.get(credentials.common_name)
        if login is None:
            return fail(UnauthorizedLogin(f"certificate CN {credentials.common_name!r} is not mapped to a login"))
        if credentials.login is not None and credentials.login != login:
            return fail(UnauthorizedLogin(f"certificate CN {credentials.common_name!r} is {login!r}, "
                                          f"not {credentials.login!r}"))
        return succeed(login.encode())


def _file_passwords(path: str, config_path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise ConfigError(f"cannot read password file: {reason}", path=config_path, key="auth.password_file") from None
    passwords = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        login, sep, password = line.partition(":")
        if not sep or not login:
            raise ConfigError(f"line {number} of {path} is not login:password", path=config_path,
                              key="auth.password_file")
        passwords[login] = password
    return passwords


def configured_passwords(settings: AuthSettings, config_path: str = "") -> dict[str, str]:
    """Every login's configured password (hash or plain text), checked against ``allow_weak_passwords``
    and ``allow_plaintext`` (ConfigError naming the login's key; a warning per allowed weak one)."""
    passwords: dict[str, str] = {}
    for login, password in settings.users.items():
        if not isinstance(password, str):
            raise ConfigError("passwords must be strings", path=config_path, key=f"auth.users.{login}")
        passwords[login] = password
    from_file = _file_passwords(settings.password_file, config_path) if settings.password_file else {}
    passwords.update(from_file)
    for login, password in passwords.items():
        key = "auth.password_file" if login in from_file else f"auth.users.{login}"
        if password.startswith("$2") and not is_hashed(password):
            raise ConfigError("looks like a hash but is not bcrypt ($2a$, $2b$, $2y$)", path=config_path, key=key)
        weakness = weak_password(password)
        if weakness is None:
            continue
        if not is_hashed(password) and not settings.allow_plaintext:
            raise ConfigError("the password is plain text and [auth] allow_plaintext is false; store a hash "
                              "from 'jmsgateway hash-password'", path=config_path, key=key)
        if not settings.allow_weak_passwords:
            raise ConfigError(f"the password of login {login!r} is {weakness}: store a bcrypt hash of cost "
                              f"{MIN_ROUNDS} or more ('jmsgateway hash-password'), or set [auth] "
                              "allow_weak_passwords = true (development only: such a login is quick to guess, "
                              "and its timing tells it apart)", path=config_path, key=key)
        log.warn("the password of login {login!r} ({key}) is {weakness}; replace it by the output of "
                 "'jmsgateway hash-password' (allowed by [auth] allow_weak_passwords = true)",
                 login=login, key=key, weakness=weakness)
    return passwords


def certificate_users(settings: AuthSettings, config_path: str = "") -> dict[str, str]:
    """``[auth] certificates``: subject CN → login, validated."""
    for name, login in settings.certificates.items():
        if not isinstance(login, str) or not login:
            raise ConfigError("expected the login this certificate's CN logs in as", path=config_path,
                              key=f"auth.certificates.{name}")
    return dict(settings.certificates)


def build_portal(settings: AuthSettings, config_path: str = "", reactor: Any = None) -> Portal | None:
    """A portal for the configured users and certificates, or None for anonymous access."""
    checkers: list[ICredentialsChecker] = []
    passwords = configured_passwords(settings, config_path)
    if passwords or settings.password_file:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        checkers.append(PasswordChecker(passwords, reactor))
    certificates = certificate_users(settings, config_path)
    if certificates:
        checkers.append(CertificateChecker(certificates))
    if not checkers:
        return None
    return Portal(StompRealm(), checkers)
