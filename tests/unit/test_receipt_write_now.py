"""A frame written outside an input slice (a RECEIPT from a store commit's report) goes to the socket in
that turn when the TCP transport holds nothing (:meth:`StompServerProtocol._write_now`, issue 39); one
answered inside an input slice (a non-persistent SEND's RECEIPT) is gathered with the slice's MESSAGEs and
goes at the slice's end, the same way (helper turn).

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


def with_receipt(name: str) -> bytes:
    return encode_frame(Frame("SEND", {"destination": "/queue/w", "content-type": "text/plain",
                                       "receipt": name}, b"m"), "1.2")


class CountedWrites:
    """Counts the transport's socket writes (``writeSomeData``) and its buffered writes (``write``)."""

    def __init__(self, wired: Wired, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sends = self.buffered = 0
        transport = wired.transport
        write_some, write = transport.writeSomeData, transport.write

        def counted_send(data: bytes) -> object:
            self.sends += 1
            return write_some(data)

        def counted_write(data: bytes) -> None:
            self.buffered += 1
            write(data)

        monkeypatch.setattr(transport, "writeSomeData", counted_send)
        monkeypatch.setattr(transport, "write", counted_write)


def test_a_receipt_answered_while_the_send_is_read_is_on_the_socket_at_the_slices_end(
        wired: Wired, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails before the change: a non-persistent SEND's RECEIPT, answered inside the input slice, was a
    buffered write (a writer registered, sent on the next poll: two ``epoll_ctl`` and a turn a round trip)."""
    writes = CountedWrites(wired, monkeypatch)
    wired.protocol.dataReceived(with_receipt("1"))
    assert not wired.waiting_to_write()
    assert wired.received() == ["RECEIPT"]
    assert (writes.sends, writes.buffered) == (1, 0)


def test_the_receipts_of_one_slice_are_one_write_in_order(wired: Wired, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipelining producer's SENDs read at once: their RECEIPTs leave in one write at the slice's end."""
    writes = CountedWrites(wired, monkeypatch)
    wired.protocol.dataReceived(b"".join(with_receipt(str(index)) for index in range(3)))
    assert not wired.waiting_to_write()
    frames = list(wired.decoder.feed(wired.client.recv(65536)))
    assert [frame.headers["receipt-id"] for frame in frames if isinstance(frame, Frame)] == ["0", "1", "2"]
    assert (writes.sends, writes.buffered) == (1, 0)


def test_a_receipt_and_the_messages_of_one_slice_keep_their_order(wired: Wired) -> None:
    """A RECEIPT gathered with the slice's MESSAGEs: written in the order they were answered."""
    subscribe = encode_frame(Frame("SUBSCRIBE", {"destination": "/queue/w", "id": "s", "ack": "auto"}), "1.2")
    wired.protocol.dataReceived(subscribe + SEND + with_receipt("r") + SEND)
    assert not wired.waiting_to_write()
    assert wired.received() == ["MESSAGE", "MESSAGE", "RECEIPT", "MESSAGE"]  # (the receipted SEND: delivered, answered)


def test_an_error_in_a_slice_is_written_before_the_close(wired: Wired) -> None:
    """A frame gathered in the slice and a close in the same slice: the ERROR still reaches the client."""
    wired.protocol.dataReceived(b"NOT-A-COMMAND\n\n\x00")
    wired.poll()
    assert wired.received()[:1] == ["ERROR"]


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
