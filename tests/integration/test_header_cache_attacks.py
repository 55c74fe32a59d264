"""Black-box attacks on the header-block cache (gateway/wire/codec.py ``_HEADER_BLOCKS``).

Decoded header blocks are shared by every connection of the process; decoding must stay what it was
for each connection (its version, its limits, its frames' own dicts).  Each test but one runs against
a real ``twistd jmsgateway`` process over raw sockets.  (Written by a separate attacker with the
removal hold's attacks, which stay on branch ``attack5``: they depend on the client outrunning the
store, too timing-bound for the shared CI host; no defect was found in either.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.wire.codec import FrameDecoder
from gateway.wire.frame import Frame
from tests.integration.test_paging_attacks import connect, frame, receive, subscribe
from tests.support.gateway import GatewayProcess
from tests.support.raw_stomp import RawStomp


@pytest.fixture(scope="module")
def cache_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A gateway with max_headers 6 (so a block's line count matters)."""
    process = GatewayProcess(tmp_path_factory.mktemp("cache"), args=[
        "--set", "stomp.max_headers=6", "--set", 'auth.users={alice = "secret"}',
        "--set", "auth.allow_weak_passwords=true"])
    process.start()
    yield process
    process.kill()


def versioned(address: tuple[str, int], version: str) -> RawStomp:
    client = RawStomp(address, version=version)
    client.connect(version=version, extra="login:alice\npasscode:secret\n")
    return client


def sent_through(gateway: GatewayProcess, destination: str, blocks: list[tuple[str, bytes]]) -> list[Frame]:
    """Each (version, raw SEND frame) sent on a new connection of that version with a receipt round
    trip after it; the MESSAGEs a 1.2 subscriber of ``destination`` receives."""
    subscriber = subscribe(gateway.address, destination)
    for version, data in blocks:
        client = versioned(gateway.address, version)
        client.send(data)
        client.send("SEND\ndestination:/queue/none\nreceipt:r\n\n\x00")
        reply = client.frame()
        assert reply.command == "RECEIPT", reply
        client.close()
    got = receive(subscriber, len(blocks), timeout=5, extra=0.3)
    subscriber.close()
    return got


def test_the_same_escaped_block_decodes_per_version_on_each_connection(cache_gateway: GatewayProcess) -> None:
    r"""``x:a\cb`` is literal under 1.0 and ``a:b`` under 1.1/1.2, whichever connection came first."""
    data = b"SEND\ndestination:/queue/c.esc\nx:a\\cb\n\nbody\x00"
    got = sent_through(cache_gateway, "/queue/c.esc", [("1.0", data), ("1.2", data), ("1.1", data), ("1.0", data)])
    assert [m.headers.get("x") for m in got] == ["a\\cb", "a:b", "a:b", "a\\cb"]


def test_repeats_empty_values_and_colons_decode_alike_under_every_version(cache_gateway: GatewayProcess) -> None:
    data = b"SEND\ndestination:/queue/c.same\nx:first\nx:second\nempty:\nurl:http://h:1/p\n\nb\x00"
    got = sent_through(cache_gateway, "/queue/c.same", [(v, data) for v in ("1.2", "1.0", "1.1", "1.2")])
    assert [(m.headers.get("x"), m.headers.get("empty"), m.headers.get("url")) for m in got] \
        == [("first", "", "http://h:1/p")] * 4


def test_a_block_over_max_headers_is_refused_on_every_connection(cache_gateway: GatewayProcess) -> None:
    """6 headers pass (and are cached), 7 are refused, also after the 6-header block was cached and
    after a refused 7-header block: ERROR each time."""
    ok = b"SEND\ndestination:/queue/c.lim\na:1\nb:2\nc:3\nd:4\ne:5\n\nb\x00"
    over = b"SEND\ndestination:/queue/c.lim\na:1\nb:2\nc:3\nd:4\ne:5\nf:6\n\nb\x00"
    for data, refused in ((ok, False), (ok, False), (over, True), (over, True), (ok, False)):
        client = versioned(cache_gateway.address, "1.2")
        client.send(data + b"SEND\ndestination:/queue/none\nreceipt:r\n\n\x00")
        reply = client.frame()
        assert (reply.command == "ERROR") == refused, (data, reply)
        client.close()


def test_a_cached_block_frames_bodies_by_its_own_content_length_and_nul(cache_gateway: GatewayProcess) -> None:
    """The same block (with a content-length, and without) before bodies of different sizes and
    one that holds a NUL: each body exactly."""
    with_length = b"SEND\ndestination:/queue/c.len\ncontent-length:3\n\n"
    without = b"SEND\ndestination:/queue/c.len\n\n"
    subscriber = subscribe(cache_gateway.address, "/queue/c.len")
    client = connect(cache_gateway.address)
    client.send(with_length + b"a\x00b\x00" + without + b"xyz\x00" + with_length + b"ccc\x00" + without + b"\x00")
    client.send(with_length + b"toolong\x00")
    got = receive(subscriber, 4, timeout=5, extra=0.3)
    assert [m.body for m in got] == [b"a\x00b", b"xyz", b"ccc", b""]
    assert client.frame().command == "ERROR"


def test_receipts_of_same_and_near_blocks_each_answer_their_own_frame(cache_gateway: GatewayProcess) -> None:
    """The same block with ``receipt:same`` three times on one connection and once on another, then
    blocks that differ only in their receipt's last character: a RECEIPT each, with its own id, and
    no ``receipt`` in the MESSAGEs."""
    data = b"SEND\ndestination:/queue/c.rcpt\nreceipt:same\n\nb\x00"
    client = connect(cache_gateway.address)
    client.send(data * 3 + b"".join(b"SEND\ndestination:/queue/c.rcpt\nreceipt:r%d\n\nb\x00" % n for n in range(5)))
    other = connect(cache_gateway.address)
    other.send(data)
    receipts = [client.frame(timeout=5).headers.get("receipt-id") for _ in range(8)]
    receipts.append(other.frame(timeout=5).headers.get("receipt-id"))
    assert receipts == ["same"] * 3 + [f"r{n}" for n in range(5)] + ["same"]
    got = receive(subscribe(cache_gateway.address, "/queue/c.rcpt"), 9, timeout=5, extra=0.3)
    assert len(got) == 9 and all("receipt" not in m.headers for m in got)


def test_a_decoded_frames_headers_are_its_own() -> None:
    """Decoder level (no server path changes a SEND's dict in place today, so only this can show it):
    changing one frame's headers leaves the next frame of the same block, on another decoder of
    another version, as decoded."""
    data = b"SEND\ndestination:/queue/c.own\nreceipt:x\n\nb\x00"
    first = FrameDecoder(version="1.2").feed(data)[0]
    assert isinstance(first, Frame)
    first.headers.pop("receipt")
    first.headers["added"] = "1"
    second = FrameDecoder(version="1.0").feed(data)[0]
    assert isinstance(second, Frame) and second.headers == {"destination": "/queue/c.own", "receipt": "x"}


def test_churn_past_the_cache_size_mixed_with_repeats_decodes_every_frame(cache_gateway: GatewayProcess) -> None:
    """3,000 SENDs: 1,500 distinct blocks (past the 1,024 kept, so the cache is cleared) interleaved
    with one block repeated, from a 1.0 and a 1.2 connection in turn; every MESSAGE's header names
    its own body."""
    subscriber = subscribe(cache_gateway.address, "/queue/c.churn")
    clients = [versioned(cache_gateway.address, "1.0"), versioned(cache_gateway.address, "1.2")]
    expected: list[str] = []
    for n in range(3000):
        tag = f"d{n}" if n % 2 else "repeat"
        expected.append(tag)
        clients[n // 100 % 2].send(frame("SEND", {"destination": "/queue/c.churn", "tag": tag}, f"{n:06}"))
    for client in clients:
        client.send("SEND\ndestination:/queue/none\nreceipt:r\n\n\x00")
        assert client.frame().command == "RECEIPT"
    got: dict[int, Any] = {int(m.body): m.headers.get("tag")
                           for m in receive(subscriber, 3000, timeout=5, extra=0.3)}
    assert len(got) == 3000 and [got[n] for n in range(3000)] == expected
