"""The ``jms`` connector's destination lookup (:mod:`gateway.connectors.jms_link`): the exclusive
queue consumer a bridge asks for, as the provider's destination option (``exclusive_option``)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.connectors.jms_link import Link
from gateway.connectors.jms_settings import JmsSettings
from gateway.errors import DestinationError


class Session:
    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []

    def createQueue(self, name: str) -> tuple[str, str]:
        self.made.append(("queue", name))
        return ("queue", name)

    def createTopic(self, name: str) -> tuple[str, str]:
        self.made.append(("topic", name))
        return ("topic", name)


def link(option: str = "consumer.exclusive=true") -> Link:
    return Link(object(), None, Any, JmsSettings("amq", (), "javax", exclusive_option=option), 1)  # type: ignore[arg-type]


def test_an_exclusive_queue_consumer_gets_the_option_and_its_own_destination() -> None:
    session = Session()
    jms = link()
    assert jms.destination(session, "/queue/orders", exclusive=True) == ("queue", "orders?consumer.exclusive=true")
    assert jms.destination(session, "/queue/orders") == ("queue", "orders")  # (senders: the plain queue)
    assert jms.destination(session, "/queue/orders", exclusive=True) == ("queue", "orders?consumer.exclusive=true")
    assert session.made == [("queue", "orders?consumer.exclusive=true"), ("queue", "orders")]  # (each made once)


def test_an_option_already_in_the_name_is_kept_and_joined() -> None:
    session = Session()
    made = link().destination(session, "/queue/orders?consumer.prefetchSize=10", exclusive=True)
    assert made == ("queue", "orders?consumer.prefetchSize=10&consumer.exclusive=true")


def test_topics_and_providers_without_the_option_are_made_plain() -> None:
    session = Session()
    assert link().destination(session, "/topic/prices", exclusive=True) == ("topic", "prices")
    assert link("").destination(session, "/queue/a", exclusive=True) == ("queue", "a")  # (no option configured)


def test_a_name_that_is_no_queue_or_topic_is_refused() -> None:
    with pytest.raises(DestinationError, match="/queue/NAME and /topic/NAME"):
        link().destination(Session(), "/exchange/x", exclusive=True)
