"""The load generator's lean consumer (:class:`bench.stomp_load.FrameCounter`): MESSAGE frames counted and
their ``ack`` ids picked out of the bytes, whatever way the reads cut the frames; an ERROR raised."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.stomp_load import FrameCounter, StompSocket, send_parts


class _Client(StompSocket):
    def __init__(self, sock: socket.socket) -> None:  # (no CONNECT: the test writes the server's side)
        self.sock = sock


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, FrameCounter]]:
    server, client = socket.socketpair()
    yield server, FrameCounter(_Client(client))
    server.close()
    client.close()


def message(number: int, body: bytes = b"x" * 100) -> bytes:
    return (b"MESSAGE\ndestination:/queue/a\nmessage-id:ID\\c%d\nsubscription:bench\nack:%d\\c1\n"
            b"content-length:%d\n\n%s\x00\n" % (number, number, len(body), body))


def test_counts_frames_and_ids_however_the_reads_cut_them(pair: tuple[socket.socket, FrameCounter]) -> None:
    server, counter = pair
    stream = b"".join(message(number) for number in range(50))
    seen, ids = 0, []
    for start in range(0, len(stream), 97):  # cuts in headers, bodies and between frames
        server.sendall(stream[start:start + 97])
        count, picked = counter.read(acks=True)
        seen += count
        ids += picked
    assert seen == 50
    assert ids == [b"%d\\c1" % number for number in range(50)]  # (escaped, as an ACK sends them back)


def test_a_frame_split_before_its_nul_is_counted_once_when_complete(
        pair: tuple[socket.socket, FrameCounter]) -> None:
    server, counter = pair
    frame = message(1, b"x" * 70_000)
    server.sendall(frame[:-2])
    assert counter.read(acks=False) == (0, [])
    server.sendall(frame[-2:])
    assert counter.read(acks=False) == (1, [])


def test_a_frame_larger_than_the_buffer_grows_it(pair: tuple[socket.socket, FrameCounter]) -> None:
    server, counter = pair
    counter = FrameCounter(counter.client, size=64)
    stream = message(1, b"x" * 500) + message(2)
    for start in range(0, len(stream), 50):
        server.sendall(stream[start:start + 50])
    seen = 0
    while seen < 2:
        seen += counter.read(acks=False)[0]
    assert seen == 2 and len(counter.buffer) >= 512


def test_an_error_frame_is_raised(pair: tuple[socket.socket, FrameCounter]) -> None:
    server, counter = pair
    server.sendall(message(1) + b"ERROR\nmessage:not allowed\ncontent-length:3\n\nno!\x00\n")
    with pytest.raises(RuntimeError, match="not allowed"):
        counter.read(acks=False)


def test_send_parts_writes_every_byte_in_order_however_much_each_call_takes() -> None:
    server, client = socket.socketpair()
    parts = [bytes([index % 251]) * size for index, size in enumerate([3, 70_000, 1, 200_000, 5] * 300)]
    received = bytearray()
    with ThreadPoolExecutor(1) as pool:
        sending = pool.submit(send_parts, server, parts)
        while len(received) < sum(map(len, parts)):
            received += client.recv(1 << 20)
        sending.result()
    assert bytes(received) == b"".join(parts)
    server.close()
    client.close()
