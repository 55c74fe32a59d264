"""Loading the gateway's TOML configuration into one typed model.

:func:`load_config` reads a file, applies ``--set dotted.key=value``
overrides (values typed as in TOML) and validates the whole document as
:class:`GatewayConfig`, which composes the sections each layer declares in
its own package (``[stomp]``, ``[broker]``, ``[auth]``, ``[[destinations]]``,
``[transform]``, ``[routing]``, ``[connectors.*]``, ``[[bridges]]``, ``[pipeline]``,
``[admin]``); only ``[gateway]`` is declared here.  This module composes: no layer
below the application imports it.  Every problem raises one :class:`ConfigError` naming the
file, the dotted key and what is wrong (:mod:`gateway.schema`).
The references generated from these models (JSON Schema, key tables) are
in :mod:`gateway.config_reference`.
"""

from __future__ import annotations

import os
import tomllib
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from gateway.admin.settings import AdminSettings
from gateway.bridges.config import BridgeConfig
from gateway.broker.settings import BrokerSettings
from gateway.connectors.options import ConnectorOptions
from gateway.errors import ConfigError, did_you_mean
from gateway.pipeline.settings import PipelineSection
from gateway.routing.config import DestinationRule, RoutingSection
from gateway.schema import KeyProblem, Positive, Section, Str, Table, validate
from gateway.security.settings import AuthSettings
from gateway.stomp.origins import parse_allowed
from gateway.stomp.settings import StompSettings
from gateway.transform.config import TransformConfig

DEFAULT_CONFIG = "etc/jmsgateway.toml"


class GatewaySection(Section):
    """``[gateway]``: who the gateway is and where it listens."""

    id: Str = ""
    """Written as ``jmsbridge.origin`` on what the gateway sends; names it in logs and client ids.
    Empty (the default): the installation's own id, generated once and kept in ``<data_dir>/gateway.id``."""
    listen: Annotated[list[Str], Field(min_length=1)] = ["tcp:61613:interface=127.0.0.1"]
    """Twisted endpoint strings of the STOMP listeners (a string or a list)."""
    listen_backlog: Positive = 4096
    """Listen backlog of every listener whose spec names no backlog= (capped at net.core.somaxconn)."""
    data_dir: Str = "var"
    """Folder for the store, dedup files and checkpoints (relative paths below it)."""
    allowed_origins: list[Str] = []
    """Web origins (scheme://host[:port], or "*") whose pages may open a ws: listener; empty: same-origin only."""
    log_level: Literal["debug", "info", "warn", "error", "critical"] = "info"
    """Least level logged (twistd jmsgateway --log-level overrides it; SIGHUP re-reads it)."""

    model_config = ConfigDict(frozen=False)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        parse_allowed(value)  # (ValueError naming the bad entry)
        return value

    @field_validator("listen", mode="before", json_schema_input_type=str | list[str])
    @classmethod
    def _one_endpoint(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class GatewayConfig(Section):
    """The whole configuration, as ``jmsgateway.toml`` gives it."""

    model_config = ConfigDict(frozen=False, title="jmsgateway configuration")

    gateway: GatewaySection = Field(default_factory=GatewaySection)
    stomp: StompSettings = StompSettings()
    broker: BrokerSettings = BrokerSettings()
    auth: AuthSettings = AuthSettings()
    destinations: list[DestinationRule] = []
    connectors: dict[str, ConnectorOptions] = {}
    transform: TransformConfig = Field(default_factory=TransformConfig)
    routing: RoutingSection = Field(default_factory=RoutingSection)
    bridges: list[BridgeConfig] = []
    pipeline: PipelineSection | None = None
    admin: AdminSettings = AdminSettings()
    authorization: list[Table] = []
    """[[authorization]] entries (read/write/admin on destination globs), see gateway.security.authorization."""
    _path: str = PrivateAttr("")

    @model_validator(mode="after")
    def _connectors_exist(self) -> GatewayConfig:
        if "embedded" in self.connectors:
            raise KeyProblem(("connectors", "embedded"), "the name 'embedded' is reserved")
        for index, rule in enumerate(self.destinations):
            if rule.connector != "embedded" and rule.connector not in self.connectors:
                raise KeyProblem(("destinations", index, "connector"),
                                 f"connector {rule.connector!r} is not defined under [connectors]"
                                 f"{did_you_mean(rule.connector, list(self.connectors))}")
        return self

    @property
    def path(self) -> str:
        """The file the configuration came from (empty when built in code)."""
        return self._path

    @property
    def id(self) -> str:
        """``[gateway] id``."""
        return self.gateway.id

    @property
    def listen(self) -> list[str]:
        """``[gateway] listen``."""
        return self.gateway.listen

    @property
    def listen_backlog(self) -> int:
        """``[gateway] listen_backlog``."""
        return self.gateway.listen_backlog

    @property
    def data_dir(self) -> str:
        """``[gateway] data_dir``."""
        return self.gateway.data_dir

    def data_path(self, name: str) -> str:
        """``name`` resolved against :attr:`data_dir` (absolute paths kept)."""
        return name if os.path.isabs(name) else os.path.join(self.data_dir, name)


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
    """Validate a raw TOML document into a :class:`GatewayConfig`."""
    config = validate(GatewayConfig, raw, path=path)
    config._path = path
    config.transform._path = path
    return config
