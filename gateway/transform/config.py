"""The ``[transform]`` section: chains of transformers, their order, options and failure policies.

Declared as models (keys and defaults: docs/configuration.md); it does not know which
transformers exist (:class:`gateway.transform.chain.TransformChains` checks the names).
Failure policies: ``reject`` fails the message (an ERROR frame instead of the RECEIPT
inbound); ``dead-letter`` sends the message as it arrived to ``dead_letter``; ``skip``
passes it on as it was before the failing transformer; ``drop`` consumes it.  A
transformer whose Deferred has not fired after ``timeout`` seconds is cancelled and
counts as failed.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from gateway.schema import Bool, KeyProblem, Seconds, Section, Str, Strings, Table, validate

ChainDirection = Literal["inbound", "outbound", "both"]
ErrorPolicy = Literal["reject", "dead-letter", "skip", "drop"]

CHAIN_DIRECTIONS: tuple[str, ...] = ("inbound", "outbound", "both")
ERROR_POLICIES: tuple[str, ...] = ("reject", "dead-letter", "skip", "drop")

DEFAULT_TIMEOUT = 30.0
"""Seconds an asynchronous transformer may take unless configured otherwise."""

Destination = Annotated[Str, Field(min_length=1)]


class ChainEntry(Section):
    """One ``[[transform.chain]]`` entry: run ``transformer`` on matching messages."""

    transformer: Annotated[Str, Field(min_length=1)]
    """The transformer's name (a loaded plugin's)."""
    destinations: Annotated[Strings, Field(min_length=1)] = ("*",)
    """fnmatch globs on the STOMP-side destination."""
    direction: ChainDirection = "both"
    """Which way the entry applies."""
    on_error: ErrorPolicy = "reject"
    """reject | dead-letter | skip | drop (default: [transform] on_error)."""
    dead_letter: Destination | None = None
    """Dead-letter destination of on_error = 'dead-letter' (default: [transform] dead_letter)."""
    options: Table = {}
    """Options merged over [transform.options.<transformer>]."""
    timeout: Seconds | None = None
    """Seconds an asynchronous result may take (default: [transform] timeout)."""
    _key: str = PrivateAttr("")
    _patterns: tuple[re.Pattern[str], ...] = PrivateAttr(())

    def model_post_init(self, context: Any, /) -> None:
        self._patterns = tuple(re.compile(fnmatch.translate(glob)) for glob in self.destinations)

    @model_validator(mode="after")
    def _dead_letter_policy(self) -> ChainEntry:
        if self.dead_letter is not None and self.on_error != "dead-letter":
            raise KeyProblem("dead_letter", "is only used with on_error = 'dead-letter' "
                             f"(this entry's policy is {self.on_error!r})")
        if self.on_error == "dead-letter" and self.dead_letter is None:
            raise KeyProblem("on_error", "on_error = 'dead-letter' needs a dead_letter destination "
                             "(here or in [transform])")
        return self

    @property
    def key(self) -> str:
        """The dotted config key of the entry (``transform.chain[2]``), for error messages."""
        return self._key

    def with_key(self, key: str) -> ChainEntry:
        """This entry, named ``key`` in error messages."""
        self._key = key
        return self

    def matches(self, direction: str, destination: str) -> bool:
        """Whether the entry applies to a message going ``direction`` on ``destination``."""
        if self.direction != "both" and self.direction != direction:
            return False
        return any(pattern.match(destination) for pattern in self._patterns)


class TransformConfig(Section):
    """The ``[transform]`` section (the defaults when it is absent)."""

    plugin_dirs: Strings = ("plugins",)
    """Folders whose *.py files are plugins (relative to the working directory)."""
    blocked: Strings = ()
    """Plugin names never registered."""
    load_entry_points: Bool = True
    """Load setuptools entry points of the group "jmsgateway"."""
    transformation_header: Bool = True
    """Honour the ActiveMQ transformation header."""
    on_error: ErrorPolicy = "reject"
    """Default failure policy: reject | dead-letter | skip | drop."""
    dead_letter: Destination | None = None
    """Default dead-letter destination."""
    timeout: Seconds = DEFAULT_TIMEOUT
    """Seconds an asynchronous transformer may take (0: no limit)."""
    options: dict[str, Table] = {}
    """Default options of each transformer, by name."""
    chain: tuple[ChainEntry, ...] = ()
    """Evaluated in order; every matching entry runs."""
    _path: str = PrivateAttr("")

    @model_validator(mode="before")
    @classmethod
    def _entry_defaults(cls, raw: Any) -> Any:
        """Entries without on_error / dead_letter take the section's."""
        if not isinstance(raw, dict) or not isinstance(raw.get("chain"), list):
            return raw
        policy, dead_letter = raw.get("on_error", "reject"), raw.get("dead_letter")
        chain = []
        for entry in raw["chain"]:
            if isinstance(entry, dict):
                entry = {"on_error": policy, **entry}
                if entry["on_error"] == "dead-letter" and dead_letter is not None:
                    entry.setdefault("dead_letter", dead_letter)
            chain.append(entry)
        return {**raw, "chain": chain}

    @model_validator(mode="after")
    def _policy_needs_dead_letter(self) -> TransformConfig:
        if self.on_error == "dead-letter" and self.dead_letter is None:
            raise KeyProblem("on_error", "on_error = 'dead-letter' needs a dead_letter destination")
        for index, entry in enumerate(self.chain):
            entry.with_key(f"transform.chain[{index}]")
        return self

    @property
    def path(self) -> str:
        """The file the section came from, for error messages."""
        return self._path

    def options_for(self, transformer: str, entry: ChainEntry | None = None) -> Mapping[str, Any]:
        """The options a transformer runs with: its defaults, overridden by the entry's."""
        defaults = self.options.get(transformer, {})
        if entry is None or not entry.options:
            return defaults
        return {**defaults, **entry.options} if defaults else entry.options


def parse_transform_config(raw: Mapping[str, Any] | TransformConfig | None, path: str = "") -> TransformConfig:
    """Validate the ``[transform]`` table ``raw`` (as parsed by ``tomllib``; None: the defaults).

    :raises ConfigError: naming the file, the dotted key and what is wrong with it.
    """
    config = validate(TransformConfig, {} if raw is None else raw, path=path, prefix="transform")
    config._path = path or config._path
    return config
