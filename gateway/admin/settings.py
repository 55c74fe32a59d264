"""The ``[admin]`` table: where the admin endpoint listens and who may use it.

``listen``
    Twisted endpoint strings (a string or a list); empty (the default): no
    admin endpoint.  ``ssl:`` endpoints serve HTTPS.
``users``
    logins of ``[auth]`` allowed to use it; empty: every ``[auth]`` login.
    Needs ``[auth]`` users or a password file.
``public_health``
    whether ``/health`` answers without authentication (default true, for
    load balancers and orchestrators); everything else needs a login
    whenever ``[auth]`` has users.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ConfigError, did_you_mean

_KEYS = ("listen", "users", "public_health")


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """The validated ``[admin]`` table (see the module docstring)."""

    listen: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    public_health: bool = True


def _strings(value: Any, path: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"expected a string or a list of strings, got {value!r}", path=path, key=key)
    return tuple(value)


def parse_admin_settings(raw: dict[str, Any], path: str = "", *, has_users: bool = False) -> AdminSettings:
    """Validate ``[admin]``; ``has_users`` says whether ``[auth]`` defines logins.  Raises ConfigError."""
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"unknown key{did_you_mean(key, _KEYS)}", path=path, key=f"admin.{key}")
    listen = _strings(raw.get("listen", []), path, "admin.listen")
    users = _strings(raw.get("users", []), path, "admin.users")
    if users and not has_users:
        raise ConfigError("admin users need [auth] users or an [auth] password_file to log in with",
                          path=path, key="admin.users")
    public_health = raw.get("public_health", True)
    if not isinstance(public_health, bool):
        raise ConfigError(f"expected true or false, got {public_health!r}", path=path, key="admin.public_health")
    return AdminSettings(listen=listen, users=users, public_health=public_health)
