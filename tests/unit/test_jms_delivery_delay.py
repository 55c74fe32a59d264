"""How the ``jms`` connector's producer sends AMQ_SCHEDULED_* (gateway/connectors/jms_delivery_delay.py),
with producers that stand in for a JMS 1.1 and a JMS 2.0 client (the JMS 1.1 one against the real
ActiveMQ: tests/integration/test_scheduled_delivery.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.connectors.jms_delivery_delay import DeliveryDelay, check_schedule
from gateway.errors import MessageRefused
from gateway.message.model import TextMessage

API: Any = SimpleNamespace(JLong=int, JInt=int)


class Jms11Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, *args: Any) -> None:
        self.sent.append(args)


class Jms20Producer(Jms11Producer):
    def __init__(self, refuses: bool = False) -> None:
        super().__init__()
        self.refuses = refuses
        self.delay = 0
        self.delays: list[int] = []

    def setDeliveryDelay(self, delay: int) -> None:
        if self.refuses:
            raise RuntimeError("UnsupportedOperationException: setDeliveryDelay() is not supported")
        self.delay = delay

    def send(self, *args: Any) -> None:
        self.delays.append(self.delay)
        super().send(*args)


class JmsMessage:
    def __init__(self) -> None:
        self.typed: dict[str, tuple[str, int]] = {}

    def setLongProperty(self, name: str, value: int) -> None:
        self.typed[name] = ("long", value)

    def setIntProperty(self, name: str, value: int) -> None:
        self.typed[name] = ("int", value)


def scheduled(**properties: Any) -> TextMessage:
    return TextMessage(text="x", destination="/queue/q", properties={"color": "red", **properties})


def test_a_jms_2_producer_takes_the_delay_and_the_property_goes() -> None:
    producer = Jms20Producer()
    delays = DeliveryDelay(producer, API)
    message = scheduled(AMQ_SCHEDULED_DELAY="1500")
    outgoing, delay = delays.outgoing(message)
    assert delay == 1500 and outgoing.properties == {"color": "red"} and "AMQ_SCHEDULED_DELAY" in message.properties
    assert delays.send("dest", "jms", 2, 4, 0, delay, outgoing)
    assert producer.delays == [1500] and producer.delay == 0, "the delay holds for that send only"


def test_a_period_or_a_repeat_goes_as_properties_even_to_a_jms_2_producer() -> None:
    delays = DeliveryDelay(Jms20Producer(), API)
    message = scheduled(AMQ_SCHEDULED_DELAY="1000", AMQ_SCHEDULED_PERIOD="500", AMQ_SCHEDULED_REPEAT="2")
    assert delays.outgoing(message) == (message, 0)
    jms = JmsMessage()
    delays.type_properties(message, jms)
    assert jms.typed == {"AMQ_SCHEDULED_DELAY": ("long", 1000), "AMQ_SCHEDULED_PERIOD": ("long", 500),
                         "AMQ_SCHEDULED_REPEAT": ("int", 2)}


def test_a_jms_1_1_producer_gets_typed_properties() -> None:
    delays = DeliveryDelay(Jms11Producer(), API)
    assert not delays.native
    message = scheduled(AMQ_SCHEDULED_DELAY="1500")
    assert delays.outgoing(message) == (message, 0)
    jms = JmsMessage()
    delays.type_properties(message, jms)
    assert jms.typed == {"AMQ_SCHEDULED_DELAY": ("long", 1500)}


def test_a_provider_that_refuses_set_delivery_delay_is_told_by_properties_from_then_on() -> None:
    producer = Jms20Producer(refuses=True)
    delays = DeliveryDelay(producer, API)
    outgoing, delay = delays.outgoing(scheduled(AMQ_SCHEDULED_DELAY="10"))
    assert not delays.send("dest", "jms", 2, 4, 0, delay, outgoing) and producer.sent == []
    message = scheduled(AMQ_SCHEDULED_DELAY="10")
    assert delays.outgoing(message) == (message, 0)


def test_unscheduled_messages_are_left_alone() -> None:
    delays = DeliveryDelay(Jms20Producer(), API)
    message = scheduled()
    assert delays.outgoing(message) == (message, 0)
    jms = JmsMessage()
    delays.type_properties(message, jms)
    assert jms.typed == {}


@pytest.mark.parametrize(("properties", "said"), [
    ({"AMQ_SCHEDULED_DELAY": "soon"}, "AMQ_SCHEDULED_DELAY must be a whole number of ms, not 'soon'"),
    ({"AMQ_SCHEDULED_DELAY": "-5"}, "AMQ_SCHEDULED_DELAY must not be negative (got -5)"),
    ({"AMQ_SCHEDULED_REPEAT": "3"}, "AMQ_SCHEDULED_REPEAT:3 needs an AMQ_SCHEDULED_PERIOD above 0"),
])
def test_unreadable_numbers_are_refused_before_sending(properties: dict[str, str], said: str) -> None:
    with pytest.raises(MessageRefused, match=said.replace("(", r"\(").replace(")", r"\)")):
        check_schedule(scheduled(**properties))
    check_schedule(scheduled(AMQ_SCHEDULED_CRON="0 * * * *"))  # (ActiveMQ's own: the provider reads it)
