"""The ``[[bridges]]`` configuration, validated into :class:`BridgeConfig` models.

No Twisted, no connectors.  Parameter names are those of the JBoss Messaging / ActiveMQ
Artemis JMS bridge in snake_case; the Artemis camelCase spellings are accepted too
(``maxBatchSize``, ``qualityOfServiceMode``, ``sourceUsername`` …).  Keys and defaults:
docs/configuration.md; an example: etc/examples/bridges.toml.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, field_validator, model_validator

from gateway.errors import ConfigError, SelectorError, did_you_mean
from gateway.schema import Bool, Int, KeyProblem, Retries, Section, Str, Table, validate

AT_MOST_ONCE = "AT_MOST_ONCE"
DUPLICATES_OK = "DUPLICATES_OK"
ONCE_AND_ONLY_ONCE = "ONCE_AND_ONLY_ONCE"
QOS_STRATEGIES: dict[str, tuple[str, ...]] = {
    AT_MOST_ONCE: ("gateway.bridges.qos:AtMostOnce",),
    DUPLICATES_OK: ("gateway.bridges.qos:DuplicatesOk",),
    ONCE_AND_ONLY_ONCE: ("gateway.bridges.qos:TransactionalCopy", "gateway.bridges.qos:LocalTransaction",
                         "gateway.bridges.qos:OnceAndOnlyOnce"),
}
"""The registry of quality-of-service modes: mode -> its strategy classes
(:mod:`gateway.bridges.qos`), tried in order; the ``qos`` option takes these names.
Named by path, so this module imports no Twisted."""
QOS_MODES: tuple[str, ...] = tuple(QOS_STRATEGIES)

WINDOW = 4
"""Batches a bridge keeps in flight at most (its strategy may take fewer)."""
DEFAULT_RETRY_INTERVAL_MS = 5000
DEFAULT_BATCH_TIME_MS = 100
DEFAULT_DUPLICATE_WINDOW_MS = 24 * 3600 * 1000

_ALIASES: dict[str, str] = {
    "quality_of_service": "qos",
    "qualityOfService": "qos",
    "qualityOfServiceMode": "qos",
    "failureRetryInterval": "failure_retry_interval",
    "maxRetries": "max_retries",
    "maxBatchSize": "max_batch_size",
    "maxBatchTime": "max_batch_time",
    "subscriptionName": "subscription_name",
    "clientID": "client_id",
    "clientId": "client_id",
    "addMessageIDInHeader": "add_message_id_in_header",
    "addMessageIdInHeader": "add_message_id_in_header",
    "duplicateWindow": "duplicate_window",
}
_SIDE_ALIASES: dict[str, tuple[str, str]] = {
    "sourceUsername": ("source", "user"),
    "sourceUserName": ("source", "user"),
    "sourcePassword": ("source", "password"),
    "targetUsername": ("target", "user"),
    "targetUserName": ("target", "user"),
    "targetPassword": ("target", "password"),
    "sourceDestination": ("source", "destination"),
    "targetDestination": ("target", "destination"),
}
_SIDE_KEY_ALIASES = {"username": "user", "login": "user", "passcode": "password"}


class BridgeEndpoint(Section):
    """One side of a bridge: a connector, a destination on it, optional credentials."""

    connector: Str = "embedded"
    """``embedded`` or a name under [connectors]."""
    destination: Str
    """/queue/name or /topic/name on that connector."""
    user: Str | None = None
    """Login of a private connection (username, login accepted too)."""
    password: Str | None = None
    """Its password (passcode accepted too)."""

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise ValueError('expected a table such as { connector = "embedded", destination = "/queue/a" }')
        return {_SIDE_KEY_ALIASES.get(name, name): value for name, value in raw.items()}

    @field_validator("destination")
    @classmethod
    def _slash(cls, destination: str) -> str:
        if not destination.startswith("/"):
            raise ValueError(f"expected a destination such as /queue/name or /topic/name, got {destination!r}")
        if destination.startswith(TEMPORARY_PREFIXES):
            raise ValueError(f"{destination!r} is a temporary destination: it belongs to the STOMP connection "
                             "that created it and ends with it, so a bridge cannot read or write it; "
                             "bridge a /queue/ or /topic/ destination")
        return destination

    @model_validator(mode="after")
    def _password_needs_user(self) -> BridgeEndpoint:
        if self.password is not None and self.user is None:
            raise KeyProblem("password", "a password needs a user")
        return self

    @property
    def is_topic(self) -> bool:
        """Whether the destination names a topic (``/topic/…``)."""
        return self.destination.startswith("/topic/")


class TransformerStep(Section):
    """One transformer a bridge runs (or just its name), with its options and failure policy."""

    transformer: Annotated[Str, Field(min_length=1)]
    """The transformer's name."""
    options: Table = {}
    """Its options."""
    on_error: Literal["reject", "dead-letter", "skip", "drop"] = "reject"
    """Failure policy (as in [[transform.chain]])."""
    dead_letter: Str | None = None
    """Dead-letter destination of on_error = 'dead-letter'."""

    @model_validator(mode="after")
    def _dead_letter(self) -> TransformerStep:
        if self.on_error == "dead-letter" and not self.dead_letter:
            raise KeyProblem("on_error", "on_error = 'dead-letter' needs a dead_letter destination")
        return self


TEMPORARY_PREFIXES = ("/temp-queue/", "/temp-topic/", "/remote-temp-queue/", "/remote-temp-topic/")
"""Temporary destinations (a connection's own): never a bridge's source or target."""


def _named(value: Any) -> Any:
    return {"transformer": value} if isinstance(value, str) else value


Step = Annotated[TransformerStep, BeforeValidator(_named, json_schema_input_type=Str | TransformerStep)]


def _qos(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"expected one of {', '.join(QOS_MODES)}, got {value!r}")
    mode = value.strip().upper().replace("-", "_").removeprefix("QOS_")
    mode = ONCE_AND_ONLY_ONCE if mode == "ONCE_AND_ONCE_ONLY" else mode  # the Artemis manual's spelling
    if mode not in QOS_MODES:
        raise ValueError(f"must be one of {', '.join(QOS_MODES)}, not {value!r}{did_you_mean(mode, QOS_MODES)}")
    return mode


class BridgeConfig(Section):
    """One ``[[bridges]]`` entry (Artemis camelCase spellings accepted)."""

    name: Str = ""
    """Unique name (default bridge-<index>)."""
    source: BridgeEndpoint
    """Where messages come from: { connector, destination, user, password }."""
    target: BridgeEndpoint
    """Where they go."""
    selector: Str | None = None
    """JMS selector applied at the source."""
    qos: Annotated[str, BeforeValidator(_qos), Field(json_schema_extra={"enum": list(QOS_MODES)})] = DUPLICATES_OK
    """AT_MOST_ONCE | DUPLICATES_OK | ONCE_AND_ONLY_ONCE."""
    failure_retry_interval: Annotated[Int, Field(ge=1)] = DEFAULT_RETRY_INTERVAL_MS
    """Milliseconds between reconnection attempts."""
    max_retries: Retries = -1
    """-1: retry forever; 0: fail at the first failure."""
    max_batch_size: Annotated[Int, Field(ge=1)] = 1
    """Messages sent (and acknowledged) together."""
    max_batch_time: Int = DEFAULT_BATCH_TIME_MS
    """Milliseconds a batch may wait to fill; -1: wait for a full batch."""
    subscription_name: Annotated[Str, Field(min_length=1)] | None = None
    """Durable topic subscription of a topic source."""
    client_id: Str | None = None
    """Client id of the durable subscription (default: the bridge name)."""
    add_message_id_in_header: Bool = False
    """Append the source message id to AMQ_BRIDGE_MSG_ID_LIST."""
    transformers: tuple[Step, ...] = ()
    """Transformer names or { transformer, options, on_error, dead_letter } tables."""
    duplicate_window: Annotated[Int, Field(ge=1)] = DEFAULT_DUPLICATE_WINDOW_MS
    """Milliseconds ids are kept (ONCE_AND_ONLY_ONCE)."""
    enabled: Bool = True
    """false: built but not started."""
    _key: str = PrivateAttr("")

    @model_validator(mode="before")
    @classmethod
    def _artemis_spellings(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            raise ValueError("expected a table ([[bridges]])")
        result: dict[str, Any] = {}
        for name, value in raw.items():
            if name in _SIDE_ALIASES:
                continue
            canonical = str(_ALIASES.get(name, name))
            if canonical in result:
                raise KeyProblem(name, f"given twice (as {canonical!r} and an alias)")
            result[canonical] = value
        for name, (side, attribute) in _SIDE_ALIASES.items():
            if name in raw and isinstance(result.setdefault(side, {}), dict):
                result[side] = {attribute: raw[name], **result[side]}
        return result

    @field_validator("selector")
    @classmethod
    def _selector(cls, selector: str | None) -> str | None:
        if selector is None or not selector.strip():
            return None
        from gateway.selector import compile_selector

        try:
            compile_selector(selector)
        except SelectorError as exc:
            raise ValueError(f"invalid JMS selector: {exc}") from None
        return selector

    @field_validator("max_batch_time")
    @classmethod
    def _batch_time(cls, value: int) -> int:
        if value == 0 or value < -1:
            raise ValueError(f"must be -1 (wait forever) or >= 1 (milliseconds), got {value}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> BridgeConfig:
        source, target = self.source, self.target
        if (source.connector, source.destination) == (target.connector, target.destination):
            raise KeyProblem(("target", "destination"),
                             f"source and target are the same destination ({source.connector} {source.destination})")
        if self.subscription_name is not None and not source.is_topic:
            raise KeyProblem("subscription_name", "a durable subscription needs a topic source (/topic/…), "
                             f"not {source.destination!r}")
        if self.subscription_name is None and self.client_id is not None and source.is_topic:
            raise KeyProblem("client_id", "client_id is only used with subscription_name (a durable subscription)")
        return self

    @property
    def key(self) -> str:
        """The dotted config key of the entry (``bridges[0]``), for messages."""
        return self._key

    @property
    def durable(self) -> bool:
        """Whether the bridge consumes through a durable topic subscription."""
        return self.subscription_name is not None

    @property
    def prefetch(self) -> int:
        """Unacknowledged deliveries the bridge takes from its source: room for the
        batches in flight (:data:`WINDOW`), the next one filling and acknowledgements
        under way (at least 100, so a source that fetches in rounds, like Kafka, streams)."""
        return max((WINDOW + 1) * self.max_batch_size, 100)


def parse_bridge(entry: Any, index: int, path: str, connector_names: set[str]) -> BridgeConfig:
    """Validate one ``[[bridges]]`` entry (``index`` names it in errors) against the gateway's connectors."""
    key = f"bridges[{index}]"
    bridge = validate(BridgeConfig, entry, path=path, prefix=key)
    for side in ("source", "target"):
        connector = getattr(bridge, side).connector
        if connector not in connector_names:
            known = ", ".join(sorted(connector_names))
            hint = did_you_mean(connector, sorted(connector_names))
            raise ConfigError(f"connector {connector!r} is not defined{hint}; known: {known}", path=path,
                              key=f"{key}.{side}.connector")
    name = bridge.name or f"bridge-{index}"
    client_id = bridge.client_id or (name if bridge.durable else None)
    bridge = bridge.model_copy(update={"name": name, "client_id": client_id})
    bridge._key = key
    return bridge


def parse_bridges(raw: Any, path: str, connector_names: set[str]) -> list[BridgeConfig]:
    """Validate the ``[[bridges]]`` array.

    :param raw: ``config.bridges`` (tables or validated entries).
    :param path: the configuration file, named in errors.
    :param connector_names: every connector the gateway has (``embedded`` included).
    :raises ConfigError: naming ``bridges[i].<key>`` and the problem.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError("expected an array of tables ([[bridges]])", path=path, key="bridges")
    bridges = [parse_bridge(entry, index, path, connector_names) for index, entry in enumerate(raw)]
    seen: dict[str, int] = {}
    for index, bridge in enumerate(bridges):
        if bridge.name in seen:
            raise ConfigError(f"bridge name {bridge.name!r} is already used by bridges[{seen[bridge.name]}]",
                              path=path, key=f"bridges[{index}].name")
        seen[bridge.name] = index
    return bridges
