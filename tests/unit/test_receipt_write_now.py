"""A frame written outside an input slice (a RECEIPT from a store commit's report) goes to the socket in
that turn when the TCP transport holds nothing (:meth:`StompServerProtocol._write_now`, issue 39).

A real TCP connection on 127.0.0.1 whose server end is Twisted's own ``tcp.Server`` on a
``MemoryReactor``: the test sees what the reactor would be asked to do (a writer registered: the
write waits for the next poll) and what the client's socket received, without running a reactor.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from twisted.internet import tcp
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor, StringTransport

from gateway.broker.broker import EmbeddedBroker
from gateway.stomp.protocol import StompServerFactory, StompServerProtocol
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_session import make_factory

CONNECT = encode_frame(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"}), "1.2")
SEND = encode_frame(Frame("SEND", {"destination": "/queue/w", "content-type": "text/plain"}, b"m"), "1.2")


class Wired:
    """A client socket and the protocol serving it through a real ``tcp.Server`` transport."""

    def __init__(self, factory: StompServerFactory) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        self.client = socket.create_connection(listener.getsockname())
        accepted, peer = listener.accept()
        listener.close()
        accepted.setblocking(False)
        self.client.settimeout(5)
        self.reactor = MemoryReactor()
        self.protocol: StompServerProtocol = factory.buildProtocol(peer)
        self.transport = tcp.Server(accepted, self.protocol, peer, None, 1, self.reactor)  # type: ignore[arg-type]
        self.protocol.makeConnection(self.transport)
        self.decoder = FrameDecoder(version="1.2")

    def poll(self) -> None:
        """What the reactor's next poll does for this connection: write what the transport holds."""
        if self.transport in self.reactor.getWriters():
            self.transport.doWrite()

    def waiting_to_write(self) -> bool:
        return self.transport in self.reactor.getWriters()

    def received(self) -> list[str]:
        """The commands of the frames the client socket holds now (without waiting)."""
        self.client.setblocking(False)
        data = b""
        try:
            while chunk := self.client.recv(65536):
                data += chunk
        except BlockingIOError:
            pass
        finally:
            self.client.settimeout(5)
        frames = list(self.decoder.feed(data))
        return [frame.command if isinstance(frame, Frame) else repr(frame) for frame in frames]

    def close(self) -> None:
        self.client.close()
        self.transport.socket.close()


@pytest.fixture
def wired(clock: Clock, broker: EmbeddedBroker) -> Iterator[Wired]:
    wired = Wired(make_factory(clock, broker))
    wired.protocol.dataReceived(CONNECT)
    wired.poll()
    assert wired.received() == ["CONNECTED"]
    yield wired
    wired.close()


def receipt(name: str) -> Frame:
    return Frame("RECEIPT", {"receipt-id": name})


def test_a_receipt_from_a_report_is_on_the_socket_in_the_same_turn(wired: Wired) -> None:
    """Fails before the change: the RECEIPT waited for the next poll (a writer registered, nothing sent)."""
    wired.protocol.dataReceived(SEND)
    wired.protocol.send_frame(receipt("1"))  # (outside an input slice: what a commit's report does)
    assert not wired.waiting_to_write()
    assert wired.received() == ["RECEIPT"]


def test_each_sends_receipt_goes_now_when_the_client_waits_for_it(wired: Wired) -> None:
    """A producer that waits for each RECEIPT: every one leaves at once, no writer registered."""
    for index in range(3):
        wired.protocol.dataReceived(SEND)
        wired.protocol.send_frame(receipt(str(index)))
        assert not wired.waiting_to_write()
        assert wired.received() == ["RECEIPT"]


def test_the_receipts_of_one_report_are_one_write_after_the_first(wired: Wired) -> None:
    """A pipelining producer's receipts answered by one commit: the first goes now, the others are
    buffered behind it and go out in one write on the next poll (not a send each), in order."""
    wired.protocol.dataReceived(SEND * 3)
    for index in range(3):
        wired.protocol.send_frame(receipt(str(index)))
    assert wired.waiting_to_write()
    wired.poll()
    frames = list(wired.decoder.feed(wired.client.recv(65536)))
    assert [frame.headers["receipt-id"] for frame in frames if isinstance(frame, Frame)] == ["0", "1", "2"]


def test_inside_an_input_slice_the_write_is_buffered(wired: Wired) -> None:
    """Frames answered while a client's input is handled are written on the poll, a turn's in one write."""
    factory = wired.protocol.factory
    wired.protocol.dataReceived(SEND)
    factory.gathering += 1
    try:
        wired.protocol.send_frame(receipt("1"))
    finally:
        factory.gathering -= 1
    assert wired.waiting_to_write()
    assert wired.received() == []
    wired.poll()
    assert wired.received() == ["RECEIPT"]


def test_behind_what_the_transport_holds_the_frame_waits_its_turn(wired: Wired) -> None:
    """Something buffered already: the frame goes behind it (order kept), not ahead of it."""
    wired.protocol.dataReceived(SEND)
    wired.transport.write(encode_frame(Frame("MESSAGE", {"destination": "/queue/w", "message-id": "m",
                                                         "subscription": "s"}, b"x"), "1.2"))
    wired.protocol.send_frame(receipt("1"))
    assert wired.waiting_to_write()
    wired.poll()
    assert wired.received() == ["MESSAGE", "RECEIPT"]


def test_a_frame_larger_than_the_socket_takes_is_finished_by_the_poll(wired: Wired) -> None:
    """What the socket does not take now is buffered behind, whole and in order (Twisted's TCP transport
    sends at most its ``SEND_LIMIT``, 128 KB, a call)."""
    wired.protocol.dataReceived(SEND)
    body = b"b" * 2_000_000
    wired.protocol.send_frame(Frame("ERROR", {"message": "large", "content-length": str(len(body))}, body))
    wired.protocol.send_frame(receipt("after"))
    assert wired.waiting_to_write()
    frames: list[Frame] = []
    while len(frames) < 2:
        wired.poll()
        frames += [frame for frame in wired.decoder.feed(wired.client.recv(1 << 20)) if isinstance(frame, Frame)]
    assert [(frame.command, len(frame.body)) for frame in frames] == [("ERROR", len(body)), ("RECEIPT", 0)]


def test_a_closed_peer_leaves_the_write_to_twisted(wired: Wired) -> None:
    """The peer is gone (the send fails): the usual buffered write, whose poll reports the loss."""
    wired.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    wired.client.close()
    wired.protocol.dataReceived(SEND)
    wired.protocol.send_frame(receipt("1"))  # (the first send may still succeed: the reset is seen later)
    wired.protocol.dataReceived(SEND)
    wired.protocol.send_frame(receipt("2"))
    assert wired.waiting_to_write()
    assert wired.transport.doWrite() is not None  # (the reactor drops the connection on this)
    wired.client = socket.socket()  # (for the fixture's close)


def test_another_transport_is_written_as_before(clock: Clock, broker: EmbeddedBroker) -> None:
    """Not Twisted's TCP transport (TLS, WebSocket, a test double): its own write, untouched."""
    factory = make_factory(clock, broker)
    protocol = factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.dataReceived(CONNECT + SEND)
    transport.clear()
    protocol.send_frame(receipt("1"))
    assert transport.value().startswith(b"RECEIPT\n")
