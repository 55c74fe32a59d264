"""The documents the admin console's pages show, gathered from a running gateway (JSON-ready dicts).

One function per page: :func:`overview`, :func:`destinations`,
:func:`connections`, :func:`routes`, :func:`bridges`, and :func:`browsed`
for a queue's messages.  They only read: actions live in
:mod:`gateway.admin.console`.  Each shows what the asking principal may see
(:mod:`gateway.admin.roles`): an administrator everything; a viewer or
operator the destinations it may read or administer, its own connections and
durable subscriptions, no bridges.  Rows carry what the principal may do
(``actions``, ``may_close``) so the page shows only those buttons.  Everything here runs on the reactor thread
and is cheap enough for a page refreshing every few seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from gateway.admin.health import bridge_health, gateway_health
from gateway.admin.observed import ObservedGateway
from gateway.admin.permissions import ConsoleAccess
from gateway.admin.rates import RateHistory
from gateway.admin.roles import Principal
from gateway.broker.operations import CAUSE_PROPERTY, ORIGIN_PROPERTY, QueueOperations
from gateway.broker.store.snapshot import DURABLE_PREFIX
from gateway.message.model import BytesMessage, Message, TextMessage

if TYPE_CHECKING:  # pragma: no cover
    from gateway.broker.broker import EmbeddedBroker

PREVIEW_CHARS = 1024
"""How much of a body a browsed message shows."""


def overview(gateway: ObservedGateway, history: RateHistory, now: float, principal: Principal) -> dict[str, Any]:
    """Connections, message rates (with the last minutes' history), connectors' and bridges' health
    (bridges for an administrator only), who is asking (``you``), and the gateway's high-availability
    role and last takeover (``ha``: :meth:`gateway.ha.role.GatewayRole.status`)."""
    from gateway import __version__

    bridge_statuses = gateway.bridges.status()
    health = gateway_health(gateway.config.id, gateway.connectors, bridge_statuses if principal.administrator else [])
    traffic = gateway.factory.traffic
    started = gateway.started_at
    return {
        "id": gateway.config.id,
        "version": __version__,
        "status": health["status"],
        "uptime_seconds": round(now - started, 1) if started is not None else None,
        "connections": len(gateway.factory.connections) if principal.administrator else sum(
            1 for protocol in gateway.factory.connections
            if protocol.session is not None and principal.owns(protocol.session.login)),
        "messages": {"received": traffic.received, "sent": traffic.sent},
        "rates": history.latest(),
        "history": history.document(),
        "connectors": [{"name": name, **part} for name, part in sorted(health["components"]["connectors"].items())],
        "bridges": [{"name": status["name"], "state": status["state"], **bridge_health(status)}
                    for status in bridge_statuses] if principal.administrator else [],
        "you": {"login": principal.login, "role": principal.role},
        "ha": gateway.role.status(),
    }


def destinations(broker: EmbeddedBroker, operations: QueueOperations, principal: Principal,
                 access: ConsoleAccess, owners: dict[str, str | None]) -> dict[str, Any]:
    """The embedded broker's queues (dead-letter queues flagged), topics and durable subscriptions that
    ``principal`` may see; ``owners``: the login of each client id now connected (a durable
    subscription is a non-administrator's own when its client id is one of its connections')."""
    queues = [
        {
            "name": name,
            "pending": len(queue),
            "consumers": len(queue.consumers),
            "inflight": queue.inflight,
            "enqueued": queue.enqueued,
            "dequeued": queue.dequeued,
            "dead_letter": operations.is_dead_letter_queue(name),
            "actions": access.actions(principal, name),
        }
        for name, queue in sorted(broker.queues.items()) if access.visible(principal, name)
    ]
    topics = [
        {
            "name": name,
            "subscribers": sum(1 for queue in subscribers if not queue.durable),
            "durable_subscriptions": sum(1 for queue in subscribers if queue.durable),
            "pending": sum(len(queue) for queue in subscribers),
        }
        for name, subscribers in sorted(broker.topics.items()) if access.visible(principal, name)
    ]
    durables = [
        {
            "key": key,
            "topic": queue.name,
            "selector": queue.selector_text,
            "pending": len(queue),
            "inflight": queue.inflight,
            "active": bool(queue.consumers),
            "enqueued": queue.enqueued,
            "dequeued": queue.dequeued,
        }
        for key, queue in sorted(broker.durables.items())
        if principal.administrator or principal.owns(owners.get(durable_client_id(key)))
    ]
    return {"queues": queues, "topics": topics, "durables": durables,
            "dead_letter_prefix": broker.settings.dead_letter_prefix}


def durable_client_id(key: str) -> str:
    r"""The client id of a durable subscription's key (``durable:CLIENT:NAME``, ``\`` and ``:`` escaped)."""
    body = key.removeprefix(DURABLE_PREFIX)
    client, index = [], 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            client.append(body[index + 1])
            index += 2
            continue
        if char == ":":
            break
        client.append(char)
        index += 1
    return "".join(client)


def client_owners(factory: Any) -> dict[str, str | None]:
    """client id -> login of the connections now open (for whose a durable subscription is)."""
    return {protocol.session.client_id: protocol.session.login for protocol in factory.connections
            if protocol.session is not None and protocol.session.client_id}


def connections(factory: Any, now: float, principal: Principal) -> list[dict[str, Any]]:
    """The admitted STOMP connections (TCP, TLS and WebSocket) ``principal`` may see, oldest first: every
    one for an administrator, its own for others."""
    rows = []
    for protocol in sorted(factory.connections, key=lambda p: p.connected_at):
        session = protocol.session
        if session is None:
            continue
        own = principal.owns(session.login)
        if not principal.administrator and not own:
            continue
        rows.append({
            "id": session.session_id,
            "peer": protocol.peer,
            "login": session.login,
            "client_id": session.client_id,
            "version": session.version,
            "state": session.state,
            "connected_seconds": round(now - protocol.connected_at, 1),
            "heartbeat": {"send_ms": round(session.out_interval * 1000),
                          "expect_ms": round(session.in_interval * 1000)},
            "messages_in": protocol.messages_in,
            "messages_out": protocol.messages_out,
            "subscriptions": [
                {"id": sub.id, "destination": sub.destination, "ack": sub.ack_mode, "unacked": len(sub.unacked)}
                for sub in session.subscriptions.values()
            ],
            "may_close": principal.administrator or (own and principal.may_act),
        })
    return rows


def _route_counts(registry: CollectorRegistry, names: Iterable[str]) -> dict[str, dict[str, float]]:
    """metric name -> route -> the sum of that counter's samples for the route (over other labels)."""
    wanted = {f"{name}_total": name for name in names}
    counts: dict[str, dict[str, float]] = {name: {} for name in wanted.values()}
    for family in registry.collect():
        for sample in family.samples:
            name = wanted.get(sample.name)
            route = sample.labels.get("route")
            if name is not None and route is not None:
                counts[name][route] = counts[name].get(route, 0.0) + sample.value
    return counts


def routes(gateway: ObservedGateway) -> dict[str, Any]:
    """The Kafka routes with their state and counters (``configured: false`` without ``[routing]``)."""
    router = gateway.router
    if router is None:
        return {"configured": False, "routes": []}
    status = router.status()
    counts = _route_counts(gateway.registry, ("jmsgateway_routing_success", "jmsgateway_routing_failures",
                                              "jmsgateway_routing_dead_lettered", "jmsgateway_routing_skipped"))
    rows = []
    for route in router.config.routes:
        stopped = status["stopped_routes"].get(route.name)
        missing = status["missing_topics"].get(route.name)
        rows.append({
            "name": route.name,
            "topic": route.topic,
            "state": "stopped" if stopped or status["stopped"] else ("missing topic" if missing else "running"),
            "detail": stopped or status["stopped"] or (f"topic {missing} does not exist" if missing else ""),
            "routed": int(counts["jmsgateway_routing_success"].get(route.name, 0)),
            "failures": int(counts["jmsgateway_routing_failures"].get(route.name, 0)),
            "dead_lettered": int(counts["jmsgateway_routing_dead_lettered"].get(route.name, 0)),
            "skipped": int(counts["jmsgateway_routing_skipped"].get(route.name, 0)),
        })
    return {"configured": True, "connector": router.config.connector, "stopped": status["stopped"],
            "routes": rows, "kafka": status["kafka"]}


def bridges(gateway: ObservedGateway, principal: Principal) -> list[dict[str, Any]]:
    """Every bridge's status with its health, for an administrator (none for others)."""
    if not principal.administrator:
        return []
    return [{**status, "health": bridge_health(status)} for status in gateway.bridges.status()]


_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F) if chr(code) not in "\n\r\t"}


def _printable(text: str) -> str:
    r"""``text`` with control characters (but line breaks and tabs) written as ``\xNN``."""
    return text.translate(_CONTROLS)


def browsed(message: Message) -> dict[str, Any]:
    """One pending message as the browse view shows it: headers, properties, a body preview."""
    if isinstance(message, TextMessage):
        text = message.text or ""
        preview, truncated = text[:PREVIEW_CHARS], len(text) > PREVIEW_CHARS
    elif isinstance(message, BytesMessage):  # what is not printable UTF-8 shown as \xNN escapes
        preview = _printable(message.body[:PREVIEW_CHARS].decode("utf-8", "backslashreplace"))
        truncated = len(message.body) > PREVIEW_CHARS
    else:
        text = repr(getattr(message, "body", None))
        preview, truncated = text[:PREVIEW_CHARS], len(text) > PREVIEW_CHARS
    return {
        "message_id": message.message_id,
        "type": message.kind,
        "persistent": message.persistent,
        "priority": message.priority,
        "timestamp": message.timestamp,
        "expiration": message.expiration,
        "redelivered": message.redelivered,
        "redelivery_count": message.redelivery_count,
        "correlation_id": message.correlation_id,
        "reply_to": message.reply_to,
        "jms_type": message.type,
        "properties": {name: value if isinstance(value, str | int | float | bool) else repr(value)
                       for name, value in sorted(message.properties.items())},
        "origin": message.properties.get(ORIGIN_PROPERTY),
        "dead_letter_cause": message.properties.get(CAUSE_PROPERTY),
        "body_size": message.body_size(),
        "body_preview": preview,
        "body_truncated": truncated,
    }
