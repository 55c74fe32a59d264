"""Which connector serves a gateway destination, and under which name.

Rules come from ``[[destinations]]`` in the config and are tried in order;
the first whose glob ``pattern`` matches wins.  ``rename`` rewrites the
part before the pattern's first ``*`` (``pattern = "/queue/legacy.*"``,
``rename = "/queue/"`` sends ``/queue/legacy.orders`` to ``/queue/orders``).
Destinations no rule matches go to the embedded broker, as do temporary
destinations always.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.errors import ConfigError
from gateway.flow import Congestion
from gateway.interfaces import (
    IConnector,
    IDestinationAliases,
    IDestinationFlowControlled,
    IFlowControlled,
    IFrameForwarder,
    IPostingConnector,
)
from gateway.message.destinations import destination_matches
from gateway.routing.config import DestinationRule


@dataclass(slots=True, frozen=True)
class Resolved:
    """Where a destination goes: the connector and the name it has there.

    :ivar post: the connector's ``post`` when it provides
        :class:`IPostingConnector` (looked up once per destination), else None.
    :ivar forward: the connector's ``forward`` when it provides
        :class:`IFrameForwarder`, else None.
    :ivar congestion: the connector's :class:`~gateway.flow.Congestion` when it
        provides :class:`IFlowControlled` (or the destination's, from
        :class:`IDestinationFlowControlled`), else None.
    """

    connector: IConnector
    destination: str
    post: Callable[..., None] | None = field(init=False)
    forward: Callable[..., bool] | None = field(init=False)
    congestion: Congestion | None = field(init=False)

    def __post_init__(self) -> None:
        post = self.connector.post if IPostingConnector.providedBy(self.connector) else None
        object.__setattr__(self, "post", post)
        forward = self.connector.forward if IFrameForwarder.providedBy(self.connector) else None
        object.__setattr__(self, "forward", forward)
        congestion = self.connector.congestion if IFlowControlled.providedBy(self.connector) else None
        if congestion is None and IDestinationFlowControlled.providedBy(self.connector):
            congestion = self.connector.congestion_for(self.destination)
        object.__setattr__(self, "congestion", congestion)


class DestinationMap:
    """Resolves gateway destinations to connectors (cached per name)."""

    def __init__(self, connectors: dict[str, IConnector], rules: list[DestinationRule] | None = None) -> None:
        if "embedded" not in connectors:
            raise ConfigError("the embedded connector is missing")
        self.connectors = connectors
        self.rules = list(rules or [])
        for rule in self.rules:
            if rule.connector not in connectors:
                raise ConfigError(f"destination rule {rule.pattern!r} names unknown connector {rule.connector!r}")
        self._cache: dict[str, Resolved] = {}
        self._aliases: dict[str, tuple[str, ...]] = {}

    @property
    def embedded(self) -> IConnector:
        return self.connectors["embedded"]

    def aliases(self, destination: str) -> tuple[str, ...]:
        """``destination`` and every other name routed to the same target: the names the
        ``[[destinations]]`` rules (their ``rename``) send to the same connector-side name, and
        those its connector maps to the same thing (:class:`IDestinationAliases`, a Kafka topic).
        Authorization asks for a grant on each (cached per name)."""
        hit = self._aliases.get(destination)
        if hit is not None:
            return hit
        resolved = self.resolve(destination)
        connector = resolved.connector
        targets = [resolved.destination]
        if IDestinationAliases.providedBy(connector):
            target = connector.target_of(resolved.destination)
            if target is not None:
                targets.extend(connector.names_for(target))
        names = [destination]
        if not destination.startswith(("/temp-", "/remote-temp-")):
            for candidate in dict.fromkeys(name for target in targets for name in self._names_routed_to(target)):
                if candidate not in names and self._same_target(self.resolve(candidate), resolved):
                    names.append(candidate)
        found = tuple(names)
        if len(self._aliases) < 10_000:
            self._aliases[destination] = found
        return found

    def _names_routed_to(self, connector_name: str) -> list[str]:
        """Destination names the rules may turn into ``connector_name`` (itself, and each
        ``rename`` undone)."""
        names = [connector_name]
        for rule in self.rules:
            if rule.rename and connector_name.startswith(rule.rename):
                names.append(rule.pattern.split("*", 1)[0] + connector_name[len(rule.rename):])
        return names

    @staticmethod
    def _same_target(one: Resolved, other: Resolved) -> bool:
        if one.connector is not other.connector:
            return False
        if one.destination == other.destination:
            return True
        connector = one.connector
        return IDestinationAliases.providedBy(connector) and \
            connector.target_of(one.destination) is not None and \
            connector.target_of(one.destination) == connector.target_of(other.destination)

    def resolve(self, destination: str) -> Resolved:
        """The connector and connector-side name for ``destination``."""
        hit = self._cache.get(destination)
        if hit is not None:
            return hit
        resolved = Resolved(self.embedded, destination)
        if not destination.startswith(("/temp-", "/remote-temp-")):
            for rule in self.rules:
                if destination_matches(destination, rule.pattern):
                    resolved = Resolved(self.connectors[rule.connector], _rename(destination, rule))
                    break
        if len(self._cache) < 10_000:
            self._cache[destination] = resolved
        return resolved


def _rename(destination: str, rule: DestinationRule) -> str:
    if not rule.rename:
        return destination
    prefix = rule.pattern.split("*", 1)[0]
    return rule.rename + destination[len(prefix):]
