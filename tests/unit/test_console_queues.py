"""Creating and deleting queues from the console, by role and grant, through the real login guard
against a real Gateway; and /logout, which makes a browser forget its Basic login."""

from __future__ import annotations

from typing import Any

from gateway.admin.site import admin_resource
from gateway.interfaces import SubscriptionSpec
from gateway.message.model import TextMessage
from tests.unit.test_broker import Sink
from tests.unit.test_console_roles import call, gateway_for

MEMORY = {"persistence": "memory"}
"""The gateways are built, not started: a create records its queue in the (memory) store."""


def test_an_operator_creates_and_deletes_a_queue_it_administers() -> None:
    gateway = gateway_for(broker=MEMORY)
    site = admin_resource(gateway, gateway.admin)
    code, answer = call(site, "POST", "/console/api/create", "alice", {"destination": "/queue/orders"})
    assert (code, answer["result"]) == (200, True)
    assert "/queue/orders" in gateway.broker.queues
    code, document = call(site, "GET", "/console/api/destinations", "alice")
    queue = next(q for q in document["queues"] if q["name"] == "/queue/orders")
    assert "delete_queue" in queue["actions"] and "create_queue" not in queue["actions"]
    assert call(site, "POST", "/console/api/create", "alice", {"destination": "/queue/orders"})[1]["result"] is False
    gateway.broker.send(TextMessage(destination="/queue/orders", message_id="ID:1", text="x"))
    code, answer = call(site, "POST", "/console/api/remove", "alice", {"destination": "/queue/orders"})
    assert (code, answer["result"]) == (200, 1)
    assert "/queue/orders" not in gateway.broker.queues


def test_create_and_delete_need_admin_on_the_queue() -> None:
    gateway = gateway_for(broker=MEMORY)
    site = admin_resource(gateway, gateway.admin)
    # carol (operator) holds no grant on /queue/orders; bob is a viewer
    for login in ("carol", "bob"):
        code, answer = call(site, "POST", "/console/api/create", login, {"destination": "/queue/orders"})
        assert code == 403, answer
    assert "/queue/orders" not in gateway.broker.queues
    gateway.broker.send(TextMessage(destination="/queue/payments", message_id="ID:p", text="x"))
    # alice may not admin /queue/payments (root may)
    code, answer = call(site, "POST", "/console/api/remove", "alice", {"destination": "/queue/payments"})
    assert code == 403 and "admin permission on /queue/payments" in answer["error"]
    assert len(gateway.broker.queues["/queue/payments"]) == 1
    assert call(site, "POST", "/console/api/remove", "root", {"destination": "/queue/payments"})[0] == 200
    assert "/queue/payments" not in gateway.broker.queues
    code, document = call(site, "GET", "/console/api/destinations", "bob")
    assert all("delete_queue" not in q["actions"] for q in document["queues"])


def test_bad_names_temporary_queues_and_queues_with_consumers_are_refused() -> None:
    gateway = gateway_for()
    site = admin_resource(gateway, gateway.admin)
    for name, expected in (("/topic/x", 400), ("/queue/", 400), ("/queue/a b", 400), ("/temp-queue/t", 403)):
        code, answer = call(site, "POST", "/console/api/create", "root", {"destination": name})
        assert code == expected, (name, answer)
    assert call(site, "POST", "/console/api/remove", "root", {"destination": "/queue/none"})[0] == 404
    subscribed: list[Any] = []
    gateway.broker.subscribe(SubscriptionSpec(destination="/queue/busy"), Sink()).addCallback(subscribed.append)
    code, answer = call(site, "POST", "/console/api/remove", "root", {"destination": "/queue/busy"})
    assert code == 409 and "1 consumer(s)" in answer["error"]
    assert "/queue/busy" in gateway.broker.queues


def test_a_queue_name_routed_to_another_connector_is_not_created_here() -> None:
    gateway = gateway_for()
    other = object()
    gateway.destinations.resolve = lambda destination: type("R", (), {"connector": other})()
    code, answer = call(admin_resource(gateway, gateway.admin), "POST", "/console/api/create", "root",
                        {"destination": "/queue/kafka.orders"})
    assert code == 409 and "another connector" in answer["error"]


def test_the_embedded_broker_is_the_connector_a_queue_resolves_to() -> None:
    gateway = gateway_for()
    assert gateway.destinations.resolve("/queue/anything").connector is gateway.broker


# -- /logout ---------------------------------------------------------------------------


def test_logout_is_a_401_with_the_challenge_whatever_the_login_and_no_failed_login() -> None:
    gateway = gateway_for()
    site = admin_resource(gateway, gateway.admin)
    for login in ("alice", None):
        code, page = call(site, "GET", "/logout", login)
        assert code == 401
        assert b"You are logged out" in page
    assert gateway.registry.get_sample_value("jmsgateway_admin_logins_failed_total") == 0
    assert call(site, "GET", "/console/api/overview", "alice")[0] == 200  # the login itself still works


def test_logout_without_logins_says_there_is_nothing_to_forget() -> None:
    from tests.unit.test_admin import call as plain_call
    from tests.unit.test_admin import gateway_for as plain_gateway

    gateway = plain_gateway({})
    code, page = plain_call(admin_resource(gateway, gateway.admin), "GET", "/logout")
    assert code == 200 and b"Nothing to log out of" in page


def test_creating_a_virtual_topics_consumer_queue_answers_once_its_record_is_stored() -> None:
    """A virtual topic's consumer queue exists across restarts once its record is stored (docs/stomp.md); the
    console's create answered at once, so a crash right after "created" could forget it (a SUBSCRIBE that made
    one waits for the record since the destination attacks of 2026-11-29).  The answer now waits for it."""
    from twisted.internet.defer import Deferred, maybeDeferred

    from gateway.broker.operations import QueueOperations

    gateway = gateway_for()
    broker = gateway.broker
    held: list[Deferred[None]] = []

    def add_durable(key: str, topic: str, selector: str | None, owner: str | None = None) -> Deferred[None]:
        held.append(Deferred())
        return held[-1]

    broker.store.add_durable = add_durable
    answers: list[bool] = []
    operations = QueueOperations(broker)
    maybeDeferred(operations.create_queue, "/queue/Consumer.A.VirtualTopic.news").addCallback(answers.append)
    assert "/queue/Consumer.A.VirtualTopic.news" in broker.queues and len(held) == 2  # (consumer, configured)
    assert answers == [], "answered before the consumer queue's record was stored"
    held[1].callback(None)
    assert answers == [], "answered before the consumer queue's record was stored"
    held[0].callback(None)
    assert answers == [True]
    maybeDeferred(operations.create_queue, "/queue/plain").addCallback(answers.append)  # (its configured record)
    assert answers == [True] and len(held) == 3
    held[2].callback(None)
    assert answers == [True, True]
