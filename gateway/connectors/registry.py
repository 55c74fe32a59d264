"""Connector classes by URI scheme, so the config names them by ``uri``.

``[connectors.NAME]`` tables carry a ``uri`` (``stomp://host:61613``,
``kafka://host:9092``); the scheme picks the class, which is imported only
when used (its extra may not be installed).  A misspelt scheme gets a
"did you mean".  Every class offers ``from_config(name, options, *,
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


def connector_class(scheme: str, *, where: str = "") -> Any:
    """The connector class for ``scheme``; ConfigError if unknown or not installed."""
    target = SCHEMES.get(scheme)
    if target is None:
        hint = did_you_mean(scheme, SCHEMES) or f"; known: {', '.join(sorted(SCHEMES))}"
        raise ConfigError(f"unknown connector scheme {scheme!r}{hint}", key=where)
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
    uri = options.get("uri") if isinstance(options, dict) else options.uri
    if not isinstance(uri, str) or "://" not in uri:
        raise ConfigError("needs a uri such as 'stomp://host:61613' or 'kafka://host:9092'", path=path,
                          key=f"connectors.{name}.uri")
    scheme = uri.split("://", 1)[0]
    cls = connector_class(scheme, where=f"connectors.{name}.uri")
    connector: IConnector = cls.from_config(name, options, reactor=reactor, gateway_id=gateway_id, registry=registry,
                                            path=path)
    return connector
