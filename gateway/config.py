"""Loading the gateway's TOML configuration into one typed model.

:func:`load_config` reads a file, applies ``--set dotted.key=value``
overrides (values typed as in TOML) and validates the whole document as
:class:`GatewayConfig`, which composes the sections each layer declares in
its own package (``[transform]``, ``[routing]``, ``[connectors.*]``,
``[[bridges]]``, ``[pipeline]``, ``[admin]``); the core sections
(``[gateway]``, ``[stomp]``, ``[broker]``, ``[auth]``, ``[[destinations]]``)
are declared here.  Every problem raises one :class:`ConfigError` naming the
file, the dotted key and what is wrong (:mod:`gateway.schema`).
The references generated from these models (JSON Schema, key tables) are
in :mod:`gateway.config_reference`.
"""

from __future__ import annotations

import os
import tomllib
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from gateway.admin.settings import AdminSettings
from gateway.bridges.config import BridgeConfig
from gateway.connectors.options import ConnectorOptions
from gateway.errors import ConfigError, did_you_mean
from gateway.pipeline.settings import PipelineSection
from gateway.routing.config import RoutingSection
from gateway.schema import Bool, Int, KeyProblem, Section, Str, Table, TomlKind, validate
from gateway.stomp.origins import parse_allowed
from gateway.transform.config import TransformConfig

DEFAULT_CONFIG = "etc/jmsgateway.toml"

Positive = Annotated[Int, Field(ge=1)]
NotNegative = Annotated[Int, Field(ge=0)]


def _size(value: Any) -> int:
    from gateway.broker.limits import parse_size

    return parse_size(value)


Size = Annotated[Int, Field(ge=0), BeforeValidator(_size, json_schema_input_type=int | str),
                 TomlKind('a size ("64MB", "1GiB") or an integer of bytes')]
"""A size in bytes: an integer, or a string such as "64MB", "1GiB", "512KiB" (K/M/G are powers of 1024)."""


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


class StompSettings(Section):
    """``[stomp]``: protocol limits and timing."""

    max_frame_size: Positive = 32 * 1024 * 1024
    """Largest frame (headers and body) in bytes."""
    max_headers: Positive = 1000
    """Most headers in one frame."""
    max_header_length: Positive = 64 * 1024
    """Longest header line in bytes."""
    heartbeat_send_ms: NotNegative = 10_000
    """Heart-beat interval the gateway offers to send (0: none)."""
    heartbeat_receive_ms: NotNegative = 10_000
    """Heart-beat interval the gateway asks clients for (0: none)."""
    heartbeat_grace: Annotated[float, Field(ge=1.0, strict=True)] = 1.5
    """Factor on the receive interval before a silent client is dropped."""
    default_prefetch: Positive = 1000
    """Unacknowledged messages per subscription unless the client sets activemq.prefetchSize."""
    max_subscriptions: Positive = 1000
    """Subscriptions one connection may hold."""
    connect_timeout_ms: NotNegative = 10_000
    """A connection without a completed CONNECT by then is closed (0: never)."""
    close_timeout_ms: NotNegative = 5_000
    """A closing connection whose peer does not take what is buffered is then aborted."""
    max_connections: NotNegative = 0
    """Open STOMP connections (0: the open-file limit less a reserve)."""
    max_connections_per_address: NotNegative = 0
    """Connections from one client address (0: no cap)."""


class DestinationLimits(Section):
    """``[broker.destinations."PATTERN"]``: the memory limit and full policy of matching destinations."""

    max_size: Size = 0
    """Bytes of queued messages one matching destination may hold in memory (0: only memory_limit applies)."""
    full_policy: Literal["PAGE", "BLOCK", "FAIL", "DROP"] = "PAGE"
    """What a full destination does with a SEND: PAGE (accept, keep only a window in memory),
    BLOCK (stop reading from its senders), FAIL (refuse with an ERROR) or DROP (discard, counted)."""

    @field_validator("full_policy", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class BrokerSettings(Section):
    """``[broker]``: the embedded broker."""

    persistence: Literal["memory", "sqlite"] = "sqlite"
    """Where persistent messages live: sqlite (they survive kill -9) or memory (lost on restart)."""
    database: Str = "broker.sqlite"
    """The SQLite file (relative to data_dir)."""
    default_persistent: Bool = False
    """Whether a SEND without a persistent header is persistent."""
    max_redeliveries: NotNegative = 6
    """Deliveries after the first before a message is dead-lettered."""
    dead_letter_prefix: Str = "/queue/DLQ."
    """Dead letters of /queue/x go to this prefix plus x."""
    expiry_check_interval_ms: Positive = 1000
    """How often expired messages are removed."""
    synchronous: Str = "FULL"
    """SQLite's synchronous pragma: FULL or NORMAL."""
    max_size: NotNegative = 0
    """Largest store in bytes (0: no limit)."""
    min_free: NotNegative = 16 * 1024 * 1024
    """Free disk bytes the store and the page file keep (0: no check)."""
    memory_limit: Size | None = None
    """Bytes queued messages may take in memory, process-wide ("512MB", "1GiB" or bytes).
    Unset: 1/8 of physical memory, at most 1 GiB (docs/paging.md); 0: no limit (nothing is paged for memory)."""
    dedup_window: NotNegative = 100_000
    """Idempotency keys (x-dedup-id headers) remembered: a resent SEND with one is acknowledged, not stored
    twice (docs/high-availability.md); 0: no duplicate detection."""
    dedup_window_seconds: Positive = 86_400
    """Seconds an idempotency key is remembered at most."""
    destinations: dict[str, DestinationLimits] = {}
    """Destination pattern ("/queue/orders.>", "/queue/*.audit", an fnmatch glob) -> max_size, full_policy."""

    @field_validator("synchronous")
    @classmethod
    def _pragma(cls, value: str) -> str:
        if value.upper() not in ("FULL", "NORMAL"):
            raise ValueError(f"must be 'FULL' or 'NORMAL', not {value!r}")
        return value

    @field_validator("destinations")
    @classmethod
    def _patterns(cls, value: dict[str, DestinationLimits]) -> dict[str, DestinationLimits]:
        for pattern in value:
            if not pattern.startswith("/"):  # (it would match no destination, silently)
                raise ValueError(f"pattern {pattern!r} matches no destination: a pattern starts with '/' "
                                 f"(\"/queue/{pattern}\" or \"/topic/{pattern}\")")
        return value


class AuthSettings(Section):
    """``[auth]``: who may connect.  No users and no file: anonymous access.

    Passwords, groups, certificate identities and the failed-login limit are
    checked by :mod:`gateway.auth` and :mod:`gateway.authorization` (docs/security.md)."""

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


class DestinationRule(Section):
    """One ``[[destinations]]`` entry: gateway destinations (glob) -> connector."""

    pattern: Str
    """fnmatch glob on the STOMP destination."""
    connector: Str
    """``embedded`` or a name under [connectors]."""
    rename: Str = ""
    """Prefix replacing the pattern's fixed part on the way to the connector."""


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
    """[[authorization]] entries (read/write/admin on destination globs), validated by gateway.authorization."""
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
