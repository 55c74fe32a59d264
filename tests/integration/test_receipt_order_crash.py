"""Crash test: a RECEIPT covers every earlier SEND of its connection (issue 38, defect 1).

A raw-socket client pipelines 3,000 persistent SENDs and then one SEND that
needs no store write (non-persistent) with a receipt; the gateway process gets
SIGKILL the moment that RECEIPT arrives.  After the restart every one of the
3,000 persistent messages must be there: the receipt of the last SEND said
the earlier ones were stored (docs/persistence.md).  The same to a topic with
a durable subscription.  Before the fix hundreds to thousands were missing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway.wire.frame import Frame
from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.raw_stomp import RawStomp

PIPELINED = 3000


def pipeline(destination: str, last_to: str) -> bytes:
    """``PIPELINED`` persistent SENDs, then a non-persistent one asking for the receipt ``last``
    (to the same destination, or to ``last_to``)."""
    sends = [f"SEND\ndestination:{destination}\npersistent:true\n\nm{n}\x00" for n in range(PIPELINED)]
    last = destination if last_to == "same" else last_to
    sends.append(f"SEND\ndestination:{last}\npersistent:false\nreceipt:last\n\nlast\x00")
    return "".join(sends).encode()


def receipt_then_kill(client: RawStomp, gateway: GatewayProcess) -> None:
    """Wait for RECEIPT ``last`` (nothing else may come first) and SIGKILL the gateway at once."""
    frame = client.frame(timeout=60)
    if frame.command == "RECEIPT":
        gateway.kill()
    assert frame.command == "RECEIPT" and frame.headers["receipt-id"] == "last", frame
    client.close()


def drain(client: RawStomp, subscribe: str, expected: int) -> set[str]:
    """SUBSCRIBE (auto ack) and collect bodies until ``expected`` came or none for 3 s."""
    client.send(subscribe)
    bodies: set[str] = set()
    while len(bodies) < expected:
        item = client.item(timeout=3)
        if item is None:
            break
        assert isinstance(item, Frame) and item.command == "MESSAGE", item
        bodies.add(item.body.decode())
    return bodies


def missing(bodies: set[str]) -> list[str]:
    return [f"m{n}" for n in range(PIPELINED) if f"m{n}" not in bodies]


LAST_TO = ["same", "/queue/elsewhere", "/topic/nobody"]
"""Where the receipted non-persistent SEND goes: the same destination, a queue, a topic without subscribers."""


@pytest.mark.parametrize("last_to", LAST_TO)
def test_a_receipt_for_a_non_persistent_send_covers_the_stored_ones_before_it(tmp_path: Path, last_to: str) -> None:
    gateway = GatewayProcess(tmp_path / "gw").start()
    with stopped_after(gateway):
        client = RawStomp(gateway.address)
        client.connect()
        client.send(pipeline("/queue/receipt.order", last_to))
        receipt_then_kill(client, gateway)
        gateway.start()
        reader = RawStomp(gateway.address)
        reader.connect()
        bodies = drain(reader, "SUBSCRIBE\nid:1\ndestination:/queue/receipt.order\nack:auto\n\n\x00", PIPELINED)
        assert missing(bodies) == [], f"{len(missing(bodies))} receipted persistent messages lost at the kill"
        reader.close()


@pytest.mark.parametrize("last_to", LAST_TO)
def test_a_receipt_covers_the_stored_sends_to_a_topic_with_a_durable_subscription(tmp_path: Path,
                                                                                   last_to: str) -> None:
    gateway = GatewayProcess(tmp_path / "gw").start()
    durable = "SUBSCRIBE\nid:d\ndestination:/topic/receipt.order\nack:auto\nactivemq.subscriptionName:keep\n\n\x00"
    with stopped_after(gateway):
        subscriber = RawStomp(gateway.address)
        subscriber.connect(extra="client-id:durable-client\n")
        subscriber.send(durable.replace("\n\n\x00", "\nreceipt:on\n\n\x00"))
        assert subscriber.frame().command == "RECEIPT"
        subscriber.send("DISCONNECT\nreceipt:bye\n\n\x00")
        assert subscriber.frame().command == "RECEIPT"
        subscriber.close()
        time.sleep(0.2)  # (the subscription is inactive: what is published now is kept for it)
        client = RawStomp(gateway.address)
        client.connect()
        client.send(pipeline("/topic/receipt.order", last_to))
        receipt_then_kill(client, gateway)
        gateway.start()
        reader = RawStomp(gateway.address)
        reader.connect(extra="client-id:durable-client\n")
        bodies = drain(reader, durable, PIPELINED)
        assert missing(bodies) == [], f"{len(missing(bodies))} receipted persistent messages lost at the kill"
        reader.close()
