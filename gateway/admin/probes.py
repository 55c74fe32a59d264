"""Kubernetes-style probes of the admin endpoint: liveness (``/livez``) and readiness (``/readyz``).

*Liveness* says the process and its reactor work: the answer is written by
the reactor thread, so any answer at all proves it; it is 200 whatever the
brokers do (a liveness probe must not restart a gateway because ActiveMQ is
down).  *Readiness* says messages move: the connectors are started, no
connector, route or bridge is down by :mod:`gateway.admin.health`'s rules,
and no bridge is still starting; otherwise 503 with every reason (a standby
gateway, :mod:`gateway.ha`, is never ready: ``standby``).
``/health`` keeps its meaning (the parts, UP or DOWN).
"""

from __future__ import annotations

import os
from typing import Any

from gateway.admin.health import DOWN, UP, gateway_health
from gateway.admin.observed import ObservedGateway
from gateway.interfaces import BridgeState


def liveness(gateway: ObservedGateway, now: float) -> tuple[int, dict[str, Any]]:
    """``(200, document)``: the process id and uptime (``null`` before the connectors started)."""
    started = gateway.started_at
    return 200, {
        "status": UP,
        "id": gateway.config.id,
        "pid": os.getpid(),
        "uptime_seconds": round(now - started, 3) if started is not None else None,
    }


def readiness(gateway: ObservedGateway) -> tuple[int, dict[str, Any]]:
    """``(200, {"status": "UP", "reasons": []})`` when the gateway is ready for traffic, else
    ``(503, {"status": "DOWN", "reasons": [...]})`` naming each part that is not (``connector
    activemq: retrying, ...``, ``bridge copy: starting``, ``gateway: connectors not started``)."""
    reasons: list[str] = []
    if gateway.role.standby:
        reasons.append("standby: another gateway holds the message store's lock (gateway.ha)")
    elif gateway.started_at is None:
        reasons.append("gateway: connectors not started yet")
    bridges = gateway.bridges.status()
    health = gateway_health(gateway.config.id, gateway.connectors, bridges)
    for group, parts in health["components"].items():
        kind = group.rstrip("s")
        for name, part in sorted(parts.items()):
            if part["status"] == DOWN:
                reasons.append(f"{kind} {name}: {part['detail']}")
    for status in bridges:
        if status["state"] == BridgeState.STARTING:
            reasons.append(f"bridge {status['name']}: starting")
    document = {"status": DOWN if reasons else UP, "id": gateway.config.id, "reasons": reasons}
    return (503 if reasons else 200), document
