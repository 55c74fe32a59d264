"""StompServerProtocol handles a client's input at most INPUT_SLICE bytes per reactor turn.

StringTransport and Clock; :func:`next_turn` runs what a reactor turn runs.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.stomp.codec import encode_frame
from gateway.stomp.frame import Frame
from gateway.stomp.protocol import INPUT_SLICE
from tests.unit.test_session import Peer, connect, make_factory

BODY = b"b" * 100


def burst(count: int, destination: str = "/queue/burst") -> bytes:
    """``count`` SENDs, each with a receipt named after its index, as one read."""
    return b"".join(
        encode_frame(Frame("SEND", {"destination": destination, "receipt": str(index)}, BODY), "1.2")
        for index in range(count)
    )


def next_turn(clock: Clock) -> None:
    """Run the calls due now, not those they schedule (a reactor runs those a turn later;
    ``Clock.advance`` would run them at once)."""
    due = [call for call in clock.getDelayedCalls() if call.getTime() <= clock.seconds()]
    for call in due:
        if call.active():
            clock.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)


def pending_slices(clock: Clock) -> int:
    return sum(1 for call in clock.getDelayedCalls() if "_handle_unread" in repr(call))


def receipts(peer: Peer) -> list[int]:
    frames = peer.received()
    assert all(frame.command == "RECEIPT" for frame in frames), frames
    return [int(frame.headers["receipt-id"]) for frame in frames]


def bodies(broker: EmbeddedBroker, destination: str) -> list[bytes]:
    return [message.body for message in broker.queues[destination].messages()]  # type: ignore[attr-defined]


def test_a_burst_is_handled_one_slice_per_turn_in_order(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    data = burst(300)
    frame_size = len(data) // 300
    assert len(data) > 4 * INPUT_SLICE
    peer.protocol.dataReceived(data)
    first = receipts(peer)
    assert first == list(range(len(first)))
    assert len(first) == INPUT_SLICE // frame_size
    assert peer.transport.producerState == "paused"  # no more reading until the burst is handled
    seen = list(first)
    turns = 1
    while peer.transport.producerState == "paused":
        next_turn(clock)
        turns += 1
        got = receipts(peer)
        assert 0 < len(got) <= INPUT_SLICE // frame_size + 1
        seen += got
    assert seen == list(range(300))
    assert turns == -(-len(data) // INPUT_SLICE)
    assert broker.status()["queues"]["/queue/burst"]["pending"] == 300


def test_small_reads_are_handled_at_once(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.protocol.dataReceived(burst(10))
    assert receipts(peer) == list(range(10))
    assert peer.transport.producerState == "producing"
    assert pending_slices(clock) == 0


def test_input_arriving_while_slices_wait_comes_after_them(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    peer.protocol.dataReceived(burst(200))
    late = encode_frame(Frame("SEND", {"destination": "/queue/burst", "receipt": "late"}, b"last"), "1.2")
    peer.protocol.dataReceived(late)  # a transport may still deliver what it had
    frames = []
    while peer.transport.producerState == "paused":
        frames += peer.received()
        next_turn(clock)
    frames += peer.received()
    assert [frame.headers["receipt-id"] for frame in frames] == [*map(str, range(200)), "late"]


def test_lost_connection_still_handles_what_the_client_sent(clock: Clock, broker: EmbeddedBroker) -> None:
    """A client that sends a burst without receipts and goes loses none of it."""
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    data = b"".join(
        encode_frame(Frame("SEND", {"destination": "/queue/gone"}, b"%05d" % index), "1.2") for index in range(2000)
    )
    peer.protocol.dataReceived(data)
    assert broker.status()["queues"]["/queue/gone"]["pending"] < 2000
    peer.protocol.connectionLost()
    assert bodies(broker, "/queue/gone") == [b"%05d" % index for index in range(2000)]
    assert pending_slices(clock) == 0


def test_malformed_input_in_a_later_slice_stops_the_connection_there(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    good = burst(100)
    peer.protocol.dataReceived(good + b"SEND\ndestination\n\nno colon\x00" + burst(100))
    frames = []
    for _ in range(20):
        frames += peer.received()
        next_turn(clock)
    assert [frame.command for frame in frames] == ["RECEIPT"] * 100 + ["ERROR"]
    assert "malformed header" in frames[-1].headers["message"]
    assert peer.closed
    assert peer.transport.producerState == "paused"  # nothing more is read from it
    assert broker.status()["queues"]["/queue/burst"]["pending"] == 100
