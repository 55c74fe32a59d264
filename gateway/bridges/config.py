"""The ``[[bridges]]`` configuration, validated into :class:`BridgeConfig` objects.

Owns :func:`parse_bridges` only: no Twisted, no connectors.  Parameter names
are those of the JBoss Messaging / ActiveMQ Artemis JMS bridge in snake_case;
the Artemis camelCase spellings are accepted too (``maxBatchSize``,
``qualityOfServiceMode``, ``sourceUsername`` …).  Shape::

    [[bridges]]
    name = "orders-to-kafka"                # unique; default "bridge-<index>"
    source = { connector = "embedded", destination = "/queue/orders" }
    target = { connector = "kafka", destination = "/topic/orders", user = "u", password = "p" }
    selector = "region = 'EU'"              # JMS selector applied at the source
    qos = "DUPLICATES_OK"                   # AT_MOST_ONCE | DUPLICATES_OK | ONCE_AND_ONLY_ONCE
    failure_retry_interval = 5000           # ms between reconnection attempts (>= 1)
    max_retries = -1                        # -1: forever; 0: fail at the first failure
    max_batch_size = 1                      # >= 1
    max_batch_time = 100                    # ms; -1: wait for a full batch
    subscription_name = "orders"            # durable topic subscription (source a topic)
    client_id = "bridge-1"                  # its client id (default: the bridge name)
    add_message_id_in_header = false        # append the source id to AMQ_BRIDGE_MSG_ID_LIST
    transformers = ["header-map", { transformer = "compress", options = { level = 6 } }]
    duplicate_window = 86400000             # ms ids are kept (ONCE_AND_ONLY_ONCE)
    enabled = true                          # false: built but not started

Every problem raises :class:`~gateway.errors.ConfigError` naming the file,
the key (``bridges[2].max_batch_time``) and what is wrong, with a "did you
mean" for a misspelt key, QoS or connector.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ConfigError, SelectorError, did_you_mean

AT_MOST_ONCE = "AT_MOST_ONCE"
DUPLICATES_OK = "DUPLICATES_OK"
ONCE_AND_ONLY_ONCE = "ONCE_AND_ONLY_ONCE"
QOS_MODES: tuple[str, ...] = (AT_MOST_ONCE, DUPLICATES_OK, ONCE_AND_ONLY_ONCE)

DEFAULT_RETRY_INTERVAL_MS = 5000
DEFAULT_BATCH_TIME_MS = 100
DEFAULT_DUPLICATE_WINDOW_MS = 24 * 3600 * 1000

_KEYS = (
    "name",
    "source",
    "target",
    "selector",
    "qos",
    "failure_retry_interval",
    "max_retries",
    "max_batch_size",
    "max_batch_time",
    "subscription_name",
    "client_id",
    "add_message_id_in_header",
    "transformers",
    "duplicate_window",
    "enabled",
)
_SIDE_KEYS = ("connector", "destination", "user", "password")

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


@dataclass(slots=True, frozen=True)
class BridgeEndpoint:
    """One side of a bridge: a connector, a destination on it, optional credentials."""

    connector: str
    destination: str
    user: str | None = None
    password: str | None = None

    @property
    def is_topic(self) -> bool:
        """Whether the destination names a topic (``/topic/…``)."""
        return self.destination.startswith("/topic/")


@dataclass(slots=True, frozen=True)
class TransformerStep:
    """One transformer a bridge runs, with its options and failure policy."""

    transformer: str
    options: Mapping[str, Any] = field(default_factory=dict)
    on_error: str = "reject"
    dead_letter: str | None = None


@dataclass(slots=True, frozen=True)
class BridgeConfig:
    """One validated ``[[bridges]]`` entry (see the module docstring for the meaning)."""

    name: str
    source: BridgeEndpoint
    target: BridgeEndpoint
    selector: str | None = None
    qos: str = DUPLICATES_OK
    failure_retry_interval: int = DEFAULT_RETRY_INTERVAL_MS
    max_retries: int = -1
    max_batch_size: int = 1
    max_batch_time: int = DEFAULT_BATCH_TIME_MS
    subscription_name: str | None = None
    client_id: str | None = None
    add_message_id_in_header: bool = False
    transformers: tuple[TransformerStep, ...] = ()
    duplicate_window: int = DEFAULT_DUPLICATE_WINDOW_MS
    enabled: bool = True
    key: str = ""
    """The dotted config key of the entry (``bridges[0]``), for messages."""

    @property
    def durable(self) -> bool:
        """Whether the bridge consumes through a durable topic subscription."""
        return self.subscription_name is not None

    @property
    def prefetch(self) -> int:
        """Unacknowledged deliveries the bridge takes from its source: room for the
        batch being sent, the next one filling and acknowledgements under way
        (at least 100, so a source that fetches in rounds, like Kafka, streams)."""
        return max(2 * self.max_batch_size, 100)



class _Reader:
    """Typed access to one raw entry, raising ConfigError with the full key."""

    def __init__(self, path: str, key: str) -> None:
        self.path = path
        self.key = key

    def error(self, problem: str, name: str = "") -> ConfigError:
        return ConfigError(problem, path=self.path, key=f"{self.key}.{name}" if name else self.key)

    def integer(self, raw: dict[str, Any], name: str, default: int) -> int:
        value = raw.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, got {value!r}", name)
        return value

    def text(self, raw: Mapping[str, Any], name: str, *, required: bool = False, where: str = "") -> str | None:
        key = f"{where}.{name}" if where else name
        value = raw.get(name)
        if value is None:
            if required:
                raise self.error("missing", key)
            return None
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {value!r}", key)
        if required and not value.strip():
            raise self.error("must not be empty", key)
        return value

    def boolean(self, raw: dict[str, Any], name: str, default: bool) -> bool:
        value = raw.get(name, default)
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {value!r}", name)
        return value


def _normalise(entry: dict[str, Any], reader: _Reader) -> dict[str, Any]:
    """Map Artemis camelCase keys onto ours; refuse unknown keys with a suggestion."""
    result: dict[str, Any] = {}
    sides: dict[str, dict[str, Any]] = {}
    for name, value in entry.items():
        if name in _SIDE_ALIASES:
            side, attribute = _SIDE_ALIASES[name]
            sides.setdefault(side, {})[attribute] = value
            continue
        canonical = _ALIASES.get(name, name)
        if canonical not in _KEYS:
            raise reader.error(f"unknown bridge parameter{did_you_mean(name, (*_KEYS, *_ALIASES))}", name)
        if canonical in result:
            raise reader.error(f"given twice (as {canonical!r} and an alias)", name)
        result[canonical] = value
    for side, extra in sides.items():
        table = result.get(side)
        if table is None:
            table = result[side] = {}
        if not isinstance(table, dict):
            continue  # reported when the side is read
        for attribute, value in extra.items():
            table.setdefault(attribute, value)
    return result


def _endpoint(raw: Any, side: str, reader: _Reader, connectors: set[str]) -> BridgeEndpoint:
    if raw is None:
        raise reader.error("missing: a table with connector and destination", side)
    if not isinstance(raw, dict):
        raise reader.error("expected a table such as { connector = \"embedded\", destination = \"/queue/a\" }", side)
    table: dict[str, Any] = {}
    for name, value in raw.items():
        canonical = _SIDE_KEY_ALIASES.get(name, name)
        if canonical not in _SIDE_KEYS:
            raise reader.error(f"unknown key{did_you_mean(name, _SIDE_KEYS)}", f"{side}.{name}")
        table[canonical] = value
    connector = reader.text(table, "connector", where=side) or "embedded"
    if connector not in connectors:
        known = ", ".join(sorted(connectors))
        raise reader.error(
            f"connector {connector!r} is not defined{did_you_mean(connector, sorted(connectors))}; known: {known}",
            f"{side}.connector",
        )
    destination = reader.text(table, "destination", required=True, where=side)
    assert destination is not None
    if not destination.startswith("/"):
        raise reader.error(
            f"expected a destination such as /queue/name or /topic/name, got {destination!r}", f"{side}.destination"
        )
    user = reader.text(table, "user", where=side)
    password = reader.text(table, "password", where=side)
    if password is not None and user is None:
        raise reader.error("a password needs a user", f"{side}.password")
    return BridgeEndpoint(connector, destination, user, password)


def _qos(raw: Any, reader: _Reader) -> str:
    if not isinstance(raw, str):
        raise reader.error(f"expected one of {', '.join(QOS_MODES)}, got {raw!r}", "qos")
    value = raw.strip().upper().replace("-", "_")
    value = value.removeprefix("QOS_")
    if value == "ONCE_AND_ONCE_ONLY":  # the spelling in the Artemis manual
        value = ONCE_AND_ONLY_ONCE
    if value not in QOS_MODES:
        raise reader.error(f"must be one of {', '.join(QOS_MODES)}, not {raw!r}{did_you_mean(value, QOS_MODES)}", "qos")
    return value


def _selector(raw: Any, reader: _Reader) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise reader.error(f"expected a JMS selector string, got {raw!r}", "selector")
    if not raw.strip():
        return None
    from gateway.selector import compile_selector

    try:
        compile_selector(raw)
    except SelectorError as exc:
        raise reader.error(f"invalid JMS selector: {exc}", "selector") from None
    return raw


def _transformers(raw: Any, reader: _Reader) -> tuple[TransformerStep, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise reader.error("expected an array of transformer names or tables", "transformers")
    steps: list[TransformerStep] = []
    for index, item in enumerate(raw):
        key = f"transformers[{index}]"
        if isinstance(item, str):
            if not item:
                raise reader.error("must not be empty", key)
            steps.append(TransformerStep(item))
            continue
        if not isinstance(item, dict):
            raise reader.error(f"expected a transformer name or a table, got {item!r}", key)
        known = ("transformer", "options", "on_error", "dead_letter")
        for name in item:
            if name not in known:
                raise reader.error(f"unknown key{did_you_mean(name, known)}", f"{key}.{name}")
        name = reader.text(item, "transformer", required=True, where=key)
        options = item.get("options", {})
        if not isinstance(options, dict):
            raise reader.error("expected a table", f"{key}.options")
        on_error = reader.text(item, "on_error", where=key) or "reject"
        policies = ("reject", "dead-letter", "skip", "drop")
        if on_error not in policies:
            raise reader.error(f"must be one of {', '.join(policies)}, not {on_error!r}", f"{key}.on_error")
        dead_letter = reader.text(item, "dead_letter", where=key)
        if on_error == "dead-letter" and not dead_letter:
            raise reader.error("on_error = 'dead-letter' needs a dead_letter destination", f"{key}.on_error")
        assert name is not None
        steps.append(TransformerStep(name, dict(options), on_error, dead_letter))
    return tuple(steps)


def parse_bridge(entry: Any, index: int, path: str, connector_names: set[str]) -> BridgeConfig:
    """Validate one ``[[bridges]]`` entry (``index`` names it in errors)."""
    reader = _Reader(path, f"bridges[{index}]")
    if not isinstance(entry, dict):
        raise reader.error("expected a table ([[bridges]])")
    raw = _normalise(entry, reader)
    name = reader.text(raw, "name") or f"bridge-{index}"
    if not name.strip():
        raise reader.error("must not be empty", "name")
    source = _endpoint(raw.get("source"), "source", reader, connector_names)
    target = _endpoint(raw.get("target"), "target", reader, connector_names)
    if (source.connector, source.destination) == (target.connector, target.destination):
        raise reader.error(f"source and target are the same destination ({source.connector} {source.destination})",
                           "target.destination")
    qos = _qos(raw.get("qos", DUPLICATES_OK), reader)
    retry_interval = reader.integer(raw, "failure_retry_interval", DEFAULT_RETRY_INTERVAL_MS)
    if retry_interval < 1:
        raise reader.error(f"must be at least 1 (milliseconds), got {retry_interval}", "failure_retry_interval")
    max_retries = reader.integer(raw, "max_retries", -1)
    if max_retries < -1:
        raise reader.error(f"must be -1 (retry forever) or >= 0, got {max_retries}", "max_retries")
    batch_size = reader.integer(raw, "max_batch_size", 1)
    if batch_size < 1:
        raise reader.error(f"must be >= 1, got {batch_size}", "max_batch_size")
    batch_time = reader.integer(raw, "max_batch_time", DEFAULT_BATCH_TIME_MS)
    if batch_time == 0 or batch_time < -1:
        raise reader.error(f"must be -1 (wait forever) or >= 1 (milliseconds), got {batch_time}", "max_batch_time")
    subscription_name = reader.text(raw, "subscription_name")
    client_id = reader.text(raw, "client_id")
    if subscription_name is not None:
        if not subscription_name.strip():
            raise reader.error("must not be empty", "subscription_name")
        if not source.is_topic:
            raise reader.error(
                f"a durable subscription needs a topic source (/topic/…), not {source.destination!r}",
                "subscription_name",
            )
        client_id = client_id or name
    elif client_id is not None and source.is_topic:
        raise reader.error("client_id is only used with subscription_name (a durable subscription)", "client_id")
    window = reader.integer(raw, "duplicate_window", DEFAULT_DUPLICATE_WINDOW_MS)
    if window < 1:
        raise reader.error(f"must be at least 1 (milliseconds), got {window}", "duplicate_window")
    return BridgeConfig(
        name=name,
        source=source,
        target=target,
        selector=_selector(raw.get("selector"), reader),
        qos=qos,
        failure_retry_interval=retry_interval,
        max_retries=max_retries,
        max_batch_size=batch_size,
        max_batch_time=batch_time,
        subscription_name=subscription_name,
        client_id=client_id,
        add_message_id_in_header=reader.boolean(raw, "add_message_id_in_header", False),
        transformers=_transformers(raw.get("transformers"), reader),
        duplicate_window=window,
        enabled=reader.boolean(raw, "enabled", True),
        key=reader.key,
    )


def parse_bridges(raw: Any, path: str, connector_names: set[str]) -> list[BridgeConfig]:
    """Validate the ``[[bridges]]`` array.

    :param raw: ``config.bridges`` (a list of tables).
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
