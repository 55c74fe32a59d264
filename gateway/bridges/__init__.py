"""Bridges: consume from one connector, send to another, with a quality of service.

The JMS bridge of JBoss Messaging / ActiveMQ Artemis over the gateway's
connectors, which it knows only through :mod:`gateway.interfaces`.  Modules:
:mod:`~gateway.bridges.config` (``[[bridges]]``, the registry of QoS modes),
:mod:`~gateway.bridges.qos` (one strategy class per mode),
:mod:`~gateway.bridges.bridge` (the per-batch engine) with its parts
:mod:`~gateway.bridges.source`, :mod:`~gateway.bridges.batching`,
:mod:`~gateway.bridges.in_doubt` and :mod:`~gateway.bridges.outgoing` (the copy every
engine sends), :mod:`~gateway.bridges.ownership` (one owner per data directory),
:mod:`~gateway.bridges.dedup`
(the ONCE_AND_ONLY_ONCE duplicate store), :mod:`~gateway.bridges.transactional_copy`
(ONCE_AND_ONLY_ONCE through a log's transactions: Kafka -> Kafka),
:mod:`~gateway.bridges.probe` (the in-doubt probe), :mod:`~gateway.bridges.metrics`,
:mod:`~gateway.bridges.service` (the service and its control API; ``jmsgateway bridge`` is
:mod:`gateway.commands.bridge`).
See docs/bridges.md.
"""

from gateway.bridges.bridge import MESSAGE_ID_LIST, Bridge, BridgeFailed
from gateway.bridges.config import QOS_MODES, BridgeConfig, BridgeEndpoint, parse_bridges
from gateway.bridges.service import BridgeService, build_bridge_service

__all__ = [
    "MESSAGE_ID_LIST",
    "QOS_MODES",
    "Bridge",
    "BridgeConfig",
    "BridgeEndpoint",
    "BridgeFailed",
    "BridgeService",
    "build_bridge_service",
    "parse_bridges",
]
