"""One open JMS connection of the ``jms`` connector (a *generation*) and the destination lookup
every thread of that connection shares.

Used by the connector (:mod:`gateway.connectors.jms_api`), its subscriptions and its browser;
it knows none of them.
"""

from __future__ import annotations

import threading
from typing import Any

from gateway.connectors.jms_provider import JmsApi, lookup
from gateway.connectors.jms_settings import JmsSettings
from gateway.errors import ConfigError, DestinationError


class Link:
    """One open JMS connection (a *generation*) and what every thread needs with it."""

    def __init__(self, connection: Any, context: Any, api: JmsApi, settings: JmsSettings, generation: int) -> None:
        self.connection = connection
        self.context = context
        self.api = api
        self.settings = settings
        self.generation = generation
        self._destinations: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.exclusive_option = settings.exclusive_option or None
        """The destination option that makes a queue consumer exclusive at this provider (None: it has none)."""

    def destination(self, session: Any, name: str, exclusive: bool = False) -> Any:
        """The JMS destination for a gateway name (``/queue/x``, ``/topic/y``), made by ``session``
        or looked up in JNDI (``destinations = "jndi"``); DestinationError otherwise.

        ``exclusive``: for a consumer that must be the queue's only one while it lives (a bridge's
        single owner); with the connector's ``exclusive_option`` (the provider's destination option,
        e.g. ActiveMQ 5's ``consumer.exclusive=true``) the queue is made with it, else the plain
        queue is returned (JMS itself has no exclusive consumer)."""
        option = self.exclusive_option if exclusive and name.startswith("/queue/") else None
        key = name if option is None else f"{name}#exclusive"
        found = self._destinations.get(key)
        if found is not None:
            return found
        kind, _, physical = name[1:].partition("/")
        if kind not in ("queue", "topic") or not physical:
            raise DestinationError(f"{name!r}: the jms connector takes /queue/NAME and /topic/NAME destinations")
        if self.settings.destinations == "jndi" and self.context is not None:
            with self._lock:
                found = jndi_destination(self.context, name, self.settings, self.api)
        elif kind == "queue":
            if option is not None:
                physical = f"{physical}{'&' if '?' in physical else '?'}{option}"
            found = session.createQueue(physical)
        else:
            found = session.createTopic(physical)
        self._destinations[key] = found
        return found


def jndi_destination(context: Any, name: str, settings: JmsSettings, api: JmsApi) -> Any:
    """The destination JNDI binds to the physical name of ``name`` (``/queue/orders``: ``orders``);
    DestinationError naming ``name`` when nothing is bound (one client's mistake, not the
    connection's: the caller refuses that send or subscription alone)."""
    physical = name[1:].partition("/")[2]
    try:
        return lookup(context, physical, settings, api, key="destinations")
    except ConfigError as error:
        raise DestinationError(f"{name}: {error.problem} ({settings.key('destinations')} = \"jndi\")") from None
