"""SIGHUP (:class:`gateway.reload.ConfigReloader`) applies ``[routing]``'s routes and ``[[bridges]]`` to a
running gateway: routes for the next message, bridges stopped, started or replaced; what cannot change
safely is named as needing a restart (routing turned on or off, another connector, a bridge side with its
own login, bridges together with their connectors)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from twisted.internet.testing import MemoryReactorClock

from gateway.app import Gateway, build_gateway
from gateway.config import GatewayConfig, load_config, parse_config
from gateway.interfaces import BridgeState
from gateway.reload import ConfigReloader

BASE = '[broker]\npersistence = "memory"\n'


def bridge(name: str, source: str, target: str, extra: str = "") -> str:
    return (f'[[bridges]]\nname = "{name}"\nsource = {{ connector = "embedded", destination = "{source}" }}\n'
            f'target = {{ connector = "embedded", destination = "{target}" }}\n{extra}')


def gateway_from(tmp_path: Path, text: str) -> tuple[Gateway, Path, ConfigReloader]:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    config = parse_config(tomllib.loads(text), str(path))
    config.gateway.data_dir = str(tmp_path / "data")
    gateway = build_gateway(config, MemoryReactorClock())

    def load() -> GatewayConfig:
        loaded = load_config(str(path))
        loaded.gateway.data_dir = str(tmp_path / "data")
        return loaded

    return gateway, path, ConfigReloader(gateway, load, gateway.reactor)


def started(gateway: Gateway) -> None:
    gateway.start()
    gateway.reactor.advance(0.1)


def states(gateway: Gateway) -> dict[str, Any]:
    return {status["name"]: status["state"] for status in gateway.bridges.status()}


def test_bridges_are_added_replaced_and_removed(tmp_path: Path) -> None:
    gateway, path, reloader = gateway_from(tmp_path, BASE + bridge("a", "/queue/a.in", "/queue/a.out")
                                           + bridge("c", "/queue/c.in", "/queue/c.out"))
    started(gateway)
    assert states(gateway) == {"a": BridgeState.RUNNING, "c": BridgeState.RUNNING}
    old_c = gateway.bridges.bridge("c")
    path.write_text(BASE + bridge("b", "/queue/b.in", "/queue/b.out")
                    + bridge("c", "/queue/c.in", "/queue/c.out", "max_batch_size = 10\n"))
    outcome = reloader.reload()
    assert outcome is not None
    assert outcome.applied == ["bridges (added b; changed c; removed a)"] and outcome.restart == []
    gateway.reactor.advance(0.1)
    assert states(gateway) == {"b": BridgeState.RUNNING, "c": BridgeState.RUNNING}
    assert old_c.state == BridgeState.STOPPED and gateway.bridges.bridge("c").config.max_batch_size == 10
    assert reloader.reload() is not None and gateway.config.bridges == load_config(str(path)).bridges


def test_bridge_changes_that_need_a_restart_are_named_and_nothing_moves(tmp_path: Path) -> None:
    gateway, path, reloader = gateway_from(tmp_path, BASE + bridge("a", "/queue/a.in", "/queue/a.out"))
    started(gateway)
    path.write_text(BASE + bridge("a", "/queue/a.in", "/queue/a.out")
                    + '[connectors.other]\nuri = "stomp://127.0.0.1:1"\n'
                    + bridge("b", "/queue/b.in", "/queue/b.out"))
    outcome = reloader.reload()
    assert outcome is not None
    assert "bridges (the connectors or [transform] changed too)" in outcome.restart and "connectors" in outcome.restart
    assert list(gateway.bridges.bridges) == ["a"]


def test_a_bad_bridge_changes_nothing(tmp_path: Path) -> None:
    gateway, path, reloader = gateway_from(tmp_path, BASE + bridge("a", "/queue/a.in", "/queue/a.out"))
    started(gateway)
    path.write_text(BASE + bridge("b", "/queue/b.in", "/queue/b.in"))  # source = target
    assert reloader.reload() is None
    assert states(gateway) == {"a": BridgeState.RUNNING}


KAFKA = '[connectors.kafka]\nuri = "kafka://127.0.0.1:1"\nrequire_existing_topics = false\n'


def routes(*names: str, connector: str = "kafka") -> str:
    text = f'[routing]\nconnector = "{connector}"\ndead_letter_topic = "dlq"\n'
    for name in names:
        text += f'[[routing.routes]]\nname = "{name}"\ninclude = "msg.address == \'{name}\'"\ntopic = "{name}"\n'
    return text


def test_routes_apply_to_the_next_message(tmp_path: Path) -> None:
    gateway, path, reloader = gateway_from(tmp_path, BASE + KAFKA + routes("orders", "audit"))
    router = gateway.router
    assert router is not None
    router.stopped_routes["audit"] = "a soft failure"
    path.write_text(BASE + KAFKA + routes("orders", "invoices"))
    outcome = reloader.reload()
    assert outcome is not None and outcome.applied == ["routing (2 routes)"] and outcome.restart == []
    assert [route.name for route in router.config.routes] == ["orders", "invoices"]
    assert router.router.config is router.config and router.stopped_routes == {}  # audit is gone


def test_routing_on_off_or_another_connector_needs_a_restart(tmp_path: Path) -> None:
    gateway, path, reloader = gateway_from(tmp_path, BASE + KAFKA + routes("orders"))
    path.write_text(BASE + KAFKA + '[connectors.k2]\nuri = "kafka://127.0.0.1:1"\n' + routes("orders", connector="k2"))
    outcome = reloader.reload()
    assert outcome is not None and "routing.connector" in outcome.restart
    path.write_text(BASE + KAFKA)
    outcome = reloader.reload()
    assert outcome is not None and "routing (turning Kafka routing off)" in outcome.restart
    assert gateway.router is not None and [route.name for route in gateway.router.config.routes] == ["orders"]
