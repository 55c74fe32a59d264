"""StompServerProtocol gathers the MESSAGE frames an input slice causes and hands each connection's to
its transport in one call (OUTPUT_BATCH), keeping their order and the other connections' share.

StringTransport (which records each write call) and Clock; :func:`next_turn` runs what a reactor turn runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from gateway.broker.broker import EmbeddedBroker
from gateway.stomp.protocol import INPUT_FRAMES, OUTPUT_BATCH, StompServerFactory
from gateway.stomp.websocket import WebSocketTransport
from gateway.wire.codec import FrameDecoder, encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_protocol_input import next_turn
from tests.unit.test_session import Peer, connect, make_factory


class CountingTransport(StringTransport):
    """A StringTransport that counts the calls that write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.writes += 1
        StringTransport.write(self, b"".join(data))


class CountingPeer(Peer):
    transport: CountingTransport

    def __init__(self, factory: StompServerFactory) -> None:
        self.protocol = factory.buildProtocol(None)
        self.transport = CountingTransport()
        self.protocol.makeConnection(self.transport)
        self.decoder = FrameDecoder(version="1.2")
        self.frames: list[Frame] = []


def sends(count: int, destination: str, body: bytes = b"m" * 100) -> bytes:
    return encode_frame(Frame("SEND", {"destination": destination, "content-type": "text/plain"}, body),
                        "1.2") * count


def subscribe(peer: Peer, destination: str) -> None:
    peer.send("SUBSCRIBE", {"destination": destination, "id": "s", "ack": "auto", "receipt": "r"})
    assert [frame.command for frame in peer.received()] == ["RECEIPT"]


def test_the_messages_of_one_turn_are_one_write(clock: Clock, broker: EmbeddedBroker) -> None:
    """Fails with a write per MESSAGE (as before the change: 40 writes for 40 MESSAGEs)."""
    factory = make_factory(clock, broker)
    producer, consumer = Peer(factory), CountingPeer(factory)
    connect(producer)
    connect(consumer)
    subscribe(consumer, "/queue/c")
    consumer.transport.writes = 0
    producer.protocol.dataReceived(sends(INPUT_FRAMES, "/queue/c"))
    assert consumer.transport.writes == 1
    frames = consumer.received()
    assert len(frames) == INPUT_FRAMES and all(frame.command == "MESSAGE" for frame in frames)


def test_a_burst_is_one_write_a_turn_per_consumer_and_each_consumer_gets_its_share(
        clock: Clock, broker: EmbeddedBroker) -> None:
    """A burst to two queues: each turn writes both consumers their MESSAGEs of that turn, one write each;
    neither waits for the other's (gathering is per connection and ends with the slice)."""
    factory = make_factory(clock, broker)
    producer, first, second = Peer(factory), CountingPeer(factory), CountingPeer(factory)
    for peer in (producer, first, second):
        connect(peer)
    subscribe(first, "/queue/one")
    subscribe(second, "/queue/two")
    first.transport.writes = second.transport.writes = 0
    one = encode_frame(Frame("SEND", {"destination": "/queue/one"}, b"1" * 100), "1.2")
    two = encode_frame(Frame("SEND", {"destination": "/queue/two"}, b"2" * 100), "1.2")
    producer.protocol.dataReceived((one + two) * (3 * INPUT_FRAMES // 2))  # three turns of 40 frames
    turns = []
    while True:
        turns.append((first.transport.writes, len(first.received()), second.transport.writes,
                      len(second.received())))
        first.transport.writes = second.transport.writes = 0
        if producer.transport.producerState != "paused":
            break
        next_turn(clock)
    assert turns == [(1, INPUT_FRAMES // 2, 1, INPUT_FRAMES // 2)] * 3


def test_a_large_batch_is_written_before_the_slice_ends(clock: Clock, broker: EmbeddedBroker) -> None:
    """The transport learns of gathered frames at most OUTPUT_BATCH bytes late (its back-pressure)."""
    factory = make_factory(clock, broker)
    producer, consumer = Peer(factory), CountingPeer(factory)
    connect(producer)
    connect(consumer)
    subscribe(consumer, "/queue/big")
    consumer.transport.writes = 0
    body = b"b" * 4000
    producer.protocol.dataReceived(sends(17, "/queue/big", body))  # (~68 KB: one slice, INPUT_SLICE's last frame)
    frames = consumer.received()
    assert len(frames) == 17
    frame_size = len(encode_frame(frames[0], "1.2"))
    per_write = -(-OUTPUT_BATCH // frame_size)  # (frames until the gathered bytes reach OUTPUT_BATCH)
    assert per_write < 17
    assert consumer.transport.writes == -(-17 // per_write)


def test_a_receipt_comes_after_the_messages_gathered_before_it(clock: Clock, broker: EmbeddedBroker) -> None:
    """A client that sends to the queue it consumes and asks for a receipt in the same read: its
    MESSAGE (gathered) is written before the RECEIPT (written at once)."""
    factory = make_factory(clock, broker)
    peer = CountingPeer(factory)
    connect(peer)
    subscribe(peer, "/queue/self")
    data = sends(3, "/queue/self") + encode_frame(
        Frame("SEND", {"destination": "/queue/other", "receipt": "done"}, b"x"), "1.2") + sends(2, "/queue/self")
    peer.protocol.dataReceived(data)
    assert [frame.command for frame in peer.received()] == ["MESSAGE"] * 3 + ["RECEIPT"] + ["MESSAGE"] * 2


def test_an_error_comes_after_the_messages_gathered_before_it(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = make_factory(clock, broker)
    peer = CountingPeer(factory)
    connect(peer)
    subscribe(peer, "/queue/self")
    peer.protocol.dataReceived(sends(2, "/queue/self") + b"NONSENSE\n\n\x00")
    assert [frame.command for frame in peer.received()] == ["MESSAGE", "MESSAGE", "ERROR"]
    assert peer.closed


def test_deliveries_outside_an_input_slice_are_written_at_once(clock: Clock, broker: EmbeddedBroker) -> None:
    """Messages waiting for a SUBSCRIBE are delivered in its slice (gathered, written at its end); a
    scheduled message, delivered from a timer, is written when it is delivered."""
    factory = make_factory(clock, broker)
    producer, consumer = Peer(factory), CountingPeer(factory)
    connect(producer)
    connect(consumer)
    producer.protocol.dataReceived(sends(5, "/queue/wait"))
    consumer.transport.writes = 0
    consumer.protocol.dataReceived(encode_frame(Frame("SUBSCRIBE", {"destination": "/queue/wait", "id": "s",
                                                                    "ack": "auto"}), "1.2"))
    assert consumer.transport.writes == 1 and len(consumer.received()) == 5
    producer.send("SEND", {"destination": "/queue/wait", "AMQ_SCHEDULED_DELAY": "1000"}, b"later")
    assert consumer.received() == []
    consumer.transport.writes = 0
    clock.advance(1.5)
    assert not factory.unflushed and not factory.gathering
    assert consumer.transport.writes == 1
    assert [frame.body for frame in consumer.received()] == [b"later"]


def test_a_websocket_transport_gets_one_write_per_frame() -> None:
    """One write of a WebSocket transport is one WebSocket message: frames are not joined."""
    class Channel:
        transport = StringTransport()
        sent: list[bytes] = []

        def can_send_messages(self) -> bool:
            return True

        def send_stomp_message(self, data: bytes, binary: bool) -> None:
            self.sent.append(data)

    channel = Channel()
    transport = WebSocketTransport(channel)  # type: ignore[arg-type]
    assert transport.one_message_per_write
    clock = Clock()
    broker = EmbeddedBroker(clock)
    factory = make_factory(clock, broker)
    producer = Peer(factory)
    connect(producer)
    consumer = factory.buildProtocol(None)
    consumer.makeConnection(transport)
    consumer.dataReceived(encode_frame(Frame("CONNECT", {"accept-version": "1.2", "host": "h"}), "1.2"))
    consumer.dataReceived(encode_frame(Frame("SUBSCRIBE", {"destination": "/queue/ws", "id": "s"}), "1.2"))
    channel.sent.clear()
    producer.protocol.dataReceived(sends(3, "/queue/ws"))
    assert len(channel.sent) == 3 and all(data.startswith(b"MESSAGE\n") for data in channel.sent)
