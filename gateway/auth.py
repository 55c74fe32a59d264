"""Authentication of STOMP logins through ``twisted.cred``.

:func:`build_portal` turns the ``[auth]`` section into a Portal: users listed
in the config, or a password file of ``login:password`` lines
(``FilePasswordDB``).  No users and no file means anonymous access and no
portal at all.
"""

from __future__ import annotations

from typing import Any

from twisted.cred.checkers import FilePasswordDB, ICredentialsChecker, InMemoryUsernamePasswordDatabaseDontUse
from twisted.cred.portal import IRealm, Portal
from zope.interface import implementer

from gateway.config import AuthSettings
from gateway.errors import ConfigError
from gateway.interfaces import IStompUser


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


def build_portal(settings: AuthSettings, config_path: str = "") -> Portal | None:
    """A portal for the configured users, or None for anonymous access."""
    checkers: list[ICredentialsChecker] = []
    if settings.users:
        memory = InMemoryUsernamePasswordDatabaseDontUse()
        for login, password in settings.users.items():
            if not isinstance(password, str):
                raise ConfigError("passwords must be strings", path=config_path, key=f"auth.users.{login}")
            memory.addUser(login.encode(), password.encode())
        checkers.append(memory)
    if settings.password_file:
        try:
            with open(settings.password_file, "rb"):
                pass
        except OSError as exc:
            raise ConfigError(f"cannot read password file: {exc.strerror}", path=config_path,
                              key="auth.password_file") from None
        checkers.append(FilePasswordDB(settings.password_file, cache=True))
    if not checkers:
        return None
    return Portal(StompRealm(), checkers)
