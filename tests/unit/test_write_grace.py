"""Deliveries follow the transport's write buffer with a grace (``WRITE_GRACE``): Twisted's buffer is
full past 64 KB, which one 64 KB message is on its own; deliveries pause once ``WRITE_GRACE`` more
bytes are written and resume when the transport has written everything out.

The transport here is Twisted's own write buffer (``FileDescriptor``) without a socket: it reports
full after every write past its size, as TCP does; the once-reporting variant reports it only the
first time until drained, as a TLS transport's producer membrane does.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.abstract import FileDescriptor
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IPushProducer
from twisted.internet.task import Clock

from bench.hotpath_inprocess import Selectables
from gateway.broker.broker import EmbeddedBroker
from gateway.stomp.protocol import WRITE_GRACE
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_session import make_factory


class BufferedTransport(FileDescriptor):
    """Twisted's write buffer and its back-pressure reports; :meth:`drain` is a ``doWrite`` that sent all."""

    def __init__(self) -> None:
        super().__init__(Selectables())  # type: ignore[arg-type]
        self.connected = 1
        self.reports = 0

    @property
    def held(self) -> int:
        return self._tempDataLen

    def drain(self) -> bytes:
        data = b"".join(self._tempDataBuffer)
        self._tempDataBuffer.clear()
        self._tempDataLen = 0
        if self.producer is not None and self.producerPaused:
            self.producerPaused = False
            IPushProducer(self.producer).resumeProducing()  # (the session: a streaming producer)
        return data

    def _maybePauseProducer(self) -> None:
        if self.producer is not None and self._isSendBufferFull():
            self.reports += 1
        super()._maybePauseProducer()

    def getPeer(self) -> IPv4Address:
        return IPv4Address("TCP", "127.0.0.1", 40000)

    def getHost(self) -> IPv4Address:
        return IPv4Address("TCP", "127.0.0.1", 61613)


class OnceReportingTransport(BufferedTransport):
    """Reports the buffer full once until it is drained (TLS's producer membrane passes one pause on)."""

    def _maybePauseProducer(self) -> None:
        if not self.producerPaused:
            super()._maybePauseProducer()


def connected(factory: Any, transport: BufferedTransport) -> Any:
    protocol = factory.buildProtocol(None)
    protocol.makeConnection(transport)
    protocol.dataReceived(encode_frame(Frame("CONNECT", {"accept-version": "1.2", "host": "x"}), "1.2"))
    transport.drain()
    return protocol


def messages(data: bytes) -> list[Frame]:
    return [item for item in FrameDecoder(version="1.2").feed(data) if isinstance(item, Frame)
            and item.command == "MESSAGE"]


def subscribed(transport_type: type[BufferedTransport],
               destination: str) -> tuple[Clock, EmbeddedBroker, BufferedTransport, Any]:
    """An embedded broker on a clock, a consumer of ``destination`` on a ``transport_type`` and a
    producer's connection (the clock, the broker, the consumer's transport, the producer's protocol)."""
    clock = Clock()
    broker = EmbeddedBroker(clock)
    broker.start()
    factory = make_factory(clock, broker)
    transport = transport_type()
    consumer = connected(factory, transport)
    consumer.dataReceived(encode_frame(Frame("SUBSCRIBE", {"destination": destination, "id": "s"}), "1.2"))
    return clock, broker, transport, connected(factory, BufferedTransport())


@pytest.mark.parametrize("transport_type", [BufferedTransport, OnceReportingTransport])
def test_large_messages_are_written_until_the_grace_is_used(transport_type: type[BufferedTransport]) -> None:
    _, broker, transport, producer = subscribed(transport_type, "/queue/big")
    body = b"y" * 65536
    for _ in range(10):
        producer.dataReceived(encode_frame(Frame("SEND", {"destination": "/queue/big"}, body), "1.2"))
    turns = []
    for _ in range(10):
        held = transport.held
        got = messages(transport.drain())
        if not got:
            break
        turns.append(len(got))
        size = held // len(got)
        assert held <= transport.bufferSize + WRITE_GRACE + size
    # The message that filled the buffer counts towards the grace: 3 x 65.6 KB reach 192 KB (before: 1 a turn).
    assert turns == [3, 3, 3, 1]
    broker.stop()


@pytest.mark.parametrize("transport_type", [BufferedTransport, OnceReportingTransport])
def test_a_consumer_that_never_drains_holds_a_bounded_buffer(transport_type: type[BufferedTransport]) -> None:
    clock, broker, transport, producer = subscribed(transport_type, "/queue/slow")
    frame = encode_frame(Frame("SEND", {"destination": "/queue/slow"}, b"z" * 100), "1.2")
    producer.dataReceived(frame * 5000)
    while any("_handle_next_slice" in repr(call) for call in clock.getDelayedCalls()):
        clock.advance(0)  # (the input slices of the burst)
    assert transport.reports >= 1
    # Small frames end the grace by their number: a consumer that falls behind is not handed 192 KB of
    # small messages (~1,300 of latency); the buffer is full plus a few frames (it was full + WRITE_GRACE).
    assert transport.bufferSize <= transport.held <= transport.bufferSize + 4 * 512  # (four frames of ~150 B)
    pending = broker.status()["queues"]["/queue/slow"]["pending"]
    assert pending > 0
    got = messages(transport.drain())  # written out: the rest comes
    while more := messages(transport.drain()):
        got += more
    assert len(got) == 5000
    broker.stop()
