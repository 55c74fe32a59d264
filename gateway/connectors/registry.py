"""Connector classes by URI scheme or by type, so the config names them by ``uri`` or ``type``.

``[connectors.NAME]`` tables carry a ``uri`` (``stomp://host:61613``,
``kafka://host:9092``) or, for connectors without one URI, a ``type``
(``jms``: a JMS provider through its own client jars); that picks the class,
which is imported only when used (its extra may not be installed).  A misspelt
scheme or type gets a "did you mean".  Every class offers ``from_config(name, options, *,
reactor, gateway_id, registry)``.
"""

from __future__ import annotations

import importlib
from typing import Any

from gateway.errors import ConfigError, did_you_mean
from gateway.interfaces import IConnector

SCHEMES: dict[str, str] = {
    "stomp": "gateway.connectors.stomp_broker:StompBrokerConnector",
    "stomp+ssl": "gateway.connectors.stomp_broker:StompBrokerConnector",
    "kafka": "gateway.connectors.kafka:KafkaConnector",
}

TYPES: dict[str, str] = {
    "jms": "gateway.connectors.jms_api:JmsConnector",
}


def connector_class(scheme: str, *, where: str = "", table: dict[str, str] | None = None,
                    what: str = "scheme") -> Any:
    """The connector class for ``scheme`` (or a ``type`` in ``table``); ConfigError if unknown or
    not installed."""
    known = SCHEMES if table is None else table
    target = known.get(scheme)
    if target is None:
        hint = did_you_mean(scheme, known) or f"; known: {', '.join(sorted(known))}"
        raise ConfigError(f"unknown connector {what} {scheme!r}{hint}", key=where)
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"connector scheme {scheme!r} needs a package that is not installed: {exc}",
                          key=where) from None
    return getattr(module, class_name)


def create_connector(name: str, options: Any, *, reactor: Any, gateway_id: str,
                     registry: Any, path: str = "") -> IConnector:
    """Build the connector ``[connectors.<name>]`` describes (its raw table or validated options)."""
    kind = options.get("type") if isinstance(options, dict) else getattr(options, "type", None)
    if kind is not None:
        cls = connector_class(str(kind), where=f"connectors.{name}.type", table=TYPES, what="type")
        typed: IConnector = cls.from_config(name, options, reactor=reactor, gateway_id=gateway_id,
                                            registry=registry, path=path)
        return typed
    uri = options.get("uri") if isinstance(options, dict) else options.uri
    if not isinstance(uri, str) or "://" not in uri:
        raise ConfigError("needs a uri such as 'stomp://host:61613' or 'kafka://host:9092', or type = \"jms\"",
                          path=path,
                          key=f"connectors.{name}.uri")
    scheme = uri.split("://", 1)[0]
    cls = connector_class(scheme, where=f"connectors.{name}.uri")
    connector: IConnector = cls.from_config(name, options, reactor=reactor, gateway_id=gateway_id, registry=registry,
                                            path=path)
    return connector
