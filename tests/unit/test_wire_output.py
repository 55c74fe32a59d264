"""The MESSAGE frames an input slice gathered for a TCP connection go to its socket at the end of the slice
when its transport holds nothing (:meth:`StompServerProtocol.flush_output` with ``now``, issue 39): no
writer registration (two ``epoll_ctl``) and no pass through the reactor's poll to write them.  So a 64 KB
read of 1 KB SENDs (two slices) no longer fills the consumer's transport past its 64 KB with the two
slices' MESSAGEs before a poll writes them, which paused and resumed its deliveries on every read.

Real TCP connections on 127.0.0.1 whose server ends are Twisted's ``tcp.Server`` on a ``MemoryReactor``
(:class:`tests.unit.test_receipt_write_now.Wired`): the test sees whether a writer was registered and what
each client socket received, without running a reactor.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.stomp.protocol import OUTPUT_BATCH
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_protocol_input import next_turn, pending_slices
from tests.unit.test_receipt_write_now import CONNECT, Wired
from tests.unit.test_session import make_factory


def send(index: int, body: bytes = b"m") -> bytes:
    return encode_frame(Frame("SEND", {"destination": "/queue/w", "n": str(index)}, body), "1.2")


@pytest.fixture
def pair(clock: Clock, broker: EmbeddedBroker) -> Iterator[tuple[Wired, Wired]]:
    """A producer and a consumer subscribed to /queue/w (auto ack), on one factory."""
    factory = make_factory(clock, broker)
    producer, consumer = Wired(factory), Wired(factory)
    for wired in (producer, consumer):
        wired.protocol.dataReceived(CONNECT)
        wired.poll()
        assert wired.received() == ["CONNECTED"]
    consumer.protocol.dataReceived(encode_frame(Frame("SUBSCRIBE", {"destination": "/queue/w", "id": "s"}), "1.2"))
    consumer.poll()
    yield producer, consumer
    producer.close()
    consumer.close()


def numbers(consumer: Wired) -> list[int]:
    """The ``n`` of the MESSAGEs the consumer's socket holds now."""
    data = b""
    consumer.client.setblocking(False)
    try:
        while chunk := consumer.client.recv(1 << 20):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        consumer.client.settimeout(5)
    frames = [frame for frame in consumer.decoder.feed(data) if isinstance(frame, Frame)]
    assert all(frame.command == "MESSAGE" for frame in frames), frames
    return [int(frame.headers["n"]) for frame in frames]


def test_a_slices_messages_are_on_the_socket_when_the_slice_ends(pair: tuple[Wired, Wired]) -> None:
    """Fails before the change: the consumer's transport registered a writer and sent nothing until the
    next poll."""
    producer, consumer = pair
    producer.protocol.dataReceived(b"".join(send(index) for index in range(10)))
    assert not consumer.waiting_to_write()
    assert numbers(consumer) == list(range(10))


def test_behind_what_the_transport_holds_they_wait_their_turn(pair: tuple[Wired, Wired]) -> None:
    """Something buffered already: the slice's MESSAGEs go behind it, on the poll (order kept)."""
    producer, consumer = pair
    held = encode_frame(Frame("MESSAGE", {"destination": "/queue/w", "message-id": "m", "subscription": "s",
                                          "n": "-1"}, b"x"), "1.2")
    consumer.transport.write(held)
    producer.protocol.dataReceived(b"".join(send(index) for index in range(5)))
    assert consumer.waiting_to_write()
    assert numbers(consumer) == []
    consumer.poll()
    assert numbers(consumer) == [-1, *range(5)]


def test_a_read_of_1k_sends_does_not_pause_the_consumers_deliveries(clock: Clock,
                                                                   pair: tuple[Wired, Wired]) -> None:
    """Fails before the change: the first slice's 40 MESSAGEs (48 KB) waited in the consumer's transport for
    the poll, the second slice's 18 took it past 64 KB, and the deliveries were paused (the write grace's
    four frames) until the poll wrote it all out, then resumed."""
    producer, consumer = pair
    session = consumer.protocol.session
    assert session is not None
    changes: list[str] = []
    pause, resume = session.pause_deliveries, session.resume_deliveries

    def pausing() -> None:
        changes.append("pause")
        pause()

    def resuming() -> None:
        changes.append("resume")
        resume()

    session.pause_deliveries = pausing  # type: ignore[method-assign]
    session.resume_deliveries = resuming  # type: ignore[method-assign]
    data = b"".join(send(index, b"k" * 1024) for index in range(58))
    assert len(data) <= 65536  # (one read)
    producer.protocol.dataReceived(data)
    got = numbers(consumer)
    next_turn(clock)  # (the read's second slice)
    got += numbers(consumer)
    assert changes == []
    assert not consumer.waiting_to_write()
    assert got == list(range(58))


def test_large_messages_past_the_output_batch_arrive_whole_and_in_order(clock: Clock,
                                                                       pair: tuple[Wired, Wired]) -> None:
    """MESSAGEs that pass :data:`OUTPUT_BATCH` within a slice are handed to the transport (buffered, as
    before); the slice's last ones go behind them, now or on the poll: all arrive, in order."""
    producer, consumer = pair
    count = 3 * OUTPUT_BATCH // 3000
    producer.protocol.dataReceived(b"".join(send(index, b"k" * 3000) for index in range(count)))
    got = numbers(consumer)
    while consumer.waiting_to_write() or pending_slices(clock):
        consumer.poll()
        got += numbers(consumer)
        next_turn(clock)
        got += numbers(consumer)
    assert got == list(range(count))
