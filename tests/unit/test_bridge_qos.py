"""The QoS registry: one strategy class per mode, one IBridge control API, one set of states."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from gateway.bridges.config import QOS_MODES, QOS_STRATEGIES, BridgeConfig, parse_bridge
from gateway.bridges.qos import (
    AtMostOnce,
    BatchQuality,
    DuplicatesOk,
    OnceAndOnlyOnce,
    QualityOfService,
    batch_quality,
    strategies_for,
)
from gateway.bridges.service import build_bridge_service
from gateway.broker.broker import EmbeddedBroker
from gateway.interfaces import BridgeState, IBridge


def config(qos: str) -> BridgeConfig:
    return parse_bridge({"name": f"b-{qos.lower()}", "qos": qos,
                         "source": {"connector": "embedded", "destination": "/queue/src"},
                         "target": {"connector": "embedded", "destination": "/queue/dst"}}, 0, "t.toml", {"embedded"})


def test_every_mode_of_the_registry_resolves_to_strategy_classes() -> None:
    assert set(QOS_MODES) == set(QOS_STRATEGIES)
    for mode in QOS_MODES:
        strategies = strategies_for(mode)
        assert strategies and all(issubclass(s, QualityOfService) and s.mode == mode for s in strategies)
        assert issubclass(strategies[-1], BatchQuality), "the last one joins any two connectors"


def test_each_mode_picks_its_strategy_between_two_embedded_ends() -> None:
    broker = EmbeddedBroker(Clock())
    picked = {mode: type(batch_quality(config(mode), broker, broker)) for mode in QOS_MODES}
    assert picked == {"AT_MOST_ONCE": AtMostOnce, "DUPLICATES_OK": DuplicatesOk,
                      "ONCE_AND_ONLY_ONCE": OnceAndOnlyOnce}


def test_every_bridge_offers_one_control_api_with_one_set_of_states(tmp_path: object) -> None:
    from gateway.bridges.dedup import DuplicateStore, inline_executor
    from gateway.bridges.transactional_copy import TransactionalCopyBridge

    clock = Clock()
    broker = EmbeddedBroker(clock)
    dedup = DuplicateStore(":memory:", clock, executor=inline_executor)
    service = build_bridge_service([config(mode) for mode in QOS_MODES], {"embedded": broker}, clock,
                                   registry=CollectorRegistry(), dedup=dedup)
    for bridge in service.bridges.values():
        assert verifyObject(IBridge, bridge)
        assert bridge.state == BridgeState.STOPPED
    assert IBridge.implementedBy(TransactionalCopyBridge)
    assert service.duplicate_windows == [service.bridge("b-once_and_only_once").config.duplicate_window]


def test_a_standalone_bridge_builds_only_the_connectors_it_names() -> None:
    from gateway.app import configured_connectors, used_connectors
    from gateway.config import parse_config

    config = parse_config({
        "broker": {"persistence": "memory"},
        "connectors": {"amq": {"uri": "stomp://127.0.0.1:61613"}, "kafka": {"uri": "kafka://127.0.0.1:9092"}},
        "routing": {"connector": "kafka", "routes": [{"name": "r", "include": "msg.address == '/queue/x'",
                                                      "topic": "x"}]},
        "bridges": [{"name": "b", "source": {"connector": "amq", "destination": "/queue/a"},
                     "target": {"connector": "amq", "destination": "/queue/b"}}],
    }, "t.toml")
    assert used_connectors(config) == {"amq"}
    built = configured_connectors(config, Clock(), CollectorRegistry(), used_connectors(config))
    assert set(built.by_name) == {"amq"} and built.broker is None and built.router is None
    everything = configured_connectors(config, Clock(), CollectorRegistry())
    assert set(everything.by_name) == {"embedded", "amq", "kafka"} and everything.router is not None
    assert everything.by_name["kafka"] is everything.router
