"""The ``[transform]`` section of the gateway configuration, validated.

Owns :func:`parse_transform_config` and the typed objects it returns; it does
not read files (``gateway.config`` does and hands the section over) and does
not know which transformers exist (:class:`gateway.transform.chain.TransformChains`
checks names against the loaded plugins).  Shape::

    [transform]
    plugin_dirs = ["plugins"]        # folders whose *.py files are plugins (relative to the cwd)
    blocked = []                     # plugin names never registered
    load_entry_points = true         # load setuptools entry points, group "jmsgateway"
    transformation_header = true     # honour the ActiveMQ `transformation` header
    on_error = "reject"              # default policy: reject | dead-letter | skip | drop
    dead_letter = "/queue/DLQ.transform"   # default dead-letter destination
    timeout = 30.0                   # seconds an asynchronous transformer may take (0: no limit)

    [transform.options.compress]     # default options of one transformer, by name
    algorithm = "gzip"

    [[transform.chain]]              # evaluated in order; every matching entry runs, in order
    transformer = "header-map"
    destinations = ["/queue/orders.*"]   # fnmatch globs on the STOMP-side destination; default ["*"]
    direction = "both"               # inbound | outbound | both
    on_error = "reject"
    dead_letter = "/queue/DLQ.transform"
    timeout = 5.0                    # overrides [transform] timeout
    options = { rename = { "X-Old" = "x-new" } }   # merged over [transform.options.<name>]

Failure policies: ``reject`` fails the message (an ERROR frame instead of the
RECEIPT inbound); ``dead-letter`` sends the message as it arrived to
``dead_letter``; ``skip`` passes the message on as it was before the failing
transformer; ``drop`` consumes it without transferring it.  A transformer
whose Deferred has not fired after ``timeout`` seconds is cancelled and
counts as failed.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

from gateway.errors import ConfigError

ChainDirection = Literal["inbound", "outbound", "both"]
ErrorPolicy = Literal["reject", "dead-letter", "skip", "drop"]

CHAIN_DIRECTIONS: tuple[str, ...] = ("inbound", "outbound", "both")
ERROR_POLICIES: tuple[str, ...] = ("reject", "dead-letter", "skip", "drop")

_SECTION = "transform"
_SECTION_KEYS = (
    "plugin_dirs",
    "blocked",
    "load_entry_points",
    "transformation_header",
    "on_error",
    "dead_letter",
    "timeout",
    "options",
    "chain",
)
_ENTRY_KEYS = ("transformer", "destinations", "direction", "on_error", "dead_letter", "timeout", "options")
_EMPTY: Mapping[str, Any] = MappingProxyType({})

DEFAULT_TIMEOUT = 30.0
"""Seconds an asynchronous transformer may take unless configured otherwise."""

_T = TypeVar("_T")


@dataclass(slots=True, frozen=True)
class ChainEntry:
    """One ``[[transform.chain]]`` entry: run ``transformer`` on matching messages.

    :ivar key: the dotted config key of the entry (``transform.chain[2]``),
        for error messages.
    """

    transformer: str
    destinations: tuple[str, ...] = ("*",)
    direction: ChainDirection = "both"
    on_error: ErrorPolicy = "reject"
    dead_letter: str | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    key: str = ""
    timeout: float | None = None
    """Seconds an asynchronous result may take; None: the section's timeout."""
    _patterns: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = tuple(re.compile(fnmatch.translate(glob)) for glob in self.destinations)
        object.__setattr__(self, "_patterns", compiled)

    def matches(self, direction: str, destination: str) -> bool:
        """Whether the entry applies to a message going ``direction`` on ``destination``."""
        if self.direction != "both" and self.direction != direction:
            return False
        return any(pattern.match(destination) for pattern in self._patterns)


@dataclass(slots=True, frozen=True)
class TransformConfig:
    """The validated ``[transform]`` section (the defaults when it is absent).

    :ivar options: default options per transformer name, merged under each
        chain entry's own options and used for header-selected transformers.
    :ivar path: the file the section came from, for error messages.
    """

    plugin_dirs: tuple[str, ...] = ("plugins",)
    blocked: tuple[str, ...] = ()
    load_entry_points: bool = True
    transformation_header: bool = True
    on_error: ErrorPolicy = "reject"
    dead_letter: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: _EMPTY)
    chain: tuple[ChainEntry, ...] = ()
    path: str = ""

    def options_for(self, transformer: str, entry: ChainEntry | None = None) -> Mapping[str, Any]:
        """The options a transformer runs with: its defaults, overridden by the entry's."""
        defaults = self.options.get(transformer, _EMPTY)
        if entry is None or not entry.options:
            return defaults
        if not defaults:
            return entry.options
        return MappingProxyType({**defaults, **entry.options})


def parse_transform_config(raw: Mapping[str, Any] | None, path: str = "") -> TransformConfig:
    """Validate the ``[transform]`` table ``raw`` (as parsed by ``tomllib``).

    :param raw: the section's table (not the whole document); None or empty
        for the defaults.
    :param path: the configuration file, named in errors.
    :raises ConfigError: naming the dotted key and what is wrong with it.
    """
    if raw is None:
        return TransformConfig(path=path)
    section = _table(raw, _SECTION, path)
    _reject_unknown(section, _SECTION_KEYS, _SECTION, path)
    on_error = _policy(section.get("on_error", "reject"), f"{_SECTION}.on_error", path)
    dead_letter = _optional_destination(section.get("dead_letter"), f"{_SECTION}.dead_letter", path)
    if on_error == "dead-letter" and dead_letter is None:
        raise ConfigError(
            "on_error = 'dead-letter' needs a dead_letter destination", path=path, key=f"{_SECTION}.on_error"
        )
    timeout = _seconds(section.get("timeout", DEFAULT_TIMEOUT), f"{_SECTION}.timeout", path)
    options = _table(section.get("options", {}), f"{_SECTION}.options", path)
    defaults: dict[str, Mapping[str, Any]] = {}
    for name, value in options.items():
        defaults[name] = MappingProxyType(dict(_table(value, f"{_SECTION}.options.{name}", path)))
    raw_chain = section.get("chain", [])
    if not isinstance(raw_chain, list):
        raise ConfigError("must be an array of tables ([[transform.chain]])", path=path, key=f"{_SECTION}.chain")
    chain = tuple(
        _entry(item, f"{_SECTION}.chain[{index}]", path, on_error, dead_letter) for index, item in enumerate(raw_chain)
    )
    return TransformConfig(
        plugin_dirs=_strings(section.get("plugin_dirs", ["plugins"]), f"{_SECTION}.plugin_dirs", path),
        blocked=_strings(section.get("blocked", []), f"{_SECTION}.blocked", path),
        load_entry_points=_typed(section.get("load_entry_points", True), bool, f"{_SECTION}.load_entry_points", path),
        transformation_header=_typed(
            section.get("transformation_header", True), bool, f"{_SECTION}.transformation_header", path
        ),
        on_error=on_error,
        dead_letter=dead_letter,
        timeout=timeout,
        options=MappingProxyType(defaults),
        chain=chain,
        path=path,
    )


def _entry(raw: Any, key: str, path: str, default_policy: ErrorPolicy, default_dead_letter: str | None) -> ChainEntry:
    table = _table(raw, key, path)
    _reject_unknown(table, _ENTRY_KEYS, key, path)
    if "transformer" not in table:
        raise ConfigError("missing the transformer name", path=path, key=f"{key}.transformer")
    transformer = _typed(table["transformer"], str, f"{key}.transformer", path)
    if not transformer:
        raise ConfigError("must not be empty", path=path, key=f"{key}.transformer")
    destinations = _strings(table.get("destinations", ["*"]), f"{key}.destinations", path)
    if not destinations:
        raise ConfigError('must name at least one destination glob ("*" for all)', path=path, key=f"{key}.destinations")
    direction = _typed(table.get("direction", "both"), str, f"{key}.direction", path)
    if direction not in CHAIN_DIRECTIONS:
        raise ConfigError(
            f"must be one of {', '.join(CHAIN_DIRECTIONS)}, not {direction!r}",
            path=path,
            key=f"{key}.direction",
        )
    explicit_policy = "on_error" in table
    on_error = _policy(table["on_error"], f"{key}.on_error", path) if explicit_policy else default_policy
    dead_letter = _optional_destination(table.get("dead_letter"), f"{key}.dead_letter", path)
    if dead_letter is not None and on_error != "dead-letter":
        raise ConfigError(
            f"is only used with on_error = 'dead-letter' (this entry's policy is {on_error!r})",
            path=path,
            key=f"{key}.dead_letter",
        )
    if on_error == "dead-letter":
        dead_letter = dead_letter or default_dead_letter
        if dead_letter is None:
            raise ConfigError(
                "on_error = 'dead-letter' needs a dead_letter destination (here or in [transform])",
                path=path,
                key=f"{key}.on_error",
            )
    options = MappingProxyType(dict(_table(table.get("options", {}), f"{key}.options", path)))
    timeout = _seconds(table["timeout"], f"{key}.timeout", path) if "timeout" in table else None
    return ChainEntry(
        transformer=transformer,
        destinations=destinations,
        direction=cast(ChainDirection, direction),
        on_error=on_error,
        dead_letter=dead_letter,
        options=options,
        key=key,
        timeout=timeout,
    )


def _table(value: Any, key: str, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"must be a table, not {_kind(value)}", path=path, key=key)
    return value


def _typed(value: Any, expected: type[_T], key: str, path: str) -> _T:
    if not isinstance(value, expected):
        raise ConfigError(f"must be a {_TYPE_NAMES[expected]}, not {_kind(value)}", path=path, key=key)
    return value


def _strings(value: Any, key: str, path: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"must be an array of strings, not {_kind(value)}", path=path, key=key)
    return tuple(value)


def _seconds(value: Any, key: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"must be a number of seconds >= 0 (0: no limit), not {value!r}", path=path, key=key)
    return float(value)


def _policy(value: Any, key: str, path: str) -> ErrorPolicy:
    policy = _typed(value, str, key, path)
    if policy not in ERROR_POLICIES:
        raise ConfigError(f"must be one of {', '.join(ERROR_POLICIES)}, not {policy!r}", path=path, key=key)
    return cast(ErrorPolicy, policy)


def _optional_destination(value: Any, key: str, path: str) -> str | None:
    if value is None:
        return None
    destination = _typed(value, str, key, path)
    if not destination:
        raise ConfigError("must not be empty", path=path, key=key)
    return destination


def _reject_unknown(table: Mapping[str, Any], known: tuple[str, ...], key: str, path: str) -> None:
    for name in table:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
            raise ConfigError(f"unknown key{hint}", path=path, key=f"{key}.{name}")


def _kind(value: Any) -> str:
    return {
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


_TYPE_NAMES: dict[type, str] = {str: "string", bool: "boolean", int: "integer", dict: "table"}
