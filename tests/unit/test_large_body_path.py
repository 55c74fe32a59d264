"""Large bodies through the decoder and the server: whole, byte-exact, refused as before.

Written while measuring where a 64 KB message's CPU goes (docs/performance.md, issue 39, large
bodies): a body that spans several 64 KB reads (NULs inside, ``content-length``), what follows it in
its last read, a body whose NUL is missing, and SENDs of 64 KB through the protocol's input slices.
"""

from __future__ import annotations

import itertools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.errors import FrameTooLarge, MalformedFrame, StompProtocolError
from gateway.wire.codec import FrameDecoder, Limits, encode_frame
from gateway.wire.frame import VERSIONS, Frame
from tests.unit.test_protocol_input import next_turn
from tests.unit.test_session import Peer, connect, make_factory

READ = 65536
"""What Twisted's TCP transport reads at a time."""
LARGE = 3 * 8192
"""The largest body of the property test: a few reads' worth when they are cut small."""


def send(body: bytes, index: int = 0) -> bytes:
    return encode_frame(Frame("SEND", {"destination": "/queue/big", "receipt": str(index)}, body), "1.2")


def reads(wire: bytes, size: int = READ) -> list[bytes]:
    return [wire[start:start + size] for start in range(0, len(wire), size)]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def test_what_follows_a_large_body_in_its_last_read_is_read_on() -> None:
    """Three 100 KB frames and a small one in 64 KB reads: every frame whole, in order, and the tail
    of the read that ends a body (the next frame's start) read from the buffer."""
    bodies = [b"\x00a" * 50_000, b"b\x00" * 50_000, b"c" * 100_000, b"small"]
    wire = b"".join(send(body, index) for index, body in enumerate(bodies))
    decoder = FrameDecoder(version="1.2")
    out: list[Frame | StompProtocolError] = []
    for read in reads(wire):
        out += decoder.feed(read)
    assert [(item.headers["receipt"], item.body) for item in out if isinstance(item, Frame)] == [
        (str(index), body) for index, body in enumerate(bodies)]
    assert decoder.buffered == 0


def test_a_large_body_without_its_nul_is_refused_as_before() -> None:
    body = b"z" * LARGE
    wire = send(body)[:-1] + b"X" + b"rest"
    decoder = FrameDecoder(version="1.2")
    out: list[Frame | StompProtocolError] = []
    for read in reads(wire, 4096):
        out += decoder.feed(read)
    assert len(out) == 1 and isinstance(out[0], MalformedFrame)
    assert out[0].detail == f"frame SEND has no NUL after its content-length of {len(body)} bytes"
    assert decoder.feed(b"SEND\n\n\x00") == []  # (nothing after an error)


def test_a_content_length_over_the_frame_limit_is_refused_before_the_body_comes() -> None:
    decoder = FrameDecoder(Limits(max_frame_size=100_000), version="1.2")
    out = decoder.feed(b"SEND\ndestination:/queue/a\ncontent-length:200000\n\n" + b"x" * 1000)
    assert len(out) == 1 and isinstance(out[0], FrameTooLarge)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=LARGE), st.booleans()), min_size=1, max_size=4),
       st.sampled_from(VERSIONS), st.lists(st.integers(min_value=0), min_size=1, max_size=12),
       st.integers(min_value=0, max_value=2**32))
def test_large_bodies_cut_anywhere_read_as_in_one_feed(sizes: list[tuple[int, bool]], version: str,
                                                       cuts: list[int], seed: int) -> None:
    """Bodies up to 24 KB (random bytes with NULs and content-length, or without either), cut
    anywhere, fed or pushed (as the protocol does while a slice waits): the frames and bytes of one feed."""
    rng = random.Random(seed)
    bodies = []
    for size, with_length in sizes:
        body = rng.randbytes(size)
        bodies.append((body if with_length else body.replace(b"\x00", b""), with_length))
    wire = b"".join(encode_frame(Frame("SEND", {"destination": "/q", "receipt": str(index)}, body), version,
                                 add_content_length=with_length) for index, (body, with_length) in enumerate(bodies))
    decoder = FrameDecoder(Limits(), version)
    got: list[Frame | StompProtocolError] = []
    for piece in split(wire, cuts):
        if rng.random() < 0.3:
            decoder.push(piece)
        else:
            got += decoder.feed(piece)
    got += decoder.feed(b"")
    assert got == FrameDecoder(Limits(), version).feed(wire)
    assert [item.body for item in got if isinstance(item, Frame)] == [body for body, _ in bodies]
    assert decoder.buffered == 0


def test_64_kb_sends_through_the_protocol_reach_their_subscriber_byte_exact(clock: Clock,
                                                                           broker: EmbeddedBroker) -> None:
    """The server end to end, in 64 KB reads as Twisted's TCP transport gives them, each once the
    server reads again: SENDs of 64 KB bodies with NULs inside come out as MESSAGE frames with the same
    bytes, in order."""
    factory = make_factory(clock, broker)
    producer, consumer = Peer(factory), Peer(factory)
    connect(producer)
    connect(consumer)
    consumer.send("SUBSCRIBE", {"destination": "/queue/big", "id": "0"})
    bodies = [bytes([index]) * 100 + b"\x00" + bytes(range(256)) * 256 for index in range(5)]
    wire = b"".join(encode_frame(Frame("SEND", {"destination": "/queue/big"}, body), "1.2") for body in bodies)
    for read in reads(wire):
        while producer.transport.producerState == "paused":
            next_turn(clock)
        producer.protocol.dataReceived(read)
    while producer.transport.producerState == "paused":
        next_turn(clock)
    got = consumer.received()
    assert [frame.command for frame in got] == ["MESSAGE"] * 5
    assert [frame.body for frame in got] == bodies
    assert producer.protocol.decoder.buffered == 0
