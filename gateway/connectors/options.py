"""The ``[connectors.NAME]`` table: one model per connector kind, chosen by the uri's scheme.

A new connector adds its options model to :data:`ConnectorOptions` (tagged
with its ``__tag__``) and its schemes to :data:`KINDS`; the registry
(:mod:`gateway.connectors.registry`) maps the same schemes to the class.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag

from gateway.connectors.jms_settings import JmsConnectorOptions
from gateway.connectors.kafka_settings import KafkaSettings
from gateway.connectors.stomp_settings import StompConnectorOptions
from gateway.errors import did_you_mean
from gateway.schema import CUSTOM_PROBLEMS

KINDS: dict[str, str] = {"stomp": "stomp", "stomp+ssl": "stomp", "kafka": "kafka"}
"""URI scheme -> connector kind (the tag of its options model)."""


def connector_kind(raw: Any) -> str | None:
    """The kind a raw connector table names through its ``type`` or its uri's scheme (None: neither)."""
    if isinstance(raw, dict):
        if isinstance(raw.get("type"), str):
            return str(raw["type"])
        uri = raw.get("uri")
        if not isinstance(uri, str) or "://" not in uri:
            return None
        scheme = uri.split("://", 1)[0]
        return KINDS.get(scheme, scheme)
    return getattr(raw, "__tag__", None)


ConnectorOptions = Annotated[
    Annotated[StompConnectorOptions, Tag(StompConnectorOptions.__tag__)]
    | Annotated[KafkaSettings, Tag(KafkaSettings.__tag__)]
    | Annotated[JmsConnectorOptions, Tag(JmsConnectorOptions.__tag__)],
    Discriminator(
        connector_kind,
        custom_error_type="connector_uri",
        custom_error_message="needs a uri such as 'stomp://host:61613' or 'kafka://host:9092', or type = \"jms\"",
    ),
]
"""One connector's options: a discriminated union keyed by the uri's scheme."""


def _uri_problem(raw: Any) -> tuple[str, str]:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind is not None:
        return "type", f"unknown connector type {kind!r}{did_you_mean(str(kind), ['jms']) or '; known: jms'}"
    uri = raw.get("uri") if isinstance(raw, dict) else None
    if isinstance(uri, str) and "://" in uri:
        scheme = uri.split("://", 1)[0]
        hint = did_you_mean(scheme, KINDS) or f"; known: {', '.join(sorted(KINDS))}"
        return "uri", f"unknown connector scheme {scheme!r}{hint}"
    return "uri", "needs a uri such as 'stomp://host:61613' or 'kafka://host:9092', or type = \"jms\""


CUSTOM_PROBLEMS["connector_uri"] = _uri_problem
