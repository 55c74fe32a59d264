"""The STOMP session's security rules (issue 33), over StringTransport with a Clock:
the verified sender identity stamped on every SEND and durable subscriptions owned by
the login that created them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.cred.error import UnauthorizedLogin
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from gateway.broker.broker import EmbeddedBroker
from gateway.broker.settings import BrokerSettings
from gateway.broker.store.snapshot import durable_key
from gateway.errors import NotOwner
from gateway.interfaces import IStompUser, SubscriptionSpec
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import StompUser, build_portal
from gateway.security.settings import AuthSettings
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.sender_identity import stamp_sender
from gateway.stomp.session import SessionState
from tests.support.results import result_of
from tests.unit.test_session import Peer, connect
from tests.unit.test_store_broker import Run, Sink

FORGED = {"JMSXUserID": "root", "user-id": "root", "login": "root", "passcode": "guess"}


def secured_factory(clock: Clock, broker: EmbeddedBroker) -> StompServerFactory:
    return secured_factory_with(clock, broker)


def secured_factory_with(clock: Clock, broker: EmbeddedBroker, **more: str) -> StompServerFactory:
    users = {"alice": "a-pw", "eve": "e-pw", **more}
    portal = build_portal(AuthSettings(users=users, allow_weak_passwords=True))
    return StompServerFactory(clock, DestinationMap({"embedded": broker}), portal=portal)


def received_message(consumer: Peer) -> dict[str, str]:
    [message] = consumer.received()
    assert message.command == "MESSAGE", message
    return message.headers


def test_stamp_sender_overwrites_claims_and_drops_credentials() -> None:
    headers = {"destination": "/queue/a", **FORGED}
    stamp_sender(headers, "eve")
    assert headers == {"destination": "/queue/a", "JMSXUserID": "eve", "user-id": "eve"}
    headers = {"destination": "/queue/a", **FORGED}
    stamp_sender(headers, None)
    assert headers == {"destination": "/queue/a"}


def test_authenticated_sender_is_stamped_whatever_it_claims(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = secured_factory(clock, broker)
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer, login="alice", passcode="a-pw")
    consumer.send("SUBSCRIBE", {"destination": "/queue/id", "id": "s"})
    connect(producer, login="eve", passcode="e-pw")
    producer.send("SEND", {"destination": "/queue/id", **FORGED}, b"hi")
    headers = received_message(consumer)
    assert headers["JMSXUserID"] == "eve"
    assert headers["user-id"] == "eve"
    assert "login" not in headers and "passcode" not in headers


def test_identity_claims_are_removed_without_authentication(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}))
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": "/queue/id", "id": "s"})
    connect(producer, login="root")
    producer.send("SEND", {"destination": "/queue/id", **FORGED}, b"hi")
    headers = received_message(consumer)
    assert not {"JMSXUserID", "user-id", "login", "passcode"} & set(headers)


def test_transactional_sends_are_stamped(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = secured_factory(clock, broker)
    consumer, producer = Peer(factory), Peer(factory)
    connect(consumer, login="alice", passcode="a-pw")
    consumer.send("SUBSCRIBE", {"destination": "/queue/tx", "id": "s"})
    connect(producer, login="eve", passcode="e-pw")
    producer.send("BEGIN", {"transaction": "t"})
    producer.send("SEND", {"destination": "/queue/tx", "transaction": "t", **FORGED}, b"hi")
    producer.send("COMMIT", {"transaction": "t"})
    assert received_message(consumer)["JMSXUserID"] == "eve"


def durable_headers(destination: str, name: str = "alerts-sub") -> dict[str, str]:
    return {"destination": destination, "id": "d", "activemq.subscriptionName": name, "receipt": "sub"}


def test_a_durable_subscription_belongs_to_the_login_that_created_it(clock: Clock, broker: EmbeddedBroker) -> None:
    """carol names alice's client-id and subscription on another topic: ERROR, alice's backlog kept."""
    factory = secured_factory_with(clock, broker, carol="c-pw")
    alice = Peer(factory)
    connect(alice, login="alice", passcode="a-pw", **{"client-id": "alice-app"})
    alice.send("SUBSCRIBE", durable_headers("/topic/alerts.x"))
    assert [f.command for f in alice.received()] == ["RECEIPT"]
    alice.protocol.connectionLost(None)  # type: ignore[arg-type]
    producer = Peer(factory)
    connect(producer, login="alice", passcode="a-pw")
    producer.send("SEND", {"destination": "/topic/alerts.x"}, b"kept")
    for destination in ("/topic/carol.x", "/topic/alerts.x"):
        carol = Peer(factory)
        connect(carol, login="carol", passcode="c-pw", **{"client-id": "alice-app"})
        carol.send("SUBSCRIBE", durable_headers(destination))
        [error] = carol.received()
        assert error.command == "ERROR"
        assert error.headers["message"] == "durable subscription 'alerts-sub' belongs to another login"
    carol = Peer(factory)
    connect(carol, login="carol", passcode="c-pw", **{"client-id": "alice-app"})
    carol.send("UNSUBSCRIBE", {"id": "d", "activemq.subscriptionName": "alerts-sub"})
    [error] = carol.received()
    assert error.headers["message"] == "durable subscription 'alerts-sub' belongs to another login"
    carol = Peer(factory)  # the UNSUBSCRIBE of a plain subscription of her own, naming alice's durable
    connect(carol, login="carol", passcode="c-pw", **{"client-id": "alice-app"})
    carol.send("SUBSCRIBE", {"destination": "/topic/carol.x", "id": "p"})
    carol.send("UNSUBSCRIBE", {"id": "p", "activemq.subscriptionName": "alerts-sub", "receipt": "u"})
    [error] = carol.received()
    assert error.headers["message"] == "durable subscription 'alerts-sub' belongs to another login"
    assert broker.status()["durables"][durable_key("alice-app", "alerts-sub")]["pending"] == 1
    again = Peer(factory)
    connect(again, login="alice", passcode="a-pw", **{"client-id": "alice-app"})
    again.send("SUBSCRIBE", durable_headers("/topic/alerts.x"))
    frames = again.received()
    assert sorted(f.command for f in frames) == ["MESSAGE", "RECEIPT"]
    assert [f.body for f in frames if f.command == "MESSAGE"] == [b"kept"]


def test_durable_owner_survives_a_restart(tmp_path: Path) -> None:
    run = Run(tmp_path, BrokerSettings())
    run.start()
    live = run.subscribe(Sink(), destination="/topic/t", durable_name="n", client_id="c", login="alice")
    run.wait(live.close())
    broker = run.restart()
    try:
        assert broker.durable_owner("c", "n") == "alice"
        with pytest.raises(NotOwner, match="belongs to another login"):
            run.subscribe(Sink(), destination="/topic/other", durable_name="n", client_id="c", login="carol")
        assert broker.durable_owner("c", "n") == "alice"
        run.subscribe(Sink(), destination="/topic/t", durable_name="n", client_id="c", login="alice")
    finally:
        run.crash()


def test_a_durable_subscription_made_without_a_login_is_claimed_by_the_first_login(
        clock: Clock, broker: EmbeddedBroker) -> None:
    """(created before owners were kept, or before [auth] had users)"""
    result_of(broker.subscribe(SubscriptionSpec("/topic/t", durable_name="n", client_id="c"), Sink())).close()
    assert broker.durable_owner("c", "n") is None
    result_of(broker.subscribe(SubscriptionSpec("/topic/t", durable_name="n", client_id="c", login="bob"),
                               Sink())).close()
    assert broker.durable_owner("c", "n") == "bob"


class SlowPortal:
    """A portal whose checks end when the test says (a bcrypt check running in a thread)."""

    checkers: dict[object, object] = {}

    def __init__(self) -> None:
        self.checks: list[Deferred[tuple[object, StompUser, Callable[[], None]]]] = []

    def login(self, credentials: object, mind: object, *interfaces: object) -> Deferred[Any]:
        check: Deferred[tuple[object, StompUser, Callable[[], None]]] = Deferred()
        self.checks.append(check)
        return check


@pytest.mark.parametrize("verdict", ["accepted", "refused"])
def test_a_connection_lost_during_its_login_check_runs_none_of_its_frames(clock: Clock, broker: EmbeddedBroker,
                                                                         verdict: str) -> None:
    """Frames pipelined behind a CONNECT wait for its password check; the connection reset meanwhile, the
    check's success ran them anyway on the dead session: its temporary queues were made after it had
    released everything, and stayed, held by the login for good (tests/integration/test_limits_attacks.py)."""
    portal = SlowPortal()
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}), portal=portal)
    peer = Peer(factory)
    peer.send("CONNECT", {"accept-version": "1.2", "host": "x", "login": "eve", "passcode": "e-pw"})
    peer.send("SUBSCRIBE", {"destination": "/temp-queue/t", "id": "s"})
    peer.send("SEND", {"destination": "/queue/made"}, b"x")
    peer.protocol.connectionLost(Failure(ConnectionDone()))
    [check] = portal.checks
    if verdict == "accepted":
        check.callback((IStompUser, StompUser("eve"), lambda: None))
    else:
        check.errback(UnauthorizedLogin())
    assert broker.queues == {} and broker.quota.count == 0
    assert factory.login_connections.open == {}
    assert peer.protocol.session is None or peer.protocol.session.state is SessionState.CLOSED
