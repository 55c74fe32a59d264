"""The STOMP session and protocol glue, driven over StringTransport with a Clock."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from zope.interface.verify import verifyObject

from gateway.broker.broker import EmbeddedBroker
from gateway.errors import StompProtocolError
from gateway.interfaces import IConnector, IConsumer
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import build_portal
from gateway.security.settings import AuthSettings
from gateway.stomp.protocol import WRITE_GRACE, WRITE_GRACE_FRAMES, StompServerFactory, StompServerProtocol
from gateway.stomp.session import StompSubscription
from gateway.stomp.settings import StompSettings
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame


class Peer:
    """A client end: writes frames into a protocol and reads what comes back."""

    def __init__(self, factory: StompServerFactory) -> None:
        self.protocol: StompServerProtocol = factory.buildProtocol(None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.decoder = FrameDecoder(version="1.2")
        self.frames: list[Frame] = []

    def send(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"",
             version: str = "1.2") -> None:
        self.protocol.dataReceived(encode_frame(Frame(command, headers or {}, body), version))

    def received(self) -> list[Frame]:
        data = self.transport.value()
        self.transport.clear()
        for item in self.decoder.feed(data):
            assert not isinstance(item, StompProtocolError), item
            self.frames.append(item)
        frames, self.frames = self.frames, []
        return frames

    def raw(self) -> bytes:
        data: bytes = self.transport.value()
        self.transport.clear()
        return data

    @property
    def closed(self) -> bool:
        return self.transport.disconnecting


def make_factory(clock: Clock, broker: EmbeddedBroker, **settings: object) -> StompServerFactory:
    return StompServerFactory(clock, DestinationMap({"embedded": broker}), settings=StompSettings(**settings))  # type: ignore[arg-type]


def connect(peer: Peer, **headers: str) -> Frame:
    peer.send("CONNECT", {"accept-version": "1.0,1.1,1.2", "host": "localhost", **headers})
    frames = peer.received()
    assert len(frames) == 1
    return frames[0]


def test_interfaces(clock: Clock, broker: EmbeddedBroker) -> None:
    assert verifyObject(IConnector, broker)
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    assert peer.protocol.session is not None
    assert verifyObject(IConsumer, StompSubscription(peer.protocol.session, "s", "/queue/a", "auto"))


def test_version_negotiation(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = make_factory(clock, broker)
    connected = connect(Peer(factory))
    assert connected.command == "CONNECTED"
    assert connected.headers["version"] == "1.2"
    assert connected.headers["server"].startswith("jmsgateway/")
    assert connected.headers["session"]
    peer = Peer(factory)
    peer.send("CONNECT", {"accept-version": "1.1"})
    assert peer.received()[0].headers["version"] == "1.1"
    peer = Peer(factory)
    peer.send("CONNECT", {}, version="1.0")
    frame = peer.received()[0]
    assert frame.headers["version"] == "1.0"
    assert "heart-beat" not in frame.headers


def test_unsupported_version_gets_error_with_version_header(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    peer.send("CONNECT", {"accept-version": "2.0,3.1"})
    error = peer.received()[0]
    assert error.command == "ERROR"
    assert error.headers["version"] == "1.0,1.1,1.2"
    assert peer.closed


def test_frame_before_connect_is_an_error(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    peer.send("SEND", {"destination": "/queue/a", "receipt": "7"}, b"x")
    error = peer.received()[0]
    assert error.command == "ERROR"
    assert error.headers["message"] == "not connected"
    assert error.headers["receipt-id"] == "7"
    assert peer.closed


def test_malformed_bytes_give_error_and_close(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.protocol.dataReceived(b"SEND\ndestination:/queue/a\nbad\\qescape:1\n\nbody\x00")
    error = peer.received()[0]
    assert error.command == "ERROR"
    assert error.headers["message"] == "invalid header escape"
    assert b"\\q" in error.body
    assert peer.closed


def test_oversized_frame_is_refused(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker, max_frame_size=1024))
    connect(peer)
    peer.send("SEND", {"destination": "/queue/a"}, b"x" * 2048)
    error = peer.received()[0]
    assert error.headers["message"] == "frame too large"
    assert peer.closed


def test_heartbeats_are_sent_when_idle(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker, heartbeat_send_ms=1000, heartbeat_receive_ms=0))
    connected = connect(peer, **{"heart-beat": "0,500"})
    assert connected.headers["heart-beat"] == "1000,0"
    assert peer.raw() == b""
    clock.advance(1.0)
    assert peer.raw() == b"\n"
    clock.advance(0.5)
    assert peer.raw() == b""
    clock.advance(0.5)
    assert peer.raw() == b"\n"


def test_heartbeat_not_sent_right_after_other_traffic(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker, heartbeat_send_ms=1000, heartbeat_receive_ms=0))
    connect(peer, **{"heart-beat": "0,1000"})
    clock.advance(0.9)
    peer.send("SEND", {"destination": "/queue/a", "receipt": "1"}, b"x")
    assert peer.received()[0].command == "RECEIPT"
    clock.advance(0.1)
    assert peer.raw() == b""
    clock.advance(0.9)
    assert peer.raw() == b"\n"


def test_heartbeat_not_sent_right_after_a_message(clock: Clock, broker: EmbeddedBroker) -> None:
    """A MESSAGE written by the delivery encoder counts as traffic for the outgoing heart-beat (the
    delivery path reads the clock only when heart-beats are sent: here they are)."""
    peer = Peer(make_factory(clock, broker, heartbeat_send_ms=1000, heartbeat_receive_ms=0))
    connect(peer, **{"heart-beat": "0,1000"})
    peer.send("SUBSCRIBE", {"destination": "/queue/hb", "id": "0"})
    clock.advance(0.9)
    peer.send("SEND", {"destination": "/queue/hb"}, b"x")
    assert [frame.command for frame in peer.received()] == ["MESSAGE"]
    clock.advance(0.1)
    assert peer.raw() == b""  # (1.0 s after CONNECTED, 0.1 s after the MESSAGE)
    clock.advance(0.8)
    assert peer.raw() == b""
    clock.advance(0.1)
    assert peer.raw() == b"\n"  # (1.0 s after the MESSAGE)


def test_silent_peer_is_disconnected_after_grace(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker, heartbeat_send_ms=0, heartbeat_receive_ms=1000, heartbeat_grace=1.5))
    connect(peer, **{"heart-beat": "2000,0"})
    # negotiated: the client sends every max(2000, 1000) ms; dead after 1.5 x 2 s
    clock.advance(2.9)
    assert not peer.closed
    peer.protocol.dataReceived(b"\n")
    clock.advance(2.9)
    assert not peer.closed
    clock.advance(0.2)
    assert peer.closed


def test_invalid_heartbeat_header(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    peer.send("CONNECT", {"accept-version": "1.2", "heart-beat": "soon"})
    error = peer.received()[0]
    assert error.headers["message"] == "invalid heart-beat header"


def test_authentication(clock: Clock, broker: EmbeddedBroker) -> None:
    portal = build_portal(AuthSettings(users={"alice": "secret"}, allow_weak_passwords=True))
    factory = StompServerFactory(clock, DestinationMap({"embedded": broker}), portal=portal)
    good = Peer(factory)
    assert connect(good, login="alice", passcode="secret").command == "CONNECTED"
    bad = Peer(factory)
    error = connect(bad, login="alice", passcode="wrong")
    assert error.command == "ERROR"
    assert error.headers["message"] == "authentication failed"
    assert bad.closed
    anonymous = Peer(factory)
    assert connect(anonymous).command == "ERROR"


def test_receipt_and_delivery_roundtrip(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = make_factory(clock, broker)
    consumer = Peer(factory)
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": "/queue/a", "id": "s1", "ack": "client", "receipt": "r1"})
    assert [f.command for f in consumer.received()] == ["RECEIPT"]
    producer = Peer(factory)
    connect(producer)
    producer.send("SEND", {"destination": "/queue/a", "receipt": "r2", "content-length": "3"}, b"a\x00b")
    assert producer.received()[0].headers["receipt-id"] == "r2"
    message = consumer.received()[0]
    assert message.command == "MESSAGE"
    assert message.body == b"a\x00b"
    assert message.headers["subscription"] == "s1"
    consumer.send("ACK", {"id": message.headers["ack"], "receipt": "r3"})
    assert consumer.received()[0].headers["receipt-id"] == "r3"
    assert broker.status()["queues"]["/queue/a"] == {"pending": 0, "consumers": 1, "inflight": 0}


def test_backpressure_pauses_deliveries(clock: Clock, broker: EmbeddedBroker) -> None:
    """Once the transport reports its write buffer full, deliveries go on for WRITE_GRACE bytes (one
    64 KB message fills Twisted's buffer alone) or WRITE_GRACE_FRAMES frames, then pause until it has
    written everything out."""
    factory = make_factory(clock, broker)
    consumer = Peer(factory)
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": "/queue/bp", "id": "s1"})
    consumer.protocol.pauseProducing()
    producer = Peer(factory)
    connect(producer)
    body = b"x" * 65536
    for _ in range(6):
        producer.send("SEND", {"destination": "/queue/bp"}, body)
    delivered = consumer.received()
    sizes = [len(encode_frame(frame, "1.2")) for frame in delivered]
    assert sum(sizes[:-1]) < WRITE_GRACE <= sum(sizes)  # the message that reached the grace was the last
    assert len(delivered) == 3
    assert broker.status()["queues"]["/queue/bp"]["pending"] == 3
    consumer.protocol.resumeProducing()
    assert len(consumer.received()) == 3
    consumer.protocol.pauseProducing()  # small messages: the grace ends after WRITE_GRACE_FRAMES of them
    for _ in range(5):
        producer.send("SEND", {"destination": "/queue/bp"}, b"x")
    assert len(consumer.received()) == WRITE_GRACE_FRAMES == 4
    assert broker.status()["queues"]["/queue/bp"]["pending"] == 1


def test_connection_lost_releases_everything(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = make_factory(clock, broker)
    peer = Peer(factory)
    connect(peer)
    peer.send("SUBSCRIBE", {"destination": "/temp-queue/mine", "id": "t"})
    peer.send("SUBSCRIBE", {"destination": "/queue/q", "id": "q", "ack": "client"})
    temporaries = [name for name in broker.queues if name.startswith("/remote-temp-queue/")]
    assert len(temporaries) == 1
    peer.protocol.connectionLost()
    assert temporaries[0] not in broker.queues
    assert broker.status()["queues"]["/queue/q"]["consumers"] == 0
    assert factory.connections == set()


def test_headers_a_version_cannot_carry_are_left_out_and_counted(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = make_factory(clock, broker)
    old = Peer(factory)
    old.send("CONNECT", {"host": "localhost"}, version="1.0")  # no accept-version: STOMP 1.0
    assert old.received()[0].headers["version"] == "1.0"
    old.decoder.version = "1.0"
    old.send("SUBSCRIBE", {"id": "s1", "destination": "/queue/a"}, version="1.0")
    sender = Peer(factory)
    connect(sender)
    sender.send("SEND", {"destination": "/queue/a", "x-h": "a\nsubscription:EVIL", "ok": "yes"}, b"payload")
    (message,) = old.received()
    assert message.headers["subscription"] == "s1" and message.headers["ok"] == "yes"
    assert "x-h" not in message.headers
    assert factory.dropped_headers.labels("1.0")._value.get() == 1
