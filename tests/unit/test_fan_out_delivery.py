"""Issue 39: a topic's fan-out delivers each Text or Bytes message without the outbound transformer's
call when the transformer says none applies (``outbound_idle``), and counts a non-persistent
auto-acknowledged delivery without the broker's store path; every subscriber still gets its own
``subscription`` header.  The session on StringTransports, the real embedded broker."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.message.model import Message
from gateway.routing.destination_map import DestinationMap
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.settings import StompSettings
from tests.unit.test_session import Peer, connect


class Outbound:
    """A transformer hook whose outbound call is counted (and refused when ``idle``)."""

    def __init__(self, idle: bool) -> None:
        self.outbound_idle = idle
        self.calls = 0

    def check_transformation(self, name: str | None) -> None:
        return None

    def passes_through(self, frame: Any) -> bool:
        return True

    def inbound(self, message: Message, session: Any, frame: Any) -> Message:
        return message

    def outbound(self, message: Message, session: Any, subscription: Any) -> Message:
        self.calls += 1
        if self.outbound_idle:
            raise AssertionError("outbound called although no outbound transformer applies")
        return message


def fan_out(clock: Clock, broker: EmbeddedBroker, transformer: Outbound,
            transformation: str | None = None) -> list[list[Any]]:
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}), settings=StompSettings(),
                                 transformer=transformer)
    subscribers = []
    for number in range(3):
        peer = Peer(factory)
        connect(peer)
        headers = {"destination": "/topic/prices", "id": f"s{number}"}
        if transformation is not None:
            headers["transformation"] = transformation
        peer.send("SUBSCRIBE", headers)
        subscribers.append(peer)
    producer = Peer(factory)
    connect(producer)
    producer.send("SEND", {"destination": "/topic/prices", "content-length": "2"}, b"42")
    producer.send("SEND", {"destination": "/topic/prices"}, b"text")
    return [[(f.command, f.headers["subscription"], f.body) for f in peer.received()] for peer in subscribers]


def test_fan_out_skips_an_idle_outbound_transformer(clock: Clock, broker: EmbeddedBroker) -> None:
    transformer = Outbound(idle=True)
    received = fan_out(clock, broker, transformer)
    assert received == [[("MESSAGE", f"s{n}", b"42"), ("MESSAGE", f"s{n}", b"text")] for n in range(3)]
    assert transformer.calls == 0


def test_a_transformer_that_may_apply_is_still_called(clock: Clock, broker: EmbeddedBroker) -> None:
    transformer = Outbound(idle=False)
    received = fan_out(clock, broker, transformer)
    assert received == [[("MESSAGE", f"s{n}", b"42"), ("MESSAGE", f"s{n}", b"text")] for n in range(3)]
    assert transformer.calls == 6


def test_a_subscription_naming_a_transformation_is_still_transformed(clock: Clock, broker: EmbeddedBroker) -> None:
    transformer = Outbound(idle=False)
    fan_out(clock, broker, transformer, transformation="jms-map-json")
    assert transformer.calls == 6


def test_non_persistent_auto_delivery_is_counted_without_the_store_path(
        clock: Clock, broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    def consumed(*_: Any) -> None:
        raise AssertionError("the store path ran for a non-persistent message")

    monkeypatch.setattr(broker, "consumed", consumed)
    before = broker.metrics.consumed.count
    received = fan_out(clock, broker, Outbound(idle=True))
    assert sum(len(frames) for frames in received) == 6
    assert broker.metrics.consumed.count == before + 6
