"""What the admin endpoint reports: every part's health and status, gathered from the gateway.

Connectors report through :class:`~gateway.interfaces.IStatusReporting`
(the embedded broker, JMS brokers, Kafka and its routing); a connector that
does not is shown as ``UNKNOWN`` and does not make the gateway ``DOWN``.  A
bridge is down while it is ``failed``, ``retrying`` or ``in_doubt`` (messages do not move);
paused, stopped or starting bridges are up.  Everything here is read on the
reactor thread and is cheap enough for a probe every second.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.admin.observed import ObservedGateway
from gateway.interfaces import BridgeState, IStatusReporting

UP, DOWN, UNKNOWN = "UP", "DOWN", "UNKNOWN"


def connector_health(connector: Any) -> dict[str, str]:
    """``{"status": UP|DOWN|UNKNOWN, "detail": ...}`` of one connector."""
    reporting = IStatusReporting(connector, None)
    if reporting is None:
        return {"status": UNKNOWN, "detail": f"{type(connector).__name__} reports no health"}
    health = reporting.health()
    return {"status": UP if health.up else DOWN, "detail": health.detail}


def bridge_health(status: Mapping[str, Any]) -> dict[str, str]:
    """The health of a bridge, from its ``status()``."""
    state = status["state"]
    detail = state if not status.get("last_error") else f"{state}: {status['last_error']}"
    down = state in (BridgeState.FAILED, BridgeState.RETRYING, BridgeState.IN_DOUBT)
    return {"status": DOWN if down else UP, "detail": detail}


def gateway_health(gateway_id: str, connectors: Mapping[str, Any], bridges: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``/health`` document: ``status`` is DOWN when any part is down.

    :param connectors: name -> connector (the gateway's, routing in the Kafka connector's place).
    :param bridges: every bridge's ``status()``.
    """
    parts = {
        "connectors": {name: connector_health(connector) for name, connector in connectors.items()},
        "bridges": {status["name"]: bridge_health(status) for status in bridges},
    }
    down = any(part["status"] == DOWN for group in parts.values() for part in group.values())
    return {"status": DOWN if down else UP, "id": gateway_id, "components": parts}


def gateway_status(gateway: ObservedGateway, now: float) -> dict[str, Any]:
    """The ``/status`` document: uptime, role and last takeover (:mod:`gateway.ha`), connections,
    every connector's and bridge's status."""
    from gateway import __version__

    connectors: dict[str, Any] = {}
    for name, connector in gateway.connectors.items():
        reporting = IStatusReporting(connector, None)
        connectors[name] = reporting.status() if reporting is not None else {"state": UNKNOWN}
    started = gateway.started_at
    return {
        "id": gateway.config.id,
        "version": __version__,
        "uptime_seconds": round(now - started, 3) if started is not None else None,
        **gateway.role.status(),
        "stomp_connections": len(gateway.factory.connections),
        "stomp_connections_by_login": dict(sorted(gateway.factory.login_connections.open.items())),
        "connectors": connectors,
        "bridges": gateway.bridges.status(),
    }
