"""STOMP over WebSocket glue (:mod:`gateway.stomp.websocket`) with in-memory fakes.

:class:`WebSocketTransport` is driven against a fake message channel over a
``StringTransport``; the autobahn protocol is driven through a real opening
handshake on a ``StringTransport``, with client frames made and server frames
read by websocket-client's framing classes, and a ``Clock`` for STOMP timing.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence

import pytest
from autobahn.websocket.types import ConnectionDeny
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IConsumer, IPushProducer, ITransport
from twisted.internet.protocol import connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from websocket import ABNF, continuous_frame, frame_buffer
from zope.interface.verify import verifyObject

from gateway.broker.broker import EmbeddedBroker
from gateway.errors import GatewayError, StompProtocolError
from gateway.stomp.listeners import listener_for
from gateway.stomp.protocol import INPUT_FRAMES, StompServerProtocol
from gateway.stomp.websocket import (
    StompWebSocketFactory,
    StompWebSocketProtocol,
    WebSocketTransport,
    choose_subprotocol,
    is_text,
)
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_session import make_factory

CLIENT = IPv4Address("TCP", "127.0.0.1", 40404)
SERVER = IPv4Address("TCP", "127.0.0.1", 15674)
TEXT, BINARY, CLOSE = ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY, ABNF.OPCODE_CLOSE


# -- the transport adapter, over a fake channel -----------------------------


class FakeChannel:
    """A WebSocket connection as :class:`WebSocketTransport` sees it; records messages."""

    def __init__(self) -> None:
        self.transport = StringTransport(hostAddress=SERVER, peerAddress=CLIENT)
        self.messages: list[tuple[bytes, bool]] = []
        self.open = True
        self.closes = 0
        self.aborts = 0

    def can_send_messages(self) -> bool:
        return self.open

    def send_stomp_message(self, payload: bytes, *, binary: bool) -> None:
        self.messages.append((payload, binary))

    def close_websocket(self) -> None:
        self.closes += 1

    def abort_websocket(self) -> None:
        self.aborts += 1


def test_the_adapter_is_a_transport_consumer_and_producer() -> None:
    adapter = WebSocketTransport(FakeChannel())
    assert verifyObject(ITransport, adapter)
    assert verifyObject(IConsumer, adapter)
    assert verifyObject(IPushProducer, adapter)


def test_utf8_goes_out_as_a_text_message_other_bytes_as_binary() -> None:
    channel = FakeChannel()
    adapter = WebSocketTransport(channel)
    adapter.write(b"MESSAGE\ndestination:/queue/a\n\nh\xc3\xa9llo\x00")
    adapter.write(b"MESSAGE\ndestination:/queue/a\ncontent-length:2\n\n\xff\xfe\x00")
    adapter.write(b"\n")  # a heart-beat
    adapter.writeSequence([b"RECEIPT\nreceipt-id:1\n", b"\n\x00"])
    assert channel.messages == [
        (b"MESSAGE\ndestination:/queue/a\n\nh\xc3\xa9llo\x00", False),
        (b"MESSAGE\ndestination:/queue/a\ncontent-length:2\n\n\xff\xfe\x00", True),
        (b"\n", False),
        (b"RECEIPT\nreceipt-id:1\n\n\x00", False),
    ]
    assert is_text(b"") and is_text("żółw".encode()) and not is_text(b"\xc3")


def test_closing_happens_once_and_nothing_is_written_after_it() -> None:
    channel = FakeChannel()
    adapter = WebSocketTransport(channel)
    adapter.loseConnection()
    adapter.loseConnection()
    adapter.write(b"late")
    assert (channel.closes, channel.messages) == (1, [])
    adapter.abortConnection()
    assert channel.aborts == 1
    channel = FakeChannel()
    channel.open = False  # the client closed the WebSocket first
    WebSocketTransport(channel).write(b"MESSAGE\n\n\x00")
    assert channel.messages == []


def test_reading_pause_resume_and_producers_reach_the_tcp_transport() -> None:
    channel = FakeChannel()
    adapter = WebSocketTransport(channel)
    adapter.pauseProducing()
    assert channel.transport.producerState == "paused"
    adapter.resumeProducing()
    assert channel.transport.producerState == "producing"
    producer = object()
    adapter.registerProducer(producer, True)
    assert (channel.transport.producer, channel.transport.streaming) == (producer, True)
    adapter.unregisterProducer()
    assert channel.transport.producer is None
    assert (adapter.getPeer(), adapter.getHost()) == (CLIENT, SERVER)
    adapter.setTcpNoDelay(True)  # StringTransport has none: ignored


@pytest.mark.parametrize(("offered", "chosen"), [
    (["v10.stomp", "v11.stomp", "v12.stomp"], "v12.stomp"),
    (["v11.stomp", "v10.stomp"], "v11.stomp"),
    (["mqtt", "v10.stomp"], "v10.stomp"),
    (["stomp"], "stomp"),
    ([], None),
])
def test_the_highest_stomp_subprotocol_offered_is_chosen(offered: list[str], chosen: str | None) -> None:
    assert choose_subprotocol(offered) == chosen


def test_a_client_offering_no_stomp_subprotocol_is_refused() -> None:
    with pytest.raises(ConnectionDeny) as denied:
        choose_subprotocol(["mqtt", "wamp.2.json"])
    assert denied.value.code == 400
    assert "v12.stomp" in str(denied.value.reason)


def test_listener_specs() -> None:
    stomp_factory = make_factory(Clock(), EmbeddedBroker(Clock()))
    plain = listener_for("tcp:61613:interface=127.0.0.1", stomp_factory, Clock())
    assert (plain.endpoint, plain.factory, plain.description) == ("tcp:61613:interface=127.0.0.1", stomp_factory,
                                                                  "STOMP")
    ws = listener_for("ws:ssl:15673:privateKey=k.pem", stomp_factory, Clock())
    assert ws.endpoint == "ssl:15673:privateKey=k.pem"
    assert isinstance(ws.factory, StompWebSocketFactory) and ws.factory.stomp_factory is stomp_factory
    assert ws.description == "STOMP over WebSocket"


def test_a_ws_listener_without_autobahn_is_a_startup_error_naming_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gateway.stomp.websocket", None)  # what a missing autobahn looks like
    stomp_factory = make_factory(Clock(), EmbeddedBroker(Clock()))
    assert listener_for("tcp:61613", stomp_factory, Clock()).factory is stomp_factory  # plain listeners need none
    with pytest.raises(GatewayError, match=r"cannot listen on 'ws:tcp:15674': STOMP over WebSocket needs autobahn"):
        listener_for("ws:tcp:15674", stomp_factory, Clock())


# -- the autobahn protocol, through a real handshake --------------------------


def handshake_request(protocols: Sequence[str], path: str = "/ws") -> bytes:
    lines = [
        f"GET {path} HTTP/1.1", "Host: 127.0.0.1:15674", "Upgrade: websocket", "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
    ]
    if protocols:
        lines.append("Sec-WebSocket-Protocol: " + ", ".join(protocols))
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def build_protocol(factory: StompWebSocketFactory) -> StompWebSocketProtocol:
    protocol = factory.buildProtocol(CLIENT)
    assert isinstance(protocol, StompWebSocketProtocol)
    return protocol


class TcpLikeTransport(StringTransport):
    """A ``StringTransport`` whose ``unregisterProducer`` is as lenient as a TCP
    connection's: autobahn unregisters when it drops a connection whether or not
    a producer was registered (a refused handshake has none)."""

    def unregisterProducer(self) -> None:
        self.producer = None
        self.streaming = None


class WebSocketPeer:
    """A WebSocket client end: masked frames into the server protocol, messages out of it."""

    def __init__(self, factory: StompWebSocketFactory, protocols: Sequence[str] = ("v12.stomp",),
                 path: str = "/ws") -> None:
        self.protocol = build_protocol(factory)
        self.transport = TcpLikeTransport(hostAddress=SERVER, peerAddress=CLIENT)
        self.protocol.makeConnection(self.transport)
        self.protocol.dataReceived(handshake_request(protocols, path))
        head, _, rest = self.transport.value().partition(b"\r\n\r\n")
        self.response = head.decode()
        self.transport.clear()
        self.pending = rest
        self.assembler = continuous_frame(fire_cont_frame=False, skip_utf8_validation=False)

    @property
    def stomp(self) -> StompServerProtocol:
        assert self.protocol.stomp is not None, "the WebSocket is not open"
        return self.protocol.stomp

    def send(self, payload: bytes, opcode: int = TEXT) -> None:
        self.protocol.dataReceived(ABNF.create_frame(payload, opcode).format())

    def send_frame(self, command: str, headers: dict[str, str], body: bytes = b"", opcode: int = TEXT) -> None:
        self.send(encode_frame(Frame(command, headers, body), "1.2"), opcode)

    def messages(self) -> list[tuple[int, bytes]]:
        """Whole messages (fragments joined) and control frames the server sent since the last call."""
        stream = io.BytesIO(self.pending + self.transport.value())
        self.pending = b""
        self.transport.clear()
        frames = frame_buffer(stream.read, skip_utf8_validation=False)
        messages = []
        while stream.tell() < len(stream.getbuffer()):
            frame = frames.recv_frame()
            if frame.opcode in (TEXT, BINARY, ABNF.OPCODE_CONT):
                self.assembler.validate(frame)
                self.assembler.add(frame)
                if self.assembler.is_fire(frame):
                    opcode, whole = self.assembler.extract(frame)
                    messages.append((opcode, whole.data))
            else:
                messages.append((frame.opcode, frame.data))
        return messages

    def frames(self) -> list[tuple[int, Frame]]:
        """The STOMP frames received, one per message, with the message's opcode."""
        received = []
        for opcode, payload in self.messages():
            assert opcode in (TEXT, BINARY), (opcode, payload)
            (frame,) = FrameDecoder(version="1.2").feed(payload)
            assert not isinstance(frame, StompProtocolError), frame
            received.append((opcode, frame))
        return received

    def connect(self, **headers: str) -> Frame:
        self.send_frame("CONNECT", {"accept-version": "1.2", "host": "localhost", **headers})
        ((opcode, connected),) = self.frames()
        assert (opcode, connected.command) == (TEXT, "CONNECTED")
        return connected

    def lose_connection(self) -> None:
        """What the reactor does once the TCP connection is gone."""
        self.protocol.connectionLost(connectionDone)




def make_ws_factory(clock: Clock, broker: EmbeddedBroker, **settings: object) -> StompWebSocketFactory:
    factory = StompWebSocketFactory(make_factory(clock, broker, **settings), clock)
    # autobahn's own handshake timers run on the global reactor: none in unit tests
    factory.setProtocolOptions(openHandshakeTimeout=0, closeHandshakeTimeout=0)
    return factory


def close_code(payload: bytes) -> int:
    return int.from_bytes(payload[:2], "big")


@pytest.mark.parametrize(("offered", "answer"), [
    (["v10.stomp", "v11.stomp", "v12.stomp"], "Sec-WebSocket-Protocol: v12.stomp"),
    (["v11.stomp"], "Sec-WebSocket-Protocol: v11.stomp"),
    ([], None),
])
def test_the_handshake_accepts_any_path_and_answers_with_the_chosen_subprotocol(
    clock: Clock, broker: EmbeddedBroker, offered: list[str], answer: str | None
) -> None:
    for path in ("/ws", "/", "/stomp/websocket"):
        peer = WebSocketPeer(make_ws_factory(clock, broker), offered, path)
        assert peer.response.startswith("HTTP/1.1 101"), peer.response
        protocol_lines = [line for line in peer.response.split("\r\n") if line.startswith("Sec-WebSocket-Protocol")]
        assert protocol_lines == ([answer] if answer else [])
        assert peer.connect().headers["version"] == "1.2"


def test_a_handshake_offering_only_other_subprotocols_is_refused(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker), ["mqtt"])
    assert peer.response.startswith("HTTP/1.1 400"), peer.response
    assert peer.protocol.stomp is None
    assert peer.transport.disconnecting  # and the connection is closed


def test_a_frame_split_over_two_messages_is_one_frame(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker))
    data = encode_frame(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"}), "1.2")
    peer.send(data[:10])
    assert peer.messages() == []
    peer.send(data[10:])
    ((opcode, connected),) = peer.frames()
    assert (opcode, connected.command) == (TEXT, "CONNECTED")


def test_two_frames_in_one_message_are_both_handled_and_answered_apart(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker))
    peer.send(encode_frame(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"}), "1.2")
              + encode_frame(Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/a", "receipt": "r1"}), "1.2"))
    frames = peer.frames()
    assert [(opcode, frame.command) for opcode, frame in frames] == [(TEXT, "CONNECTED"), (TEXT, "RECEIPT")]
    assert frames[1][1].headers["receipt-id"] == "r1"


def test_deliveries_are_text_when_utf8_and_binary_otherwise(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker))
    peer.connect()
    peer.send_frame("SUBSCRIBE", {"id": "1", "destination": "/queue/a"})
    peer.send_frame("SEND", {"destination": "/queue/a", "content-length": "4"}, b"\x00\xff\xfe\x80", opcode=BINARY)
    peer.send_frame("SEND", {"destination": "/queue/a"}, "zażółć".encode())  # text body in a text message
    (binary, text) = peer.frames()
    assert (binary[0], binary[1].command, binary[1].body) == (BINARY, "MESSAGE", b"\x00\xff\xfe\x80")
    assert (text[0], text[1].command, text[1].body) == (TEXT, "MESSAGE", "zażółć".encode())


def test_bodies_that_are_not_utf8_may_come_in_text_messages(clock: Clock, broker: EmbeddedBroker) -> None:
    """stomp.py sends every frame as a text message: the STOMP codec, not autobahn, judges the bytes."""
    peer = WebSocketPeer(make_ws_factory(clock, broker))
    peer.connect()
    peer.send_frame("SEND", {"destination": "/queue/b", "content-length": "2", "receipt": "r"}, b"\xff\xfe")
    ((_, receipt),) = peer.frames()
    assert receipt.command == "RECEIPT"
    assert [message.body for message in broker.queues["/queue/b"].messages()] == [b"\xff\xfe"]  # type: ignore[attr-defined]


def test_heartbeats_travel_both_ways_as_newline_messages(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker, heartbeat_send_ms=100, heartbeat_receive_ms=100))
    assert peer.connect(**{"heart-beat": "100,100"}).headers["heart-beat"] == "100,100"
    for _ in range(10):  # the client's newlines keep the session alive for a second
        clock.advance(0.1)
        peer.send(b"\n")
        assert peer.messages() == [(TEXT, b"\n")]
    clock.advance(0.1)
    clock.advance(0.1)  # silent for longer than 1.5 x 100 ms
    assert [opcode for opcode, _ in peer.messages()][-1] == CLOSE
    assert peer.stomp.session is not None and peer.stomp.session.state != "connected"


def test_an_error_frame_goes_out_before_a_normal_close(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker))
    peer.connect()
    peer.send(b"SEND\ndestination\n\nno colon\x00")
    (error, close) = peer.messages()
    assert error[0] == TEXT and error[1].startswith(b"ERROR\n")
    assert close[0] == CLOSE and close_code(close[1]) == 1000


def test_a_closed_websocket_ends_the_session_once(
    clock: Clock, broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    factory = make_ws_factory(clock, broker)
    peer = WebSocketPeer(factory)
    peer.connect()
    peer.send_frame("SUBSCRIBE", {"id": "1", "destination": "/queue/c"})
    lost: list[Failure] = []
    original = StompServerProtocol.connectionLost

    def counted(self: StompServerProtocol, reason: Failure = connectionDone) -> None:
        lost.append(reason)
        original(self, reason)

    monkeypatch.setattr(StompServerProtocol, "connectionLost", counted)
    peer.send(b"\x03\xe8", CLOSE)  # the client closes (1000)
    ((opcode, payload),) = peer.messages()
    assert (opcode, close_code(payload)) == (CLOSE, 1000)  # the close handshake's answer
    assert peer.transport.disconnecting
    peer.lose_connection()
    peer.lose_connection()
    assert len(lost) == 1
    assert factory.stomp_factory.connections == set()
    assert peer.stomp.session is not None and peer.stomp.session.state == "closed"
    assert broker.status()["queues"]["/queue/c"]["consumers"] == 0


def test_a_connection_lost_before_the_handshake_has_no_session(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = make_ws_factory(clock, broker)
    protocol = build_protocol(factory)
    protocol.makeConnection(StringTransport(peerAddress=CLIENT))
    protocol.connectionLost(connectionDone)
    assert protocol.stomp is None and factory.stomp_factory.connections == set()


def test_holding_and_slicing_input_pause_the_tcp_transport(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker))
    peer.connect()
    assert peer.transport.producer is peer.stomp  # the socket's write buffer pauses deliveries
    peer.stomp.hold_input()
    assert peer.transport.producerState == "paused"
    peer.stomp.release_input()
    assert peer.transport.producerState == "producing"
    count = 200
    burst = b"".join(encode_frame(Frame("SEND", {"destination": "/queue/d"}, b"x" * 100), "1.2")
                     for _ in range(count))
    assert count > 2 * INPUT_FRAMES
    peer.send(burst, BINARY)
    assert peer.transport.producerState == "paused"  # handled a slice per reactor turn
    clock.advance(0)
    clock.advance(0)
    while peer.transport.producerState == "paused":
        clock.advance(0)
    assert broker.status()["queues"]["/queue/d"]["pending"] == 200


def test_an_oversize_message_is_refused_from_its_header(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker, max_frame_size=1024))
    peer.connect()
    header = ABNF.create_frame(b"x" * (8 << 20), TEXT).format()[:14]  # 8 MiB announced, none of it sent
    peer.protocol.dataReceived(header)
    (error, close) = peer.messages()
    assert error[0] == TEXT and error[1].startswith(b"ERROR\nmessage:frame too large\n"), error
    assert b"limit of 1024 bytes" in error[1]
    assert close[0] == CLOSE
    assert peer.transport.disconnecting
    peer.protocol.dataReceived(b"x" * 4096)  # the rest of the payload is ignored, not buffered
    assert peer.messages() == []


def test_messages_to_the_client_may_be_larger_than_the_incoming_limit(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = WebSocketPeer(make_ws_factory(clock, broker, max_frame_size=1024))
    peer.connect()
    peer.send_frame("SUBSCRIBE", {"id": "1", "destination": "/queue/e"})
    body = b"y" * 900  # the SEND fits the limit; the MESSAGE, with its headers, does not
    peer.send_frame("SEND", {"destination": "/queue/e"}, body)
    ((opcode, message),) = peer.frames()
    assert (opcode, message.command, message.body) == (TEXT, "MESSAGE", body)
    assert len(encode_frame(message, "1.2")) > 1024
