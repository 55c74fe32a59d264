"""Owners of durable subscriptions at connectors (issue 33): the registry in the data directory
(:mod:`gateway.stomp.durable_owners`) and the STOMP session's one owner check, over StringTransport
with a fake connector that records what reaches it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from zope.interface import implementer

from gateway.backup import data_files
from gateway.broker.broker import EmbeddedBroker
from gateway.config import GatewayConfig
from gateway.errors import ConnectorError
from gateway.interfaces import IConnector, ISubscription, SubscriptionSpec
from gateway.message.model import Message
from gateway.routing.config import DestinationRule
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import build_portal
from gateway.security.settings import AuthSettings
from gateway.stomp.durable_owners import FILE_NAME, DurableOwners
from gateway.stomp.protocol import StompServerFactory
from tests.unit.test_session import Peer, connect

NOT_YOURS = "durable subscription 'feed' belongs to another login"


# -- the registry --------------------------------------------------------------------------------


def test_the_first_claim_owns_and_survives_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "data" / FILE_NAME)
    owners = DurableOwners(path)
    assert not (tmp_path / "data").exists()  # (nothing written before the first owner)
    assert owners.claim("amq", "app", "feed", "alice")
    assert not owners.claim("amq", "app", "feed", "carol")
    assert owners.owner("amq", "app", "feed") == "alice"
    assert owners.owner("kafka", "app", "feed") is None  # (another connector's durable)
    owners.close()
    again = DurableOwners(path)
    assert again.owner("amq", "app", "feed") == "alice"
    assert len(again) == 1
    again.close()


def test_a_standby_reads_the_owners_at_its_first_use(tmp_path: Path) -> None:
    """Made at start, used after the active gateway on the same data directory recorded more."""
    path = str(tmp_path / FILE_NAME)
    standby, active = DurableOwners(path), DurableOwners(path)
    active.claim("amq", "app", "feed", "alice")
    active.close()
    assert standby.owner("amq", "app", "feed") == "alice"
    standby.close()


def test_release_removes_the_entry_for_good(tmp_path: Path) -> None:
    path = str(tmp_path / FILE_NAME)
    owners = DurableOwners(path)
    owners.claim("amq", "app", "feed", "alice")
    owners.claim("amq", "app", "other", "alice")
    owners.release("amq", "app", "feed")
    assert owners.owner("amq", "app", "feed") is None
    assert owners.claim("amq", "app", "feed", "carol")  # free again: the next login owns it
    owners.release("amq", "app", "feed")
    owners.release("amq", "app", "feed")  # (twice: nothing)
    owners.close()
    again = DurableOwners(path)
    assert len(again) == 1 and again.owner("amq", "app", "other") == "alice"
    again.close()


def test_names_that_reach_one_durable_at_the_broker_share_its_owner(tmp_path: Path) -> None:
    """ActiveMQ and Kafka know the durable as ``client-id.name``: client-id ``a`` with name ``b.c``
    is the same durable as client-id ``a.b`` with name ``c``, or no client-id and ``a.b.c``."""
    owners = DurableOwners(str(tmp_path / FILE_NAME))
    owners.claim("amq", "a", "b.c", "alice")
    assert owners.owner("amq", "a.b", "c") == "alice"
    assert owners.owner("amq", "", "a.b.c") == "alice"
    assert not owners.claim("amq", "", "a.b.c", "carol")
    owners.close()


# -- the session ---------------------------------------------------------------------------------


@implementer(ISubscription)
class Live:
    def __init__(self, connector: DurableConnector, spec: SubscriptionSpec) -> None:
        self.connector, self.spec = connector, spec

    def close(self) -> Deferred[None]:
        return succeed(None)

    def unsubscribe(self) -> Deferred[None]:
        self.connector.deleted.append(self.spec.durable_name)
        return succeed(None)

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def ack(self, tags: list[Any]) -> Deferred[None]:
        raise NotImplementedError("these tests deliver nothing")

    def nack(self, tags: list[Any]) -> Deferred[None]:
        raise NotImplementedError("these tests deliver nothing")


@implementer(IConnector)
class DurableConnector:
    """Records the durable subscriptions it is asked to make and delete."""

    name = "amq"
    capabilities: frozenset[Any] = frozenset()

    def __init__(self) -> None:
        self.subscribed: list[tuple[str | None, str | None]] = []
        self.deleted: list[str | None] = []
        self.refuse = False

    def subscribe(self, spec: SubscriptionSpec, consumer: Any) -> Deferred[Any]:
        if self.refuse:
            return fail(ConnectorError("the broker refused the subscription"))
        self.subscribed.append((spec.client_id, spec.durable_name))
        return succeed(Live(self, spec))

    # (the rest of IConnector: these tests only subscribe)

    def start(self) -> Deferred[None]:
        return succeed(None)

    def stop(self) -> Deferred[None]:
        return succeed(None)

    def send(self, message: Message) -> Deferred[None]:
        raise NotImplementedError("these tests send nothing to this connector")

    def send_batch(self, messages: list[Message]) -> Deferred[None]:
        raise NotImplementedError("these tests send nothing to this connector")

    def unsubscribe_durable(self, client_id: str, durable_name: str) -> Deferred[None]:
        raise NotImplementedError("these tests delete durables through the subscription")


@pytest.fixture
def connector() -> DurableConnector:
    return DurableConnector()


@pytest.fixture
def owners(tmp_path: Path) -> Iterator[DurableOwners]:
    registry = DurableOwners(str(tmp_path / FILE_NAME))
    yield registry
    registry.close()


def factory_for(clock: Clock, broker: EmbeddedBroker, connector: DurableConnector, owners: DurableOwners,
                *, secured: bool = True) -> StompServerFactory:
    destinations = DestinationMap({"embedded": broker, "amq": connector},
                                  [DestinationRule(pattern="/topic/amq.*", connector="amq")])
    portal = build_portal(AuthSettings(users={"alice": "a-pw", "carol": "c-pw"}, allow_weak_passwords=True))
    return StompServerFactory(clock, destinations, portal=portal if secured else None, durable_owners=owners)


def durable(sub_id: str = "d", **more: str) -> dict[str, str]:
    return {"destination": "/topic/amq.x", "id": sub_id, "activemq.subscriptionName": "feed", **more}


def peer(factory: StompServerFactory, login: str | None) -> Peer:
    client = Peer(factory)
    credentials = {"login": login, "passcode": f"{login[0]}-pw"} if login else {}
    connect(client, **credentials, **{"client-id": "app"})
    return client


def test_a_connector_durable_belongs_to_its_first_login(clock: Clock, broker: EmbeddedBroker,
                                                        connector: DurableConnector, owners: DurableOwners) -> None:
    factory = factory_for(clock, broker, connector, owners)
    alice = peer(factory, "alice")
    alice.send("SUBSCRIBE", durable(receipt="s"))
    assert [f.command for f in alice.received()] == ["RECEIPT"]
    assert owners.owner("amq", "app", "feed") == "alice"
    alice.protocol.connectionLost(None)  # type: ignore[arg-type]

    carol = peer(factory, "carol")
    carol.send("SUBSCRIBE", durable(receipt="s"))
    [error] = carol.received()
    assert (error.command, error.headers["message"]) == ("ERROR", NOT_YOURS)
    carol = peer(factory, "carol")  # the UNSUBSCRIBE of a plain subscription of her own, naming alice's
    carol.send("SUBSCRIBE", {"destination": "/topic/amq.x", "id": "p"})
    carol.send("UNSUBSCRIBE", {"id": "p", "activemq.subscriptionName": "feed", "receipt": "u"})
    [error] = carol.received()
    assert (error.command, error.headers["message"]) == ("ERROR", NOT_YOURS)
    assert connector.subscribed == [("app", "feed"), ("app", None)] and connector.deleted == []

    alice = peer(factory, "alice")
    alice.send("SUBSCRIBE", durable(receipt="s"))
    alice.send("UNSUBSCRIBE", {"id": "d", "activemq.subscriptionName": "feed", "receipt": "u"})
    assert [f.command for f in alice.received()] == ["RECEIPT", "RECEIPT"]
    assert connector.deleted == ["feed"] and len(owners) == 0  # deleted by its owner: the entry goes


def test_closing_without_unsubscribe_keeps_the_owner(clock: Clock, broker: EmbeddedBroker,
                                                     connector: DurableConnector, owners: DurableOwners) -> None:
    alice = peer(factory_for(clock, broker, connector, owners), "alice")
    alice.send("SUBSCRIBE", durable(receipt="s"))
    alice.send("UNSUBSCRIBE", {"id": "d", "receipt": "u"})  # (no durable name: closed, not deleted)
    assert [f.command for f in alice.received()] == ["RECEIPT", "RECEIPT"]
    assert owners.owner("amq", "app", "feed") == "alice"


def test_a_refused_subscribe_frees_the_name(clock: Clock, broker: EmbeddedBroker,
                                            connector: DurableConnector, owners: DurableOwners) -> None:
    connector.refuse = True
    alice = peer(factory_for(clock, broker, connector, owners), "alice")
    alice.send("SUBSCRIBE", durable(receipt="s"))
    assert [f.command for f in alice.received()] == ["ERROR"]
    assert len(owners) == 0


def test_without_logins_nothing_is_recorded_or_checked(clock: Clock, broker: EmbeddedBroker,
                                                       connector: DurableConnector, owners: DurableOwners) -> None:
    owners.claim("amq", "app", "feed", "alice")  # (left from a run with [auth])
    anonymous = peer(factory_for(clock, broker, connector, owners, secured=False), None)
    anonymous.send("SUBSCRIBE", durable(receipt="s"))
    anonymous.send("SUBSCRIBE", durable("e", receipt="t") | {"activemq.subscriptionName": "other"})
    assert [f.command for f in anonymous.received()] == ["RECEIPT", "RECEIPT"]
    assert len(owners) == 1 and owners.owner("amq", "app", "other") is None


def test_a_backup_takes_the_owners_along(tmp_path: Path) -> None:
    config = GatewayConfig()
    config.gateway.data_dir = str(tmp_path)
    [item] = [f for f in data_files(config) if f.name == FILE_NAME]
    assert item.path == str(tmp_path / FILE_NAME) and item.database
