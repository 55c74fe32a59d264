"""The ``[admin]`` table: where the admin endpoint listens, who may use it, with which role, and the
Host and Origin headers it answers."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from gateway.admin.roles import Role
from gateway.errors import ConfigError
from gateway.schema import Bool, Section, Str, validate


class AdminSettings(Section):
    """The ``[admin]`` table."""

    listen: tuple[Annotated[Str, Field(min_length=1)], ...] = ()
    """Twisted endpoint strings (a string or a list); empty: no admin endpoint; ssl: endpoints serve HTTPS."""
    users: tuple[Annotated[Str, Field(min_length=1)], ...] = ()
    """[auth] logins allowed to use it; empty: every [auth] login.  Needs [auth] users or a password file."""
    public_health: Bool = True
    """Whether /health answers without authentication (for load balancers); the rest needs a login
    whenever [auth] has users."""
    roles: dict[Str, Role] = {}
    """Login -> management role: "viewer" (reads), "operator" (actions its grants allow, its own
    connections), "administrator" (everything)."""
    default_role: Literal["viewer", "operator", "administrator", "none"] = "viewer"
    """Role of a login not in roles; "none": such a login may not use the endpoint (403)."""
    allowed_hosts: tuple[Annotated[Str, Field(min_length=1)], ...] | None = None
    """Host names (no port) a request's Host header may name, else 421; default: the listeners' interface
    addresses, plus localhost, 127.0.0.1 and ::1 on loopback or all interfaces, plus the host name on all."""
    allowed_origins: tuple[Annotated[Str, Field(min_length=1)], ...] | None = None
    """Origins (scheme://host:port) a request's Origin header may name, else 403; default: the endpoint's
    own (an allowed host and the port the request came in on)."""

    @field_validator("listen", "users", "allowed_hosts", "allowed_origins", mode="wrap",
                     json_schema_input_type=str | list[str])
    @classmethod
    def _strings(cls, value: Any, handler: Any) -> Any:
        try:
            return handler([value] if isinstance(value, str) else value)
        except ValueError:
            raise ValueError(f"expected a string or a list of strings, got {value!r}") from None

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if hosts is None:
            return None
        for host in hosts:
            if any(c in host for c in "/:@ ") and not _is_ipv6(host):
                raise ValueError(f"{host!r} is not a host name (no scheme, port or path: 'admin.example.org')")
        return tuple(host.strip("[]").lower().rstrip(".") for host in hosts)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, origins: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if origins is None:
            return None
        for origin in origins:
            try:
                parts = urlsplit(origin)
                parts.port  # noqa: B018 - raises on a bad port
            except ValueError:
                parts = None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
                    or parts.path not in ("", "/") or parts.query or parts.username:
                raise ValueError(f"{origin!r} is not an origin such as 'https://admin.example.org:8161'")
        return origins


def _is_ipv6(host: str) -> bool:
    return ":" in host and all(c in "0123456789abcdefABCDEF:.[]" for c in host)


def parse_admin_settings(raw: dict[str, Any] | AdminSettings, path: str = "", *,
                         has_users: bool = False) -> AdminSettings:
    """Validate ``[admin]``; ``has_users`` says whether ``[auth]`` defines logins.  Raises ConfigError."""
    settings = validate(AdminSettings, raw, path=path, prefix="admin")
    if settings.users and not has_users:
        raise ConfigError("admin users need [auth] users or an [auth] password_file to log in with",
                          path=path, key="admin.users")
    if settings.roles and not has_users:
        raise ConfigError("admin roles need [auth] users or an [auth] password_file to log in with",
                          path=path, key="admin.roles")
    return settings
