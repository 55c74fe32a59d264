"""Loading and validating the gateway's TOML configuration.

:func:`load_config` reads a file, applies ``--set dotted.key=value``
overrides (values typed as in TOML) and returns a typed
:class:`GatewayConfig`.  Every problem raises :class:`ConfigError` naming the
file, the dotted key and what is wrong, with a "did you mean" for a
misspelt key.  Sections owned by other layers (``transform``, ``routing``,
``connectors``, ``bridges``, ``pipeline``) are kept as raw tables here and
validated by those layers' own parsers.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

from gateway.errors import ConfigError, did_you_mean

DEFAULT_CONFIG = "etc/jmsgateway.toml"


@dataclass(slots=True)
class StompSettings:
    """``[stomp]``: protocol limits and timing."""

    max_frame_size: int = 32 * 1024 * 1024
    max_headers: int = 1000
    max_header_length: int = 64 * 1024
    heartbeat_send_ms: int = 10_000
    heartbeat_receive_ms: int = 10_000
    heartbeat_grace: float = 1.5
    default_prefetch: int = 1000
    max_subscriptions: int = 1000
    connect_timeout_ms: int = 10_000
    close_timeout_ms: int = 5_000
    max_connections: int = 0
    max_connections_per_address: int = 0


@dataclass(slots=True)
class BrokerSettings:
    """``[broker]``: the embedded broker."""

    persistence: str = "sqlite"  # persistent messages survive kill -9 out of the box ("memory": they do not)
    database: str = "broker.sqlite"
    default_persistent: bool = False
    max_redeliveries: int = 6
    dead_letter_prefix: str = "/queue/DLQ."
    expiry_check_interval_ms: int = 1000
    synchronous: str = "FULL"
    max_size: int = 0
    min_free: int = 16 * 1024 * 1024


@dataclass(slots=True)
class AuthSettings:
    """``[auth]``: who may connect.  No users and no file: anonymous access.

    Passwords, groups, certificate identities and the failed-login limit are
    checked by :mod:`gateway.auth` and :mod:`gateway.authorization`."""

    users: dict[str, str] = field(default_factory=dict)
    password_file: str = ""
    allow_plaintext: bool = True
    groups: dict[str, Any] = field(default_factory=dict)
    certificates: dict[str, Any] = field(default_factory=dict)
    max_failed_logins: int = 5
    failed_login_window_ms: int = 60_000
    lockout_ms: int = 10_000


@dataclass(slots=True)
class DestinationRule:
    """One ``[[destinations]]`` entry: gateway destinations (glob) -> connector."""

    pattern: str
    connector: str
    rename: str = ""


@dataclass(slots=True)
class GatewayConfig:
    """The whole validated configuration."""

    path: str = ""
    id: str = "jmsgateway"
    listen: list[str] = field(default_factory=lambda: ["tcp:61613:interface=127.0.0.1"])
    listen_backlog: int = 4096
    data_dir: str = "var"
    stomp: StompSettings = field(default_factory=StompSettings)
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    destinations: list[DestinationRule] = field(default_factory=list)
    connectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    transform: dict[str, Any] = field(default_factory=dict)
    routing: dict[str, Any] = field(default_factory=dict)
    bridges: list[dict[str, Any]] = field(default_factory=list)
    pipeline: dict[str, Any] = field(default_factory=dict)
    admin: dict[str, Any] = field(default_factory=dict)
    authorization: list[dict[str, Any]] = field(default_factory=list)
    """``[[authorization]]`` entries, validated by :mod:`gateway.authorization`."""

    def data_path(self, name: str) -> str:
        """``name`` resolved against :attr:`data_dir` (absolute paths kept)."""
        return name if os.path.isabs(name) else os.path.join(self.data_dir, name)


_GATEWAY_KEYS = {"id": str, "listen": list, "listen_backlog": int, "data_dir": str}
_RAW_TABLES = ("connectors", "transform", "routing", "pipeline", "admin")
_SECTIONS: dict[str, type] = {"stomp": StompSettings, "broker": BrokerSettings, "auth": AuthSettings}
_TOP_LEVEL = ("gateway", "destinations", "bridges", "authorization", *_SECTIONS, *_RAW_TABLES)



def _check_type(value: Any, expected: type, path: str, key: str) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is int and isinstance(value, bool):
        raise ConfigError(f"expected an integer, got {value!r}", path=path, key=key)
    if not isinstance(value, expected):
        raise ConfigError(
            f"expected {expected.__name__}, got {type(value).__name__} {value!r}", path=path, key=key
        )
    return value


def _section(cls: type, raw: Any, path: str, name: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError("expected a table", path=path, key=name)
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"unknown key{did_you_mean(key, list(known))}", path=path, key=f"{name}.{key}")
        default = getattr(cls(), key)
        kwargs[key] = _check_type(value, type(default), path, f"{name}.{key}")
    return cls(**kwargs)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``dotted.key=value``; the value is read as TOML, else as a string."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text!r}: expected dotted.key=value")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key.split("."), parsed


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> None:
    """Apply ``--set`` overrides to a raw config table in place."""
    for text in overrides:
        keys, value = parse_override(text)
        table = raw
        for part in keys[:-1]:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ConfigError(f"--set {text!r}: {part!r} is not a table")
        table[keys[-1]] = value


def load_config(path: str, overrides: list[str] | None = None) -> GatewayConfig:
    """Read, override and validate the configuration at ``path``."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError("file not found", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    apply_overrides(raw, overrides or [])
    return parse_config(raw, path)


def parse_config(raw: dict[str, Any], path: str = "") -> GatewayConfig:
    """Validate a raw TOML table into a :class:`GatewayConfig`."""
    config = GatewayConfig(path=path)
    for key in raw:
        if key not in _TOP_LEVEL:
            raise ConfigError(f"unknown section{did_you_mean(key, _TOP_LEVEL)}", path=path, key=key)
    gateway = raw.get("gateway", {})
    if not isinstance(gateway, dict):
        raise ConfigError("expected a table", path=path, key="gateway")
    for key, value in gateway.items():
        if key not in _GATEWAY_KEYS:
            raise ConfigError(f"unknown key{did_you_mean(key, list(_GATEWAY_KEYS))}", path=path, key=f"gateway.{key}")
        if key == "listen" and isinstance(value, str):
            value = [value]
        setattr(config, key, _check_type(value, _GATEWAY_KEYS[key], path, f"gateway.{key}"))
    for index, endpoint in enumerate(config.listen):
        _check_type(endpoint, str, path, f"gateway.listen[{index}]")
    for name, cls in _SECTIONS.items():
        if name in raw:
            setattr(config, name, _section(cls, raw[name], path, name))
    _validate_limits(config, path)
    if config.broker.persistence not in ("memory", "sqlite"):
        raise ConfigError(
            f"must be 'memory' or 'sqlite', not {config.broker.persistence!r}", path=path, key="broker.persistence"
        )
    if config.broker.synchronous.upper() not in ("FULL", "NORMAL"):
        raise ConfigError(f"must be 'FULL' or 'NORMAL', not {config.broker.synchronous!r}", path=path,
                          key="broker.synchronous")
    for key in ("max_size", "min_free"):
        if getattr(config.broker, key) < 0:
            raise ConfigError("must not be negative", path=path, key=f"broker.{key}")
    config.destinations = _destinations(raw.get("destinations", []), path)
    for name in _RAW_TABLES:
        value = raw.get(name, {})
        setattr(config, name, _check_type(value, dict, path, name))
    bridges = raw.get("bridges", [])
    config.bridges = _check_type(bridges, list, path, "bridges")
    config.authorization = _check_type(raw.get("authorization", []), list, path, "authorization")
    for rule in config.destinations:
        if rule.connector != "embedded" and rule.connector not in config.connectors:
            raise ConfigError(
                f"connector {rule.connector!r} is not defined under [connectors]"
                f"{did_you_mean(rule.connector, list(config.connectors))}",
                path=path,
                key="destinations.connector",
            )
    return config


def _validate_limits(config: GatewayConfig, path: str) -> None:
    positive = {
        "stomp.max_frame_size": config.stomp.max_frame_size,
        "stomp.max_headers": config.stomp.max_headers,
        "stomp.max_header_length": config.stomp.max_header_length,
        "stomp.default_prefetch": config.stomp.default_prefetch,
        "stomp.max_subscriptions": config.stomp.max_subscriptions,
        "broker.expiry_check_interval_ms": config.broker.expiry_check_interval_ms,
        "gateway.listen_backlog": config.listen_backlog,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"must be at least 1, got {value}", path=path, key=key)
    for key, value in {
        "stomp.heartbeat_send_ms": config.stomp.heartbeat_send_ms,
        "stomp.heartbeat_receive_ms": config.stomp.heartbeat_receive_ms,
        "broker.max_redeliveries": config.broker.max_redeliveries,
        "stomp.connect_timeout_ms": config.stomp.connect_timeout_ms,
        "stomp.close_timeout_ms": config.stomp.close_timeout_ms,
        "stomp.max_connections": config.stomp.max_connections,
        "stomp.max_connections_per_address": config.stomp.max_connections_per_address,
    }.items():
        if value < 0:
            raise ConfigError(f"must not be negative, got {value}", path=path, key=key)
    if config.stomp.heartbeat_grace < 1.0:
        raise ConfigError("must be at least 1.0", path=path, key="stomp.heartbeat_grace")
    if not config.listen:
        raise ConfigError("at least one endpoint is needed", path=path, key="gateway.listen")


def _destinations(raw: Any, path: str) -> list[DestinationRule]:
    if not isinstance(raw, list):
        raise ConfigError("expected an array of tables ([[destinations]])", path=path, key="destinations")
    rules = []
    for index, entry in enumerate(raw):
        key = f"destinations[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError("expected a table", path=path, key=key)
        for name in entry:
            known = ("pattern", "connector", "rename")
            if name not in known:
                raise ConfigError(f"unknown key{did_you_mean(name, known)}", path=path, key=f"{key}.{name}")
        for required in ("pattern", "connector"):
            if required not in entry:
                raise ConfigError("missing", path=path, key=f"{key}.{required}")
            _check_type(entry[required], str, path, f"{key}.{required}")
        rules.append(DestinationRule(entry["pattern"], entry["connector"], str(entry.get("rename", ""))))
    return rules
