"""A client SEND forwarded to a JMS broker without a JMS message in between.

The STOMP session (StringTransport) and the real StompBrokerConnector talking
to a fake broker endpoint (StringTransport, Clock): a SEND outside a
transaction, without a receipt, that no transformer touches, goes to
``StompBrokerConnector.forward``; every other SEND takes the message path.
Which path ran is told by making ``frame_to_message`` in the session fail.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.connectors.stomp_broker import StompBrokerConnector
from gateway.message.model import Message
from gateway.routing.config import DestinationRule
from gateway.routing.destination_map import DestinationMap
from gateway.stomp import sending as sending_module
from gateway.stomp.protocol import StompServerFactory
from gateway.stomp.settings import StompSettings
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect
from tests.unit.test_stomp_client_connector import FakeBroker, make, started


class Setup:
    def __init__(self, transformer: Any = None, broker_up: bool = True) -> None:
        self.clock = Clock()
        self.embedded = EmbeddedBroker(self.clock)
        self.embedded.start()
        self.broker = FakeBroker()
        self.connector: StompBrokerConnector
        if broker_up:
            self.connector = started(self.broker, self.clock)
        else:
            self.broker.up = False
            self.connector = make(self.broker, self.clock, failure_retry_interval=1000)
            self.connector.start()
        destinations = DestinationMap(
            {"embedded": self.embedded, "amq": self.connector},
            [DestinationRule(pattern="/queue/jms.*", connector="amq", rename="/queue/")],
        )
        factory = StompServerFactory(self.clock, destinations, settings=StompSettings(), transformer=transformer)
        self.peer = Peer(factory)
        connect(self.peer)

    def sent(self) -> list[Frame]:
        """SENDs the broker got (the end-of-turn receipt put on the last one)."""
        self.clock.advance(0)
        return [frame for frame in self.broker.frames() if frame.command == "SEND"]


def send_text(peer: Peer, headers: dict[str, str], text: str) -> None:
    """A SEND without content-length: a TextMessage."""
    peer.protocol.dataReceived(encode_frame(Frame("SEND", headers, text.encode()), "1.2", add_content_length=False))


@pytest.fixture
def no_message_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_: Any, **__: Any) -> Message:
        raise AssertionError("the message path ran")

    monkeypatch.setattr(sending_module, "frame_to_message", refused)


def test_plain_send_is_forwarded_with_the_jms_headers(no_message_path: None) -> None:
    setup = Setup()
    setup.peer.send("SEND", {
        "destination": "/queue/jms.orders", "correlation-id": "c-7", "priority": "7", "persistent": "true",
        "type": "order", "region": "eu", "content-length": "3",
    }, b"abc")
    send_text(setup.peer, {"destination": "/queue/jms.orders"}, "t\u00e9xt")
    first, second = setup.sent()
    timestamp = first.headers.pop("timestamp")
    assert timestamp.isdigit()
    assert first.headers == {
        "destination": "/queue/orders", "correlation-id": "c-7", "persistent": "true", "priority": "7",
        "type": "order", "region": "eu", "content-length": "3",
    }
    assert first.body == b"abc"
    assert "content-length" not in second.headers  # a TextMessage at ActiveMQ
    assert second.body == "t\u00e9xt".encode() and "receipt" in second.headers  # the burst's receipt
    assert setup.peer.received() == []
    setup.peer.send("DISCONNECT", {"receipt": "bye"})
    assert setup.peer.received() == []  # waits for the broker to confirm both SENDs
    setup.broker.answer("RECEIPT", {"receipt-id": second.headers["receipt"]})
    assert [frame.headers.get("receipt-id") for frame in setup.peer.received()] == ["bye"]


def test_receipted_transacted_and_temporary_sends_take_the_message_path() -> None:
    setup = Setup()
    setup.peer.send("SEND", {"destination": "/queue/jms.a", "receipt": "r1"}, b"1")
    setup.peer.send("SEND", {"destination": "/queue/jms.a", "reply-to": "/temp-queue/mine"}, b"2")
    setup.peer.send("BEGIN", {"transaction": "tx"})
    setup.peer.send("SEND", {"destination": "/queue/jms.a", "transaction": "tx"}, b"3")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sending_module, "frame_to_message", lambda *_, **__: pytest.fail("message path"))
        setup.peer.send("SEND", {"destination": "/queue/jms.a"}, b"4")
    setup.peer.send("COMMIT", {"transaction": "tx"})
    frames = [frame for frame in setup.broker.frames() if frame.command == "SEND"]
    # the temporary reply-to is this connection's queue at the gateway
    assert [frame.body for frame in frames][:3] == [b"1", b"2", b"4"]
    assert frames[1].headers["reply-to"].startswith("/remote-temp-queue/")


def test_a_bad_header_is_an_error_frame_and_nothing_is_sent(no_message_path: None) -> None:
    setup = Setup()
    setup.peer.send("SEND", {"destination": "/queue/jms.a", "priority": "12"}, b"x")
    (error,) = setup.peer.received()
    assert error.command == "ERROR" and error.headers["message"] == "invalid priority header"
    assert setup.sent() == []


def test_while_the_broker_is_away_the_send_waits_on_the_message_path() -> None:
    setup = Setup(broker_up=False)
    setup.peer.send("SEND", {"destination": "/queue/jms.a"}, b"waits")
    setup.broker.up = True
    setup.clock.advance(1.0)  # the connector's next attempt
    setup.broker.accept()
    setup.broker.probe()  # the connector's transformation probe comes first
    setup.clock.advance(0)
    (frame,) = setup.sent()
    assert frame.body == b"waits"


class Upper:
    """An inbound transformer that applies to every SEND (upper-cases text bodies)."""

    def check_transformation(self, name: str | None) -> None:
        pass

    def passes_through(self, frame: Frame) -> bool:
        return False

    def inbound(self, message: Message, session: Any, frame: Frame) -> Message:
        message.text = message.text.upper()  # type: ignore[attr-defined]
        return message

    def outbound(self, message: Message, session: Any, subscription: Any) -> Message:
        return message


def test_a_send_a_transformer_applies_to_is_transformed() -> None:
    setup = Setup(transformer=Upper())
    send_text(setup.peer, {"destination": "/queue/jms.a"}, "quiet")
    (frame,) = setup.sent()
    assert frame.body == b"QUIET"
