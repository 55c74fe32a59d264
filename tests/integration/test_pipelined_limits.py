"""``max_size`` under pipelined persistent SENDs, against the real gateway (issue 38, defect 2).

A raw-socket client writes 200 persistent 1,000-byte SENDs in one go, each
asking for a receipt, to a destination limited to 32 KB (about 20 such
messages), while the store is still writing the first ones.  Messages on
their way to the store count against the limit, so each policy acts at the
same message as for a client waiting for each receipt:

- FAIL: receipts for the first messages in order, then the ERROR (its
  ``receipt-id`` the first refused SEND), the connection closed, and exactly
  the receipted messages stored (checked after a restart);
- BLOCK: the sender is held (receipts stop near the limit) until a consumer
  makes room, then everything arrives;
- DROP: every SEND receipted in order, the queue (and a durable subscription
  of a DROP topic) keeps at most the limit.

Before the fix FAIL stored and receipted all 200 without an ERROR, BLOCK never
held the sender and DROP kept all 200.
"""

from __future__ import annotations

import time
from pathlib import Path

from gateway.wire.frame import Frame
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.raw_stomp import RawStomp

SENDS = 200
BODY = "x" * 1000
LIMIT = 32 * 1024
MOST = LIMIT // 1500
"""At most this many 1,000-byte messages fit in :data:`LIMIT` (each counts ~1,550 bytes)."""


def limited(policy: str) -> str:
    return "".join(f'[broker.destinations."/{kind}/limited.>"]\nmax_size = "32KB"\nfull_policy = "{policy}"\n'
                   for kind in ("queue", "topic"))


def pipeline(destination: str, count: int = SENDS) -> bytes:
    return "".join(f"SEND\ndestination:{destination}\npersistent:true\nreceipt:r{n}\n\nm{n:03}{BODY}\x00"
                   for n in range(count)).encode()


def answers(client: RawStomp, timeout: float) -> list[Frame]:
    """Frames until none came for ``timeout`` seconds or the connection closed."""
    frames: list[Frame] = []
    while True:
        item = client.item(timeout=timeout)
        if item is None:
            return frames
        assert isinstance(item, Frame), item
        frames.append(item)


def drain(address: tuple[str, int], subscribe: str, connect: str = "") -> list[str]:
    reader = RawStomp(address)
    reader.connect(extra=connect)
    reader.send(subscribe)
    bodies = [frame.body.decode()[:4] for frame in answers(reader, 3) if frame.command == "MESSAGE"]
    reader.close()
    return bodies


def test_fail_refuses_the_first_send_past_the_limit_after_the_receipts_of_what_was_stored(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw", limited("FAIL")).start()
    with stopped_after(gateway):
        client = RawStomp(gateway.address)
        client.connect()
        client.send(pipeline("/queue/limited.fail"))
        frames = answers(client, 10)
        assert client.closed
        *receipts, error = frames
        stored = len(receipts)
        assert 5 < stored <= MOST
        assert [f.headers["receipt-id"] for f in receipts] == [f"r{n}" for n in range(stored)]
        assert error.command == "ERROR" and error.headers["message"] == "destination full", error
        assert error.headers["receipt-id"] == f"r{stored}"
        gateway.restart()  # what the store has
        bodies = drain(gateway.address, "SUBSCRIBE\nid:1\ndestination:/queue/limited.fail\n\n\x00")
        assert bodies == [f"m{n:03}" for n in range(stored)]


def test_block_holds_a_pipelining_sender_at_the_limit_until_a_consumer_makes_room(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw", limited("BLOCK")).start()
    with stopped_after(gateway):
        client = RawStomp(gateway.address)
        client.connect()
        client.send(pipeline("/queue/limited.block"))
        held = answers(client, 2)
        # held at the limit (what one read of the socket brought is still taken: ~64 KB)
        assert len(held) < SENDS // 2, f"{len(held)} receipts: the sender was not held"
        assert all(f.command == "RECEIPT" for f in held)
        consumer = RawStomp(gateway.address)
        consumer.connect()
        consumer.send("SUBSCRIBE\nid:1\ndestination:/queue/limited.block\n\n\x00")
        received: list[str] = []
        deadline = time.monotonic() + 30
        while len(received) < SENDS and time.monotonic() < deadline:
            frame = consumer.frame(timeout=10)
            assert frame.command == "MESSAGE"
            received.append(frame.body.decode()[:4])
        assert received == [f"m{n:03}" for n in range(SENDS)]
        rest = answers(client, 2)
        assert [f.headers["receipt-id"] for f in held + rest] == [f"r{n}" for n in range(SENDS)]


def test_drop_keeps_at_most_the_limit_and_receipts_every_send_in_order(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw", limited("DROP")).start()
    with stopped_after(gateway):
        client = RawStomp(gateway.address)
        client.connect()
        client.send(pipeline("/queue/limited.drop"))
        frames = answers(client, 3)
        assert [f.headers.get("receipt-id") for f in frames] == [f"r{n}" for n in range(SENDS)]
        bodies = drain(gateway.address, "SUBSCRIBE\nid:1\ndestination:/queue/limited.drop\n\n\x00")
        assert 5 < len(bodies) <= MOST
        assert bodies == [f"m{n:03}" for n in range(len(bodies))]


def test_a_durable_subscription_of_a_drop_topic_drops_instead_of_paging(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "gw", limited("DROP")).start()
    durable = "SUBSCRIBE\nid:d\ndestination:/topic/limited.drop\nactivemq.subscriptionName:keep\n\n\x00"
    with stopped_after(gateway):
        subscriber = RawStomp(gateway.address)
        subscriber.connect(extra="client-id:c\n")
        subscriber.send(durable.replace("\n\n\x00", "\nreceipt:on\n\n\x00"))
        assert subscriber.frame().command == "RECEIPT"
        subscriber.send("DISCONNECT\nreceipt:off\n\n\x00")
        assert subscriber.frame().command == "RECEIPT"
        client = RawStomp(gateway.address)
        client.connect()
        client.send(pipeline("/topic/limited.drop"))
        frames = answers(client, 3)
        assert [f.headers.get("receipt-id") for f in frames] == [f"r{n}" for n in range(SENDS)]
        bodies = drain(gateway.address, durable, connect="client-id:c\n")
        assert 5 < len(bodies) <= MOST
        assert bodies == [f"m{n:03}" for n in range(len(bodies))]
