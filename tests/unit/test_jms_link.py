"""The ``jms`` connector's destination lookup (:mod:`gateway.connectors.jms_link`): the exclusive
queue consumer a bridge asks for, as a destination option where the provider has one."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.connectors.jms_link import Link, exclusive_option
from gateway.connectors.jms_settings import JmsSettings
from gateway.errors import DestinationError


class JavaClass:
    def __init__(self, name: str) -> None:
        self.name = name

    def getName(self) -> str:
        return self.name


class Connection:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def getClass(self) -> JavaClass:
        return JavaClass(self.kind)


class Session:
    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []

    def createQueue(self, name: str) -> tuple[str, str]:
        self.made.append(("queue", name))
        return ("queue", name)

    def createTopic(self, name: str) -> tuple[str, str]:
        self.made.append(("topic", name))
        return ("topic", name)


def link(kind: str) -> Link:
    return Link(Connection(kind), None, Any, JmsSettings("amq", (), "javax"), 1)  # type: ignore[arg-type]


ACTIVEMQ = "org.apache.activemq.ActiveMQConnection"


@pytest.mark.parametrize(("kind", "option"), [
    (ACTIVEMQ, "consumer.exclusive=true"),
    ("org.apache.activemq.ActiveMQXAConnection", "consumer.exclusive=true"),
    ("org.apache.activemq.artemis.jms.client.ActiveMQConnection", None),
    ("com.ibm.mq.jms.MQConnection", None),
])
def test_only_activemq_5_takes_the_exclusive_consumer_as_a_destination_option(kind: str, option: str | None) -> None:
    assert exclusive_option(Connection(kind)) == option


def test_a_fake_connection_has_no_option() -> None:
    assert exclusive_option(object()) is None


def test_an_exclusive_queue_consumer_gets_the_option_and_its_own_destination() -> None:
    session = Session()
    jms = link(ACTIVEMQ)
    assert jms.destination(session, "/queue/orders", exclusive=True) == ("queue", "orders?consumer.exclusive=true")
    assert jms.destination(session, "/queue/orders") == ("queue", "orders")  # (senders: the plain queue)
    assert jms.destination(session, "/queue/orders", exclusive=True) == ("queue", "orders?consumer.exclusive=true")
    assert session.made == [("queue", "orders?consumer.exclusive=true"), ("queue", "orders")]  # (each made once)


def test_an_option_already_in_the_name_is_kept_and_joined() -> None:
    session = Session()
    made = link(ACTIVEMQ).destination(session, "/queue/orders?consumer.prefetchSize=10", exclusive=True)
    assert made == ("queue", "orders?consumer.prefetchSize=10&consumer.exclusive=true")


def test_topics_and_other_providers_are_made_plain() -> None:
    session = Session()
    assert link(ACTIVEMQ).destination(session, "/topic/prices", exclusive=True) == ("topic", "prices")
    assert link("com.ibm.mq.jms.MQConnection").destination(session, "/queue/a", exclusive=True) == ("queue", "a")


def test_a_name_that_is_no_queue_or_topic_is_refused() -> None:
    with pytest.raises(DestinationError, match="/queue/NAME and /topic/NAME"):
        link(ACTIVEMQ).destination(Session(), "/exchange/x", exclusive=True)
