"""The way of a large body through the gateway: how often its bytes are copied, and that they arrive whole.

A ``content-length`` body that still lacks :data:`~gateway.wire.codec.CHUNKED_BODY` bytes when its header
block is read keeps the reads that bring the rest apart and is joined from them once
(:meth:`~gateway.wire.codec.FrameDecoder._chunked_body`); these tests pin what that must not change
(the frames, their bytes, NULs inside bodies, the errors, ``buffered`` and ``may_hold_frame``, the protocol's
input slices) and what it saves (the bytes appended to the decoder's buffer).
"""

from __future__ import annotations

import itertools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gateway.broker.broker import EmbeddedBroker
from gateway.errors import FrameTooLarge, MalformedFrame, StompProtocolError
from gateway.wire.codec import CHUNKED_BODY, FrameDecoder, Limits, encode_frame
from gateway.wire.frame import VERSIONS, Frame
from tests.unit.test_protocol_input import next_turn
from tests.unit.test_session import Peer, connect, make_factory

READ = 65536
"""What Twisted's TCP transport reads at a time."""


class AppendCountingBuffer(bytearray):
    """A decoder buffer that counts the bytes appended to it."""

    appended = 0

    def __iadd__(self, data: object) -> AppendCountingBuffer:
        self.appended += len(data)  # type: ignore[arg-type]
        return super().__iadd__(data)  # type: ignore[arg-type]


class BufferOnlyDecoder(FrameDecoder):
    """The decoder as it was before large bodies were kept apart: every read appended to the buffer."""

    def _chunk_if_large(self) -> None:
        pass


def send(body: bytes, index: int = 0) -> bytes:
    return encode_frame(Frame("SEND", {"destination": "/queue/big", "receipt": str(index)}, body), "1.2")


def reads(wire: bytes, size: int = READ) -> list[bytes]:
    return [wire[start:start + size] for start in range(0, len(wire), size)]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def test_a_large_body_is_appended_to_the_buffer_only_as_far_as_its_first_read() -> None:
    """1 MB in 64 KB reads: only the read holding the header block goes into the buffer; the other
    fifteen are kept as they came and joined once (failed before: all 1 MB appended, then copied out)."""
    body = bytes(range(256)) * 4096  # (NULs inside)
    decoder = FrameDecoder(version="1.2")
    buffer = decoder._buf = AppendCountingBuffer()
    out: list[Frame | StompProtocolError] = []
    for read in reads(send(body)):
        out += decoder.feed(read)
    assert out == [Frame("SEND", {"destination": "/queue/big", "receipt": "0", "content-length": str(len(body))},
                         body)]
    assert decoder._buf is buffer  # (the same buffer, emptied)
    assert buffer.appended <= READ
    assert decoder.buffered == 0


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
    body = b"z" * (3 * CHUNKED_BODY)
    wire = send(body)[:-1] + b"X" + b"rest"
    for decoder in (FrameDecoder(version="1.2"), BufferOnlyDecoder(version="1.2")):
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


def test_buffered_and_may_hold_frame_count_the_reads_kept_apart() -> None:
    """The protocol's input slices read both (:mod:`gateway.stomp.protocol`): a large body's reads
    count in ``buffered``, and a frame may be held only once its NUL has come."""
    body = b"\x00" * (4 * CHUNKED_BODY)
    wire = send(body) + send(b"next", 1)
    decoder = FrameDecoder(version="1.2")
    assert decoder.feed(wire[:1000]) == []
    assert decoder.buffered == 1000
    decoder.push(wire[1000:20_000])
    assert decoder.buffered == 20_000
    assert not decoder.may_hold_frame()  # (NULs inside the body: not its end)
    decoder.push(wire[20_000:len(wire) - 3])
    assert decoder.may_hold_frame()
    out = decoder.feed(wire[len(wire) - 3:])
    assert [item.body for item in out if isinstance(item, Frame)] == [body, b"next"]
    assert decoder.buffered == 0 and not decoder.may_hold_frame()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=3 * CHUNKED_BODY), st.booleans()), min_size=1,
                max_size=4),
       st.sampled_from(VERSIONS), st.lists(st.integers(min_value=0), min_size=1, max_size=12),
       st.integers(min_value=0, max_value=2**32))
def test_large_bodies_cut_anywhere_read_as_the_buffer_only_decoder_reads_them(
        sizes: list[tuple[int, bool]], version: str, cuts: list[int], seed: int) -> None:
    """Bodies up to three times the threshold (NULs inside, content-length; or without it and without
    NULs), cut anywhere, fed or pushed: the frames, their bytes, ``buffered`` and ``may_hold_frame`` as
    the decoder that appends every read gives them."""
    rng = random.Random(seed)
    frames = []
    for index, (size, with_length) in enumerate(sizes):
        body = rng.randbytes(size)
        if not with_length:
            body = body.replace(b"\x00", b"")
        frames.append((body, encode_frame(Frame("SEND", {"destination": "/q", "receipt": str(index)}, body),
                                          version, add_content_length=with_length)))
    wire = b"".join(data for _, data in frames)
    chunked, plain = FrameDecoder(Limits(), version), BufferOnlyDecoder(Limits(), version)
    got: list[Frame | StompProtocolError] = []
    for piece in split(wire, cuts):
        if rng.random() < 0.3:
            chunked.push(piece)
            plain.push(piece)
        else:
            items = chunked.feed(piece)
            assert items == plain.feed(piece)
            got += items
        assert chunked.buffered == plain.buffered
        assert chunked.may_hold_frame() == plain.may_hold_frame() or chunked.buffered > 0
    got += chunked.feed(b"")
    assert [item.body for item in got if isinstance(item, Frame)] == [body for body, _ in frames]


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
