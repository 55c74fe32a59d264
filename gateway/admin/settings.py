"""The ``[admin]`` table: where the admin endpoint listens and who may use it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

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

    @field_validator("listen", "users", mode="wrap", json_schema_input_type=str | list[str])
    @classmethod
    def _strings(cls, value: Any, handler: Any) -> Any:
        try:
            return handler([value] if isinstance(value, str) else value)
        except ValueError:
            raise ValueError(f"expected a string or a list of strings, got {value!r}") from None


def parse_admin_settings(raw: dict[str, Any] | AdminSettings, path: str = "", *,
                         has_users: bool = False) -> AdminSettings:
    """Validate ``[admin]``; ``has_users`` says whether ``[auth]`` defines logins.  Raises ConfigError."""
    settings = validate(AdminSettings, raw, path=path, prefix="admin")
    if settings.users and not has_users:
        raise ConfigError("admin users need [auth] users or an [auth] password_file to log in with",
                          path=path, key="admin.users")
    return settings
