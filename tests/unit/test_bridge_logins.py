"""A bridge side with its own login: the private STOMP broker connection has a client id of its own
(``<client_id>.<login>``: ActiveMQ refuses a second connection with a client id in use), stable across
restarts (its durable subscriptions are found again), and bridges with the same login share it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from twisted.internet.task import Clock

from gateway.bridges.config import BridgeConfig, parse_bridge
from gateway.bridges.service import build_bridge_service
from gateway.broker.broker import EmbeddedBroker
from gateway.connectors.stomp_broker import StompBrokerConnector


def amq(**options: object) -> StompBrokerConnector:
    return StompBrokerConnector.from_config("amq", {"uri": "stomp://127.0.0.1:61613", **options}, reactor=Clock(),
                                            registry=CollectorRegistry(), gateway_id="gw")


def test_a_private_connection_has_its_own_client_id_per_login() -> None:
    shared = amq()
    assert shared.settings.client_id == "gw-amq"
    alice, again, bob = (shared.with_credentials(user, "pw") for user in ("alice", "alice", "bob"))
    assert alice.settings.client_id == again.settings.client_id == "gw-amq.alice"  # stable: durables found again
    assert bob.settings.client_id == "gw-amq.bob"
    assert amq(client_id="orders").with_credentials("alice", None).settings.client_id == "orders.alice"
    assert shared.settings.client_id == "gw-amq"


def test_bridges_with_the_same_login_share_one_private_connection() -> None:
    shared = amq()

    def bridge(name: str, user: str) -> BridgeConfig:
        return parse_bridge({"name": name, "source": {"connector": "amq", "destination": f"/topic/{name}",
                                                      "user": user, "password": "pw"},
                             "target": {"connector": "embedded", "destination": f"/queue/{name}"}},
                            0, "test.toml", {"amq", "embedded"})

    configs = [bridge("a", "alice"), bridge("b", "alice"), bridge("c", "bob")]
    service = build_bridge_service(configs, {"amq": shared, "embedded": EmbeddedBroker(Clock())},
                                   Clock(), registry=CollectorRegistry())
    owned = [connector for connector in service.owned_connectors if isinstance(connector, StompBrokerConnector)]
    assert len(owned) == len(service.owned_connectors), "each login's own STOMP connector"
    ids = sorted(connector.settings.client_id for connector in owned)
    assert ids == ["gw-amq.alice", "gw-amq.bob"]
