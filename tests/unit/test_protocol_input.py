"""StompServerProtocol handles a client's frames at most INPUT_FRAMES frames or INPUT_SLICE bytes per
reactor turn.

StringTransport and Clock; :func:`next_turn` runs what a reactor turn runs.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.stomp.protocol import INPUT_FRAMES, INPUT_SLICE
from gateway.wire.codec import encode_frame
from gateway.wire.frame import Frame
from tests.unit.test_session import Peer, connect, make_factory

BODY = b"b" * 100
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def frames_of_burst(count: int, destination: str = "/queue/burst", body: bytes = BODY) -> list[bytes]:
    """``count`` encoded SENDs, each with a receipt named after its index."""
    return [encode_frame(Frame("SEND", {"destination": destination, "receipt": str(index)}, body), "1.2")
            for index in range(count)]


def burst(count: int, destination: str = "/queue/burst") -> bytes:
    """``count`` SENDs, each with a receipt named after its index, as one read."""
    return b"".join(frames_of_burst(count, destination))


def turns_of(sizes: list[int]) -> list[int]:
    """Frames handled per turn: each turn takes frames until they are INPUT_FRAMES or their bytes
    reach INPUT_SLICE."""
    turns = []
    taken = handled = 0
    for size in sizes:
        taken += size
        handled += 1
        if taken >= INPUT_SLICE or handled == INPUT_FRAMES:
            turns.append(handled)
            taken = handled = 0
    if handled:
        turns.append(handled)
    return turns


def payload(message: Message) -> bytes:
    """A stored message's body as the bytes its SEND carried."""
    if isinstance(message, TextMessage):
        assert message.text is not None
        return message.text.encode()
    assert isinstance(message, BytesMessage)
    return message.body


def next_turn(clock: Clock) -> None:
    """Run the calls due now, not those they schedule (a reactor runs those a turn later;
    ``Clock.advance`` would run them at once)."""
    due = [call for call in clock.calls if call.getTime() <= clock.seconds()]
    for call in due:
        if call.active():
            clock.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)


def pending_slices(clock: Clock) -> int:
    return sum(1 for call in clock.getDelayedCalls() if "_handle_next_slice" in repr(call))


def receipts(peer: Peer) -> list[int]:
    frames = peer.received()
    assert all(frame.command == "RECEIPT" for frame in frames), frames
    return [int(frame.headers["receipt-id"]) for frame in frames]


def bodies(broker: EmbeddedBroker, destination: str) -> list[bytes]:
    return [message.body for message in broker.queues[destination].messages()]  # type: ignore[attr-defined]


def test_a_burst_is_handled_one_slice_per_turn_in_order(clock: Clock, broker: EmbeddedBroker) -> None:
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    frames = frames_of_burst(300)
    data = b"".join(frames)
    assert len(frames) > 4 * INPUT_FRAMES
    expected = turns_of([len(frame) for frame in frames])
    peer.protocol.dataReceived(data)
    first = receipts(peer)
    assert first == list(range(len(first)))
    assert len(first) == expected[0]
    assert peer.transport.producerState == "paused"  # no more reading until the burst is handled
    seen = list(first)
    per_turn = [len(first)]
    while peer.transport.producerState == "paused":
        next_turn(clock)
        got = receipts(peer)
        per_turn.append(len(got))
        seen += got
    assert seen == list(range(300))
    assert per_turn == expected
    assert broker.status()["queues"]["/queue/burst"]["pending"] == 300


def test_a_turn_takes_as_many_1k_frames_as_small_ones(clock: Clock, broker: EmbeddedBroker) -> None:
    """A turn's bound is mostly frames (a frame's cost is mostly per frame): 1 KB SENDs in a 64 KB read
    take two turns, not one per 8 KB (nine, each a pass through the reactor)."""
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    frames = frames_of_burst(58, body=b"k" * 1024)
    data = b"".join(frames)
    assert len(data) <= 65536  # (one read of a TCP transport)
    peer.protocol.dataReceived(data)
    per_turn = [len(receipts(peer))]
    while peer.transport.producerState == "paused":
        next_turn(clock)
        per_turn.append(len(receipts(peer)))
    assert per_turn == [INPUT_FRAMES, 58 - INPUT_FRAMES]
    assert broker.status()["queues"]["/queue/burst"]["pending"] == 58


def test_another_clients_frames_wait_for_one_turn_of_a_burst_at_most(clock: Clock, broker: EmbeddedBroker) -> None:
    """A client's burst is handled a turn at a time: another client's SEND that arrives meanwhile is
    handled in the turn its read comes, after at most one turn's frames of the burst."""
    factory = make_factory(clock, broker)
    busy, other = Peer(factory), Peer(factory)
    connect(busy)
    connect(other)
    busy.protocol.dataReceived(burst(300))
    assert len(receipts(busy)) == INPUT_FRAMES
    other.protocol.dataReceived(encode_frame(Frame("SEND", {"destination": "/queue/other", "receipt": "0"},
                                                   b"o"), "1.2"))
    assert receipts(other) == [0]
    next_turn(clock)
    assert len(receipts(busy)) == INPUT_FRAMES  # the burst goes on a turn at a time
    assert broker.status()["queues"]["/queue/other"]["pending"] == 1


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


def test_a_large_frame_takes_no_extra_turns(clock: Clock, broker: EmbeddedBroker) -> None:
    """64 KB bodies in 64 KB reads (what a TCP transport delivers): each read is handled when it comes,
    without pausing reading or scheduling turns for the part of a frame that has not all arrived."""
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    bodies_sent = [bytes([index]) * 65536 for index in range(1, 5)]
    frames = [encode_frame(Frame("SEND", {"destination": "/queue/big", "receipt": str(index)}, body), "1.2")
              for index, body in enumerate(bodies_sent)]
    data = b"".join(frames)
    ends = [sum(map(len, frames[: index + 1])) for index in range(len(frames))]
    seen: list[int] = []
    for start in range(0, len(data), 65536):
        peer.protocol.dataReceived(data[start:start + 65536])
        assert pending_slices(clock) == 0
        assert peer.transport.producerState == "producing"
        seen += receipts(peer)
        assert seen == [index for index, end in enumerate(ends) if end <= start + 65536]
    assert bodies(broker, "/queue/big") == bodies_sent


BIG = 70_000


@st.composite
def client_input(draw: st.DrawFn) -> tuple[list[tuple[bytes, bool]], bytes, list[int]]:
    """SENDs (body, whether it is text) of any size up to a little over 64 KB: bytes with
    ``content-length`` (NULs inside), text without; heart-beats between some; the stream cut into reads."""
    sends = []
    stream = b""
    for index in range(draw(st.integers(1, 12))):
        size = draw(st.sampled_from([0, 1, 100, 8191, 8192, 20_000, 65536, BIG]))
        if draw(st.booleans()):
            body = (bytes([index % 7]) + b"\x00ab") * (size // 4) + b"\x00" * (size % 4)
            frame = encode_frame(Frame("SEND", {"destination": "/queue/mix", "receipt": str(index)}, body), "1.2")
            sends.append((body, False))
        else:
            body = (b"t%d-" % index) * (size // 4 + 1)
            frame = encode_frame(Frame("SEND", {"destination": "/queue/mix", "receipt": str(index)}, body), "1.2",
                                 add_content_length=False)
            sends.append((body, True))
        stream += b"\n" * draw(st.integers(0, 2)) + frame
    cuts = sorted(draw(st.sets(st.integers(1, max(len(stream) - 1, 1)), max_size=12)))
    if draw(st.booleans()):  # also the reads of a TCP transport
        cuts = sorted({*cuts, *range(65536, len(stream), 65536)})
    return sends, stream, [cut for cut in cuts if cut < len(stream)]


@SETTINGS
@given(client_input())
def test_frames_cut_anywhere_arrive_whole_in_order_with_bounded_turns(
        case: tuple[list[tuple[bytes, bool]], bytes, list[int]]) -> None:
    """However the input is cut into reads, every SEND arrives whole and in order, a turn handles
    at most INPUT_FRAMES frames and frames only until they reach INPUT_SLICE bytes, and reading resumes
    once all is handled."""
    sends, stream, cuts = case
    clock = Clock()
    broker = EmbeddedBroker(clock)
    broker.start()
    peer = Peer(make_factory(clock, broker))
    connect(peer)
    sizes = {str(index): len(encode_frame(Frame("SEND", {"destination": "/queue/mix", "receipt": str(index)}, body),
                                          "1.2", add_content_length=not text))
             for index, (body, text) in enumerate(sends)}
    seen: list[int] = []

    def collect() -> None:
        got = receipts(peer)
        assert sum(sizes[str(index)] for index in got[:-1]) < INPUT_SLICE  # the turn's last frame reached it
        assert len(got) <= INPUT_FRAMES
        seen.extend(got)

    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        while peer.transport.producerState == "paused":
            next_turn(clock)
            collect()
        peer.protocol.dataReceived(stream[start:end])
        collect()
    while peer.transport.producerState == "paused":
        next_turn(clock)
        collect()
    assert seen == list(range(len(sends)))
    assert pending_slices(clock) == 0
    stored = broker.queues["/queue/mix"].messages()
    assert [payload(message) for message in stored] == [body for body, _ in sends]
    broker.stop()
