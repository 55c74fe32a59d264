"""The ``[connectors.NAME]`` table: one model per connector kind, chosen by the uri's scheme.

A new connector adds its options model to :data:`ConnectorOptions` (tagged
with its ``__tag__``) and its schemes to :data:`KINDS`; the registry
(:mod:`gateway.connectors.registry`) maps the same schemes to the class.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag

from gateway.connectors.kafka_settings import KafkaSettings
from gateway.connectors.stomp_settings import StompConnectorOptions
from gateway.errors import did_you_mean
from gateway.schema import CUSTOM_PROBLEMS

KINDS: dict[str, str] = {"stomp": "stomp", "stomp+ssl": "stomp", "kafka": "kafka"}
"""URI scheme -> connector kind (the tag of its options model)."""


def connector_kind(raw: Any) -> str | None:
    """The kind a raw connector table names through its uri's scheme (None: no uri)."""
    if isinstance(raw, dict):
        uri = raw.get("uri")
        if not isinstance(uri, str) or "://" not in uri:
            return None
        scheme = uri.split("://", 1)[0]
        return KINDS.get(scheme, scheme)
    return getattr(raw, "__tag__", None)


ConnectorOptions = Annotated[
    Annotated[StompConnectorOptions, Tag(StompConnectorOptions.__tag__)]
    | Annotated[KafkaSettings, Tag(KafkaSettings.__tag__)],
    Discriminator(
        connector_kind,
        custom_error_type="connector_uri",
        custom_error_message="needs a uri such as 'stomp://host:61613' or 'kafka://host:9092'",
    ),
]
"""One connector's options: a discriminated union keyed by the uri's scheme."""


def _uri_problem(raw: Any) -> tuple[str, str]:
    uri = raw.get("uri") if isinstance(raw, dict) else None
    if isinstance(uri, str) and "://" in uri:
        scheme = uri.split("://", 1)[0]
        hint = did_you_mean(scheme, KINDS) or f"; known: {', '.join(sorted(KINDS))}"
        return "uri", f"unknown connector scheme {scheme!r}{hint}"
    return "uri", "needs a uri such as 'stomp://host:61613' or 'kafka://host:9092'"


CUSTOM_PROBLEMS["connector_uri"] = _uri_problem
