"""``[auth]``: who may connect, declared in the security layer and composed into the whole
configuration by :mod:`gateway.config`."""

from __future__ import annotations

from gateway.schema import Bool, Int, Section, Str, Table
from gateway.security.quotas import LoginLimits


class AuthSettings(Section):
    """``[auth]``: who may connect.  No users and no file: anonymous access.

    Passwords, groups, certificate identities and the failed-login limit are
    checked by :mod:`gateway.security.auth` and :mod:`gateway.security.authorization` (docs/security.md)."""

    users: dict[str, Str] = {}
    """Logins and their passwords (bcrypt hashes of cost >= 10 from jmsgateway hash-password; weaker ones need
    allow_weak_passwords)."""
    password_file: Str = ""
    """A file of login:password lines (Twisted's FilePasswordDB)."""
    allow_plaintext: Bool = True
    """False refuses plain-text passwords even with allow_weak_passwords."""
    allow_weak_passwords: Bool = False
    """Whether plain-text and low-cost (bcrypt cost < 10) passwords start (with a warning); false refuses them."""
    groups: Table = {}
    """Group name -> list of logins, for [[authorization]] entries (group:NAME)."""
    certificates: Table = {}
    """Subject CN of a verified client certificate (mtls: listeners) -> login."""
    max_failed_logins: Int = 5
    """Failed logins from one address within failed_login_window_ms before it is locked out."""
    failed_login_window_ms: Int = 60_000
    """The window failed logins are counted in."""
    lockout_ms: Int = 10_000
    """How long a locked-out address is refused."""
    limits: dict[Str, LoginLimits] = {}
    """Login ("*": every login without an entry) -> max_connections and max_queues it may hold
    (docs/security.md, "Resource limits per login"); applied by SIGHUP to the next CONNECT or creation."""
