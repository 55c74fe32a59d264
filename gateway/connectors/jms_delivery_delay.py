"""Scheduled delivery through the JMS API: a SEND's ``AMQ_SCHEDULED_*`` as the provider takes it.

The ``jms`` connector's producer thread asks :class:`DeliveryDelay` how to send a message that
carries ``AMQ_SCHEDULED_DELAY``, ``AMQ_SCHEDULED_PERIOD``, ``AMQ_SCHEDULED_REPEAT`` or
``AMQ_SCHEDULED_CRON`` (the STOMP spelling, :mod:`gateway.broker.scheduler`):

* a JMS 2.0 / 3.x producer (its class has ``setDeliveryDelay``) and a message with a delay
  only: the delay becomes the producer's delivery delay for that send (the standard JMS 2.0
  delivery time, any provider), the property is not sent; a provider that refuses
  ``setDeliveryDelay`` (a JMS 2.0 client without it) is told by properties from then on;
* otherwise (a JMS 1.1 client such as ActiveMQ 5.x's, or a period, repeat or cron, which JMS
  has no word for): the properties go with the message, the numbers typed as ActiveMQ's
  ``ScheduledMessage`` documents them (delay and period ``long``, repeat ``int``); ActiveMQ's
  broker schedules them when it runs with ``schedulerSupport="true"``.

:func:`check_schedule` refuses, on the reactor thread and before anything is sent, a negative or
unreadable number and a repeat without a period (the embedded broker's rules).  Nothing here
names a provider.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from gateway.broker.scheduler import CRON, DELAY, PERIOD, REPEAT, SCHEDULING, is_scheduled, schedule_numbers
from gateway.connectors.jms_provider import JmsApi, java_error
from gateway.message.model import Message


def check_schedule(message: Message) -> None:
    """MessageRefused when ``message``'s scheduling properties cannot be read."""
    if is_scheduled(message):
        schedule_numbers(message)


class DeliveryDelay:
    """How one producer sends scheduled messages (see the module docstring).

    :param producer: the JMS ``MessageProducer`` (unidentified: ``createProducer(None)``).
    """

    log = Logger()

    def __init__(self, producer: Any, api: JmsApi) -> None:
        self.producer = producer
        self.api = api
        self.native = callable(getattr(producer, "setDeliveryDelay", None))
        """Whether the producer takes a delivery delay (JMS 2.0 and later)."""

    def outgoing(self, message: Message) -> tuple[Message, int]:
        """``(the message to map, the producer's delivery delay for it)``: a delay the producer
        takes is removed from the properties; the other scheduling properties are kept."""
        if not self.native or not is_scheduled(message):
            return message, 0
        properties = message.properties
        if any(name in properties for name in (PERIOD, REPEAT, CRON)) or DELAY not in properties:
            return message, 0
        delay = schedule_numbers(message)[0]
        copy = message.copy()
        copy.properties = {name: value for name, value in properties.items() if name != DELAY}
        return copy, delay

    def type_properties(self, message: Message, jms: Any) -> None:
        """Set ``message``'s scheduling numbers on ``jms`` as ``long`` / ``int`` (over the strings
        a STOMP header gives)."""
        properties = message.properties
        if not properties or SCHEDULING.isdisjoint(properties):
            return
        delay, period, repeat = schedule_numbers(message)
        if DELAY in properties:
            jms.setLongProperty(DELAY, self.api.JLong(delay))
        if PERIOD in properties:
            jms.setLongProperty(PERIOD, self.api.JLong(period))
        if REPEAT in properties:
            jms.setIntProperty(REPEAT, self.api.JInt(repeat))

    def send(self, destination: Any, jms: Any, mode: int, priority: int, ttl: int, delay: int,
             message: Message) -> bool:
        """Send with ``delay`` as the producer's delivery delay; False (nothing sent) when the
        producer refused it: the caller sends again with the properties."""
        try:
            self.producer.setDeliveryDelay(self.api.JLong(delay))
        except Exception as error:  # UnsupportedOperationException, JMSException, an abstract method
            self.native = False
            self.log.warn("jms: the provider refuses setDeliveryDelay ({error}); delays go as the "
                          "AMQ_SCHEDULED_DELAY property from now on", error=java_error(error))
            return False
        try:
            self.producer.send(destination, jms, mode, priority, ttl)
        finally:
            self.producer.setDeliveryDelay(self.api.JLong(0))
        return True
