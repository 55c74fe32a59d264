"""The ``[routing]`` configuration: routes from STOMP destinations to Kafka topics.

:func:`parse_routing_config` turns the raw TOML table into a typed
:class:`RoutingConfig`.  Routes come from ``[[routing.routes]]`` tables and
from the Confluent JMS-Bridge's properties syntax, unchanged, given inline
(``properties = '''...'''``) or as a file (``properties_file``)::

    routing.dead-letter-topic=jms-bridge-dlq        # routing.dead-letter.topic too
    routing.on-soft-failure=dead-letter             # stop (default) | skip | dead-letter
    routes.fooRoute.name=fooRoute
    routes.fooRoute.in.include=msg.address==foo-topic
    routes.fooRoute.in.selector=color = 'red'       # optional, ANDed with include
    routes.fooRoute.out.topic=foobar-topic
    routes.fooRoute.conv.key=msg.header.CorrelationId   # map.key is accepted too
    routes.fooRoute.on-soft-failure=skip            # per route

Properties are read top-down and a later key overrides an earlier one;
routes keep the order in which their names first appear, after the TOML
routes.  Keys outside ``routing.`` and ``routes.`` are ignored (a whole
``jms-bridge.properties`` file may be given).  Nothing here does I/O beyond
reading the properties file, and nothing imports Twisted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import ConfigError, SelectorError, did_you_mean
from gateway.java_properties import parse_properties
from gateway.message.model import Message
from gateway.routing.predicates import Predicate, compile_predicate, compile_selector_predicate
from gateway.schema import Section, Str, validate

SOFT_FAILURE_POLICIES = ("stop", "skip", "dead-letter")
_POLICY_ALIASES = {
    "stop": "stop",
    "hard-stop": "stop",
    "skip": "skip",
    "log-and-skip": "skip",
    "dead-letter": "dead-letter",
    "log-and-dead-letter": "dead-letter",
}
_ROUTE_PROPERTIES = {
    "name": "name",
    "in.include": "include",
    "in.selector": "selector",
    "out.topic": "topic",
    "conv.key": "key",
    "map.key": "key",
    "on-soft-failure": "on_soft_failure",
}
_ROUTING_PROPERTIES = {
    "dead-letter-topic": "dead_letter_topic",
    "dead-letter.topic": "dead_letter_topic",
    "on-soft-failure": "on_soft_failure",
}


class RouteEntry(Section):
    """One ``[[routing.routes]]`` table."""

    name: Str | None = None
    """The route's name (default: routing.routes[i])."""
    include: Str | None = None
    """JMS-Bridge predicate (msg.address == x) or a JMS selector choosing the messages."""
    selector: Str | None = None
    """An extra JMS selector that must match too."""
    topic: Str | None = None
    """The Kafka topic the route publishes to (required)."""
    key: Str | None = None
    """Header/property giving the record key (msg.header.NAME; default: the message id)."""
    on_soft_failure: Str | None = None
    """stop | skip | dead-letter for this route (default: the section's)."""


class RoutingSection(Section):
    """The ``[routing]`` table: routes to Kafka topics, in TOML or the JMS-Bridge properties syntax."""

    dead_letter_topic: Str | None = None
    """Topic of soft failures under the dead-letter policy."""
    on_soft_failure: Str | None = None
    """stop (default) | skip | dead-letter (log-and-skip, log-and-dead-letter, hard-stop too)."""
    connector: Str | None = None
    """The Kafka connector the routes publish through (default: kafka)."""
    properties: Str | None = None
    """Routes in the JMS-Bridge properties syntax."""
    properties_file: Str | None = None
    """A JMS-Bridge properties file (relative to the config file)."""
    routes: tuple[RouteEntry, ...] = ()
    """TOML routes, evaluated before the property routes."""


@dataclass(frozen=True, slots=True)
class Route:
    """One route: messages it includes go to ``topic`` with a key from ``key``.

    :ivar include: the JMS-Bridge predicate (``msg.address == x``) or a selector.
    :ivar selector: an extra JMS selector that must match too.
    :ivar key: header/property giving the Kafka key; None uses the message id.
    :ivar on_soft_failure: this route's policy; None follows the config's.
    """

    name: str
    topic: str
    include: Predicate | None = None
    selector: Predicate | None = None
    key: str | None = None
    on_soft_failure: str | None = None

    def matches(self, message: Message) -> bool:
        """Whether every predicate of the route holds for ``message``."""
        if self.include is not None and not self.include.matches(message):
            return False
        return self.selector is None or self.selector.matches(message)


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """The routes, in evaluation order, and what to do with soft failures."""

    routes: tuple[Route, ...] = ()
    dead_letter_topic: str | None = None
    on_soft_failure: str = "stop"
    connector: str = "kafka"
    path: str = ""

    def policy_for(self, route: Route) -> str:
        """The soft-failure policy that applies to ``route``."""
        return route.on_soft_failure or self.on_soft_failure

    def topics(self) -> list[str]:
        """Every topic the routes (and dead letters) publish to."""
        topics = dict.fromkeys(route.topic for route in self.routes)
        if self.dead_letter_topic:
            topics[self.dead_letter_topic] = None
        return list(topics)


@dataclass(slots=True)
class _RouteDraft:
    """Values gathered for one route before it is checked."""

    key: str
    values: dict[str, str] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    from_properties: bool = False

    def key_of(self, setting: str) -> str:
        """The dotted key a setting of this route is (or would be) written as."""
        if setting in self.where:
            return self.where[setting]
        if self.from_properties:
            spelled = {"include": "in.include", "topic": "out.topic", "key": "conv.key"}.get(setting, setting)
            return f"{self.key}.{spelled}"
        return f"{self.key}.{setting}"



def _policy(value: Any, path: str, key: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in _POLICY_ALIASES:
        raise ConfigError(
            f"expected one of {', '.join(SOFT_FAILURE_POLICIES)}, got {value!r}", path=path, key=key
        )
    return _POLICY_ALIASES[value.strip().lower()]


def _properties_routes(
    pairs: list[tuple[str, str]], path: str, settings: dict[str, tuple[str, str]]
) -> list[_RouteDraft]:
    drafts: dict[str, _RouteDraft] = {}
    for key, value in pairs:
        if key.startswith("routing."):
            setting = key[len("routing.") :]
            if setting not in _ROUTING_PROPERTIES:
                raise ConfigError(
                    f"unknown routing property{did_you_mean(setting, _ROUTING_PROPERTIES)}", path=path, key=key
                )
            settings[_ROUTING_PROPERTIES[setting]] = (value, key)
            continue
        if not key.startswith("routes."):
            continue
        route_key, _, setting = key[len("routes.") :].partition(".")
        if not route_key or not setting:
            raise ConfigError("expected routes.<route>.<setting>", path=path, key=key)
        if setting not in _ROUTE_PROPERTIES:
            raise ConfigError(f"unknown route property{did_you_mean(setting, _ROUTE_PROPERTIES)}", path=path, key=key)
        draft = drafts.setdefault(route_key, _RouteDraft(key=f"routes.{route_key}", from_properties=True))
        draft.values[_ROUTE_PROPERTIES[setting]] = value
        draft.where[_ROUTE_PROPERTIES[setting]] = key
    return list(drafts.values())


def _toml_routes(routes: tuple[RouteEntry, ...]) -> list[_RouteDraft]:
    drafts: list[_RouteDraft] = []
    for index, route in enumerate(routes):
        where = f"routing.routes[{index}]"
        values = route.model_dump(exclude_none=True)
        drafts.append(_RouteDraft(key=where, values=values, where={key: f"{where}.{key}" for key in values}))
    return drafts


def _build_route(draft: _RouteDraft, path: str) -> Route:
    values = draft.values
    name = values.get("name", "").strip() or draft.key.removeprefix("routes.")
    topic = values.get("topic", "").strip()
    if not topic:
        raise ConfigError(f"route {name!r} has no topic", path=path, key=draft.key_of("topic"))
    include_text = values.get("include", "").strip()
    selector_text = values.get("selector", "").strip()
    if not include_text and not selector_text:
        raise ConfigError(
            f"route {name!r} has no include predicate (e.g. msg.address==foo-topic)",
            path=path,
            key=draft.key_of("include"),
        )
    try:
        include = compile_predicate(include_text) if include_text else None
    except SelectorError as exc:
        raise ConfigError(f"bad include predicate: {exc}", path=path, key=draft.where["include"]) from None
    try:
        selector = compile_selector_predicate(selector_text) if selector_text else None
    except SelectorError as exc:
        raise ConfigError(f"bad selector: {exc}", path=path, key=draft.where["selector"]) from None
    key = values.get("key", "").strip() or None
    if key is not None and not key.removeprefix("msg.header."):
        raise ConfigError("expected msg.header.NAME", path=path, key=draft.where["key"])
    policy = values.get("on_soft_failure")
    return Route(
        name=name,
        topic=topic,
        include=include,
        selector=selector,
        key=key,
        on_soft_failure=_policy(policy, path, draft.where["on_soft_failure"]) if policy else None,
    )


def parse_routing_config(raw: dict[str, Any] | RoutingSection, path: str = "") -> RoutingConfig:
    """Validate the ``[routing]`` table (raises ConfigError naming file and key).

    :param raw: the table as TOML loaded it.
    :param path: the config file; ``properties_file`` is relative to its folder.
    """
    section = validate(RoutingSection, raw, path=path, prefix="routing")
    settings: dict[str, tuple[str, str]] = {
        key: (value, f"routing.{key}") for key in ("dead_letter_topic", "on_soft_failure", "connector")
        if (value := getattr(section, key)) is not None
    }
    drafts = _toml_routes(section.routes)
    property_drafts: list[tuple[_RouteDraft, str]] = []
    if section.properties_file is not None:
        file_name = section.properties_file
        if not os.path.isabs(file_name):
            file_name = os.path.join(os.path.dirname(path) or ".", file_name)
        try:
            with open(file_name, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise ConfigError(f"cannot read properties file: {exc.strerror}", path=path,
                              key="routing.properties_file") from None
        pairs = parse_properties(text, path=file_name, key="routing.properties_file")
        property_drafts += [(d, file_name) for d in _properties_routes(pairs, file_name, settings)]
    if section.properties is not None:
        pairs = parse_properties(section.properties, path=path, key="routing.properties")
        property_drafts += [(d, path) for d in _properties_routes(pairs, path, settings)]
    routes = [_build_route(draft, path) for draft in drafts]
    routes += [_build_route(draft, where) for draft, where in property_drafts]
    seen: set[str] = set()
    for route in routes:
        if route.name in seen:
            raise ConfigError(f"route name {route.name!r} is used twice", path=path, key="routing.routes")
        seen.add(route.name)
    policy_value, policy_key = settings.get("on_soft_failure", ("stop", "routing.on_soft_failure"))
    policy = _policy(policy_value, path, policy_key)
    dead_letter = settings.get("dead_letter_topic", ("", ""))[0].strip() or None
    for route in routes:
        if (route.on_soft_failure or policy) == "dead-letter" and dead_letter is None:
            raise ConfigError(
                f"route {route.name!r} dead-letters soft failures but no dead-letter topic is set",
                path=path,
                key="routing.dead_letter_topic",
            )
    connector = settings.get("connector", ("kafka", ""))[0]
    return RoutingConfig(
        routes=tuple(routes), dead_letter_topic=dead_letter, on_soft_failure=policy, connector=connector, path=path
    )


class DestinationRule(Section):
    """One ``[[destinations]]`` entry: gateway destinations (glob) -> connector."""

    pattern: Str
    """fnmatch glob on the STOMP destination."""
    connector: Str
    """``embedded`` or a name under [connectors]."""
    rename: Str = ""
    """Prefix replacing the pattern's fixed part on the way to the connector."""
